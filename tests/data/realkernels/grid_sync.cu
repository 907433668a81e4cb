// Grid-wide barriers through cooperative groups (cg::this_grid().sync()), as cudaLaunchCooperativeKernel
// runs them: every block of the grid must be resident at once.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ int linear_block() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

// Each thread writes a[i] = i; after the barrier it reads the element one block further on, which
// another block wrote. Blocks are numbered x first, then y, then z.
extern "C" __global__ void rotate_after_sync(int* a, int* b, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = linear_block() * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i;
  grid.sync();
  if (i < n) b[i] = a[(i + blockDim.x) % n];
}

// A barrier per round: each round every element becomes itself plus the element one block further
// on, read from the previous round's buffer (x and y take turns).
extern "C" __global__ void rounds_of_sums(float* x, float* y, int n, int rounds) {
  cg::grid_group grid = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int r = 0; r < rounds; r++) {
    const float* from = r % 2 ? y : x;
    float* to = r % 2 ? x : y;
    if (i < n) to[i] = from[i] + from[(i + blockDim.x) % n];
    grid.sync();
  }
}

// llama.cpp's softmax over a row split across blocks, in small: each block's maximum by warp shuffles
// and shared memory, the barrier, then every thread subtracts the maximum of all blocks' maxima.
extern "C" __global__ void minus_grid_max(const float* x, float* block_max, float* out) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float warp_max[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float m = x[i];
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; w++) m = fmaxf(m, warp_max[w]);
    block_max[blockIdx.x] = m;
  }
  grid.sync();
  float all = block_max[0];
  for (unsigned b = 1; b < gridDim.x; b++) all = fmaxf(all, block_max[b]);
  out[i] = x[i] - all;
}

// The split form: arrive, do work that needs no other block, then wait; thread 0 of the grid then sums
// what every block wrote before arriving.
extern "C" __global__ void arrive_then_wait(const int* in, int* partial, int* total, int* doubled) {
  cg::grid_group grid = cg::this_grid();
  __shared__ int sum;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  atomicAdd(&sum, in[i]);
  __syncthreads();
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
  auto token = grid.barrier_arrive();
  doubled[i] = 2 * in[i];
  grid.barrier_wait(std::move(token));
  if (grid.thread_rank() == 0) {
    int t = 0;
    for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];
    *total = t;
  }
}

// After the barrier, thread 0 of block 0 polls a flag (ld.acquire) that the last block sets when
// `set` is nonzero; otherwise nothing ever sets it.
extern "C" __global__ void poll_flag(unsigned* flag, unsigned* seen, int set) {
  cg::this_grid().sync();
  if (set && blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) atomicExch(flag, 7u);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned value;
    do {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
    } while (value == 0);
    *seen = value;
  }
}

// Only the even blocks reach the barrier: a GPU hangs on this launch.
extern "C" __global__ void half_the_blocks_sync(int* a) {
  if (blockIdx.x % 2 == 0) cg::this_grid().sync();
  a[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

// Names the grid but never synchronizes it: its blocks need not be resident together.
extern "C" __global__ void grid_rank_only(unsigned long long* out) {
  cg::grid_group grid = cg::this_grid();
  out[grid.thread_rank()] = grid.thread_rank() + grid.size();
}
