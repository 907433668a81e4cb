// Tiled transpose through dynamic shared memory (extern __shared__), 2D blocks of TILE x TILE.
#define TILE 16
extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
  extern __shared__ float tile[];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y * (TILE + 1) + threadIdx.x] = in[y * cols + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x * (TILE + 1) + threadIdx.y];
}
