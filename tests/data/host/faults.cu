// Kernels the host backend must survive or refuse: out-of-bounds writes, traps, unsupported code.
#include <assert.h>
extern "C" __global__ void write_far(float* data, long stride) {
  data[threadIdx.x * stride] = 1.0f;  // far outside the allocation when stride is large
}

extern "C" __global__ void checked(const int* flags) {
  assert(flags[threadIdx.x] == 0);
}

extern "C" __global__ void uses_fns(const unsigned* in, unsigned* out) {
  out[threadIdx.x] = __nvvm_fns(in[threadIdx.x], 0, 1);  // find the n-th set bit: not emulated
}

extern "C" __global__ void uses_ptx_asm(unsigned* out) {
  unsigned size;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  out[threadIdx.x] = size;
}

extern "C" __global__ void prints(int n) {
  if (threadIdx.x == 0) printf("block %d of %d, n=%d, half=%f\n", blockIdx.x, gridDim.x, n, n * 0.5);
}

extern "C" __global__ void checked_tiles(const int* flags) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  assert(flags[y * gridDim.x * blockDim.x + x] == 0);
}
