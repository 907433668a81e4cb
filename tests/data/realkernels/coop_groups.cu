// Cooperative groups as real code uses them: a block-wide sum through a thread_block handle.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void block_sum(const float* in, float* out, int n) {
  cg::thread_block block = cg::this_thread_block();
  __shared__ float partial[256];
  unsigned tid = block.thread_rank();
  unsigned i = blockIdx.x * blockDim.x + tid;
  partial[tid] = i < n ? in[i] : 0.0f;
  block.sync();
  for (unsigned s = block.size() / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    block.sync();
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}

// A warp-level reduction (redux.sync), which the host backend emulates.
extern "C" __global__ void warp_redux(const int* in, int* out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int s = __reduce_add_sync(0xffffffffu, v);
  if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = s;
}

// Two pieces of inline PTX the host cannot run: `ir check` names both.
extern "C" __global__ void two_unsupported(unsigned long long* out) {
  unsigned long long t;
  asm volatile("pmevent 1;");
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out[threadIdx.x] = t;
}
