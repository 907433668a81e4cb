#include "kernels.h"

__global__ void vecadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

hipError_t launch_vecadd(const float* a, const float* b, float* c, int n, hipStream_t stream) {
  const int block = 256;
  hipLaunchKernelGGL(vecadd, dim3((n + block - 1) / block), dim3(block), 0, stream, a, b, c, n);
  return hipGetLastError();
}
