#pragma once
#include <hip/hip_runtime.h>

// c = a + b, launched by launch_vecadd (kernels.hip, built into a static library).
hipError_t launch_vecadd(const float* a, const float* b, float* c, int n, hipStream_t stream);

// y = alpha * x + y (a template instantiated in main.hip).
template <typename T>
__global__ void axpy(T alpha, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + y[i];
}
