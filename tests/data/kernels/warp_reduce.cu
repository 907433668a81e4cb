// Warp-level sum with __shfl_down_sync; lane 0 of each warp adds its sum to *total.
extern "C" __global__ void warp_reduce(const float* in, float* total, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
}
