// One-dimensional three-point stencil through a shared tile of BLOCK + 2 values (a halo each side).
// Reads blockDim.x for the global index, but the tile holds BLOCK + 2 floats: a larger block overflows it.
#define BLOCK 128
extern "C" __global__ void stencil_shared(const float* in, float* out, int n) {
  __shared__ float tile[BLOCK + 2];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int t = threadIdx.x + 1;
  tile[t] = i < n ? in[i] : 0.0f;
  if (threadIdx.x == 0) tile[0] = i > 0 && i - 1 < n ? in[i - 1] : 0.0f;
  if (threadIdx.x == blockDim.x - 1) tile[t + 1] = i + 1 < n ? in[i + 1] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = 0.25f * tile[t - 1] + 0.5f * tile[t] + 0.25f * tile[t + 1];
}
