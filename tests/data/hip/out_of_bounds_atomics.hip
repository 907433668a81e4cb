// AMDGPU atomics by thread 0 at element `i` of `x` (tests/plugins/backends/host/test_host_bounds_every_access.py):
// the global fadd intrinsic (llvm.amdgcn.global.atomic.fadd, which the host lowers to atomicrmw) and a
// wrapping increment (atomicrmw uinc_wrap).
#include <hip/hip_runtime.h>

typedef __attribute__((address_space(1))) float global_float;

extern "C" __global__ void global_fadd(float* x, float* out, int i) {
  out[0] = __builtin_amdgcn_global_atomic_fadd_f32((global_float*)&x[i], 0.0f);
}

extern "C" __global__ void wrapping_increment(unsigned* x, unsigned* out, int i) {
  out[0] = __builtin_amdgcn_atomic_inc32(&x[i], 0xffffffffu, __ATOMIC_RELAXED, "agent");
}
