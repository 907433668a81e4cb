#include <hip/hip_runtime.h>

// Warp-level sum with __shfl_down (HIP 5.2 has no _sync form); lane 0 of each warp adds its sum to *total.
extern "C" __global__ void warp_reduce(const float* in, float* total, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_down(v, offset, 32);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
}
