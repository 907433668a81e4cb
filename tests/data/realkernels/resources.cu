// Kernels whose resource usage the assemblers report differently: static shared memory,
// __constant__ data, a local-memory array, and enough live values to spill under a register cap.
#define TILE 32

extern "C" __global__ void transpose_tile(const float* in, float* out, int n) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < n && y < n) out[y * n + x] = tile[threadIdx.x][threadIdx.y];
}

__constant__ float filter[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2, 1};

extern "C" __global__ void convolve(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int k = -8; k <= 8; ++k) {
    int j = i + k;
    if (j >= 0 && j < n) sum += filter[k + 8] * in[j];
  }
  out[i] = sum;
}

extern "C" __global__ void __launch_bounds__(128) local_array(const int* idx, float* out, int n) {
  float scratch[64];
  for (int k = 0; k < 64; ++k) scratch[k] = k * 0.5f + threadIdx.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scratch[idx[i] & 63];
}

extern "C" __global__ void many_live(const float* in, float* out, int n) {
  float v[48];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < 48; ++k) v[k] = in[(i + k * 977) % n];
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int k = 0; k < 48; ++k) acc += v[k] * v[(k * 7 + r) % 48];
  out[i] = acc;
}
