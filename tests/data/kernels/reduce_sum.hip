#include <hip/hip_runtime.h>

// Per-block tree sum in shared memory; out[blockIdx.x] = sum of the block's elements.
// Launch with a power-of-two block of at most 256 threads.
extern "C" __global__ void reduce_sum(const float* in, float* out, int n) {
  __shared__ float partial[256];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}
