#pragma once
#include <cuda_runtime.h>

// c[i] = a[i] + b[i] for i < n.
__global__ void vecadd(const float* a, const float* b, float* c, int n);

// y[i] = alpha * x[i] + y[i] for i < n.
template <typename T>
__global__ void axpy(T alpha, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + y[i];
}

cudaError_t launch_vecadd(const float* a, const float* b, float* c, int n, cudaStream_t stream);
