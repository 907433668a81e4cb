// 256 shared bins cleared and flushed with a blockDim.x stride: any block size works.
extern "C" __global__ void histogram_strided(const unsigned char* values, unsigned* counts, int n) {
  __shared__ unsigned bins[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&bins[values[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&counts[b], bins[b]);
}
