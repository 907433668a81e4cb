// A thermal step on a square grid of cells, after the Rodinia hotspot benchmark's scheme (our own code): each
// block updates a TILE x TILE patch from a shared copy of it with a one-cell halo. The cell of a thread comes from
// the constant TILE, not from blockDim, and the halo is loaded by the threads at TILE - 1: any other block shape
// leaves cells unwritten or reads halo cells that were never loaded.
#define TILE 16
extern "C" __global__ void hotspot_tiled(const float* power, const float* temp, float* out, int rows, int cols,
                                         float step, float rx, float ry, float rz, float ambient) {
  __shared__ float t[TILE + 2][TILE + 2];
  int tx = threadIdx.x, ty = threadIdx.y;
  int x = blockIdx.x * TILE + tx, y = blockIdx.y * TILE + ty;
  int cx = min(max(x, 0), cols - 1), cy = min(max(y, 0), rows - 1);
  t[ty + 1][tx + 1] = temp[cy * cols + cx];
  if (tx == 0) t[ty + 1][0] = temp[cy * cols + max(cx - 1, 0)];
  if (tx == TILE - 1) t[ty + 1][TILE + 1] = temp[cy * cols + min(cx + 1, cols - 1)];
  if (ty == 0) t[0][tx + 1] = temp[max(cy - 1, 0) * cols + cx];
  if (ty == TILE - 1) t[TILE + 1][tx + 1] = temp[min(cy + 1, rows - 1) * cols + cx];
  __syncthreads();
  if (x < cols && y < rows) {
    float c = t[ty + 1][tx + 1];
    float flow = (t[ty + 2][tx + 1] + t[ty][tx + 1] - 2.0f * c) * ry + (t[ty + 1][tx + 2] + t[ty + 1][tx] - 2.0f * c) * rx +
                 (ambient - c) * rz;
    out[y * cols + x] = c + step * (power[y * cols + x] + flow);
  }
}
