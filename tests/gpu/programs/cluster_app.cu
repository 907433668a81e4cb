// A launch with thread block clusters of two whose blocks read each other's shared memory: a
// replay must launch with the same clusters, or a block's partner is not in its cluster.
#include <cooperative_groups.h>

#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

// Each block fills its shared memory, then reads its partner's (the other block of its cluster of
// two) through distributed shared memory.
__global__ void cluster_swap(const int *in, int *out) {
  __shared__ int mine[128];
  cg::cluster_group cluster = cg::this_cluster();
  int t = threadIdx.x;
  mine[t] = in[blockIdx.x * blockDim.x + t] + 1000 * (int)cluster.block_rank();
  cluster.sync();
  int *theirs = cluster.map_shared_rank(mine, cluster.block_rank() ^ 1);
  out[blockIdx.x * blockDim.x + t] = theirs[t];
  cluster.sync();  // the partner may not exit while its shared memory is read
}

int main() {
  std::vector<int> in(1024);
  for (int i = 0; i < 1024; ++i) in[i] = i % 1000;
  const int cblocks = 8, cthreads = 128, m = cblocks * cthreads;
  int *c_in, *c_out;
  CHECK(cudaMalloc(&c_in, m * sizeof(int)));
  CHECK(cudaMalloc(&c_out, m * sizeof(int)));
  CHECK(cudaMemcpy(c_in, in.data(), m * sizeof(int), cudaMemcpyHostToDevice));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(cblocks);
  config.blockDim = dim3(cthreads);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 2;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, cluster_swap, (const int *)c_in, c_out));
  std::vector<int> cout_(m);
  CHECK(cudaMemcpy(cout_.data(), c_out, m * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < cblocks; ++b)
    for (int t = 0; t < cthreads; ++t) {
      int partner = b ^ 1, want = in[partner * cthreads + t] + 1000 * (partner % 2);
      if (cout_[b * cthreads + t] != want) {
        std::fprintf(stderr, "cluster_swap: out[%d] = %d, expected %d\n", b * cthreads + t,
                     cout_[b * cthreads + t], want);
        return 1;
      }
    }
  std::printf("cluster_app OK\n");
  return 0;
}
