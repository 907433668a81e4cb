#include "kernels.cuh"

__global__ void vecadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

cudaError_t launch_vecadd(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  const int block = 256;
  vecadd<<<(n + block - 1) / block, block, 0, stream>>>(a, b, c, n);
  return cudaGetLastError();
}
