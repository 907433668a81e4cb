#include <hip/hip_runtime.h>

// Calls the CUDA math library (libdevice): sinf, expf, sqrtf, logf, powf.
extern "C" __global__ void math_funcs(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = sinf(v) + expf(-v * v) + sqrtf(fabsf(v)) + logf(1.0f + v * v) + powf(fabsf(v), 1.5f);
  }
}
