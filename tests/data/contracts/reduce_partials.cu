// Per-block partial sums (strides from blockDim.x): out[blockIdx.x] holds the sum of one block's values,
// so the block's extent decides what each result covers and the block is part of the result.
extern "C" __global__ void reduce_partials(const float* in, float* out, int n) {
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
