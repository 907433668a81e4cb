// Kernels the host backend must survive or refuse: out-of-bounds writes, traps, unsupported code.
#include <assert.h>
extern "C" __global__ void write_far(float* data, long stride) {
  data[threadIdx.x * stride] = 1.0f;  // far outside the allocation when stride is large
}

extern "C" __global__ void checked(const int* flags) {
  assert(flags[threadIdx.x] == 0);
}

extern "C" __global__ void uses_match(const int* in, unsigned* out) {
  out[threadIdx.x] = __match_any_sync(0xffffffffu, in[threadIdx.x]);
}

extern "C" __global__ void uses_ptx_asm(unsigned* out) {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  out[threadIdx.x] = lane;
}

extern "C" __global__ void prints(int n) {
  if (threadIdx.x == 0) printf("block %d of %d, n=%d, half=%f\n", blockIdx.x, gridDim.x, n, n * 0.5);
}
