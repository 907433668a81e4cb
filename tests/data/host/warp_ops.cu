// Warp votes, ballots, shuffles in every mode, and block-wide barrier reductions.
struct Params { int n; float scale; double offset; };

extern "C" __global__ void warp_ops(const int* in, unsigned* ballots, int* votes, int* shuffled, int* counts) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[t];
  unsigned b = __ballot_sync(0xffffffffu, v > 0);
  int all = __all_sync(0xffffffffu, v > 0), any = __any_sync(0xffffffffu, v > 0);
  if ((threadIdx.x & 31) == 0) ballots[t / 32] = b;
  votes[t] = all * 2 + any;
  int up = __shfl_up_sync(0xffffffffu, v, 3);
  int xr = __shfl_xor_sync(0xffffffffu, v, 5);
  int idx = __shfl_sync(0xffffffffu, v, 7);
  int w8 = __shfl_down_sync(0xffffffffu, v, 2, 8);
  shuffled[4 * t + 0] = up;
  shuffled[4 * t + 1] = xr;
  shuffled[4 * t + 2] = idx;
  shuffled[4 * t + 3] = w8;
  int c = __syncthreads_count(v > 0);
  int a = __syncthreads_and(v > 0);
  int o = __syncthreads_or(v > 0);
  if (threadIdx.x == 0) { counts[3 * blockIdx.x] = c; counts[3 * blockIdx.x + 1] = a; counts[3 * blockIdx.x + 2] = o; }
}

extern "C" __global__ void struct_param(Params p, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) out[i] = p.scale * i + (float)p.offset;
}

// Shuffles only (every mode, and a sub-warp width): these run in the step form, not on fibers.
extern "C" __global__ void shuffles(const int* in, int* shuffled) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[t];
  shuffled[4 * t + 0] = __shfl_up_sync(0xffffffffu, v, 3);
  shuffled[4 * t + 1] = __shfl_xor_sync(0xffffffffu, v, 5);
  shuffled[4 * t + 2] = __shfl_sync(0xffffffffu, v, 7);
  shuffled[4 * t + 3] = __shfl_down_sync(0xffffffffu, v, 2, 8);
}
