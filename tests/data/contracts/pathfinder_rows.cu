// A minimum-cost path through a grid of weights, row by row, after the Rodinia pathfinder benchmark's scheme (our
// own code): each block takes COLS columns, keeps the running costs with a halo column each side in shared memory,
// and advances ROWS rows per launch, each column taking the cheapest of its three upper neighbours. The column of a
// thread comes from the constant COLS, and the halo is loaded by the threads at 0 and COLS - 1: another block shape
// leaves columns unwritten or reads halo costs that were never loaded.
#define COLS 256
#define ROWS 4
extern "C" __global__ void pathfinder_rows(const int* weights, const int* cost_in, int* cost_out, int cols, int row0) {
  __shared__ int cost[COLS + 2];
  int tx = threadIdx.x;
  int x = blockIdx.x * COLS + tx, cx = min(x, cols - 1);
  cost[tx + 1] = cost_in[cx];
  // halo columns: the neighbours' costs, held for the first row; later rows take the edge's own cost there
  if (tx == 0) cost[0] = cost_in[max(cx - 1, 0)];
  if (tx == COLS - 1) cost[COLS + 1] = cost_in[min(cx + 1, cols - 1)];
  __syncthreads();
  for (int r = 0; r < ROWS; r++) {
    int best = min(cost[tx], min(cost[tx + 1], cost[tx + 2])) + weights[(row0 + r) * cols + cx];
    __syncthreads();
    cost[tx + 1] = best;
    if (tx == 0) cost[0] = best;
    if (tx == COLS - 1) cost[COLS + 1] = best;
    __syncthreads();
  }
  if (x < cols) cost_out[x] = cost[tx + 1];
}
