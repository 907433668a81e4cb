// HIP twin of histogram_shared.cu: 256 shared bins, one cleared and flushed per thread.
#include <hip/hip_runtime.h>
extern "C" __global__ void histogram_shared(const unsigned char* values, unsigned* counts, int n) {
  __shared__ unsigned bins[256];
  bins[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&bins[values[i]], 1u);
  __syncthreads();
  atomicAdd(&counts[threadIdx.x], bins[threadIdx.x]);
}
