// A cooperative launch whose kernel waits at a grid-wide barrier (every block resident at once):
// a replay must launch it cooperatively too, or the barrier does not hold.
#include <cooperative_groups.h>

#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

// Phase 1: each thread writes its square; after the grid-wide barrier, each thread reads the value
// one block further on (written by another block), so the result needs the barrier to hold.
__global__ void grid_rotate(const int *in, int *tmp, int *out, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int round = 0; round < 3; ++round) {
    if (i < n) tmp[i] = in[i] * in[i] + round;
    grid.sync();
    int j = (i + blockDim.x) % n;
    if (i < n) out[i] += tmp[j];
    grid.sync();
  }
}

int main() {
  int device = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int block = 256;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_rotate, block, 0));
  int blocks = sms * per_sm < 64 ? sms * per_sm : 64;
  int n = blocks * block;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i % 1000;
  int *d_in, *d_tmp, *d_out;
  CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK(cudaMalloc(&d_tmp, n * sizeof(int)));
  CHECK(cudaMalloc(&d_out, n * sizeof(int)));
  CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_out, 0, n * sizeof(int)));
  void *args[] = {&d_in, &d_tmp, &d_out, &n};
  CHECK(cudaLaunchCooperativeKernel((void *)grid_rotate, dim3(blocks), dim3(block), args, 0, 0));
  std::vector<int> out(n);
  CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    int j = (i + block) % n, want = 0;
    for (int round = 0; round < 3; ++round) want += in[j] * in[j] + round;
    if (out[i] != want) {
      std::fprintf(stderr, "grid_rotate: out[%d] = %d, expected %d\n", i, out[i], want);
      return 1;
    }
  }

  std::printf("coop_app OK\n");
  return 0;
}
