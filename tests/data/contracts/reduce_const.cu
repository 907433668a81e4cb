// Tree sum of BLOCK values in shared memory whose strides start at the constant BLOCK / 2, not at
// blockDim.x / 2: every element of the array must be written, so the block must be exactly BLOCK.
#define BLOCK 256
extern "C" __global__ void reduce_const(const float* in, float* total, int n) {
  __shared__ float partial[BLOCK];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[tid] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid == 0) atomicAdd(total, partial[0]);
}
