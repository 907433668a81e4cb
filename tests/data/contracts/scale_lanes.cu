// Scales each element by a per-lane factor read from a table indexed by threadIdx.x: lanes below 128
// double, the others halve. The recorded launch (64 threads) only doubles, so a block wider than 128 does
// not verify; the assumption lives in the data, where no launch contract can read it.
extern "C" __global__ void scale_lanes(const float* in, float* out, const int* lanes, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * (lanes[threadIdx.x] < 128 ? 2.0f : 0.5f);
}
