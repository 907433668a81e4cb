// HIP twin of reduce_blockdim.cu: strides from blockDim.x, any power-of-two block up to 256.
#include <hip/hip_runtime.h>
extern "C" __global__ void reduce_blockdim(const float* in, float* total, int n) {
  __shared__ float partial[256];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid == 0) atomicAdd(total, partial[0]);
}
