// One access per kernel, by thread 0, at element `i` of `x` (or of the bytes `n`): the tests place `x`
// at the start of a page and launch each kernel once with `i` in bounds and once one element past
// the end (tests/plugins/backends/host/test_host_bounds_every_access.py).

#define X_BASE 0x7e1000000000ull  // where the tests map `x`, a buffer of 1000 ints

extern "C" __global__ void rmw_add_zero(int* x, int* out, int i) { out[0] = atomicAdd(&x[i], 0); }

extern "C" __global__ void compare_and_swap(int* x, int* out, int i) { out[0] = atomicCAS(&x[i], -12345, 7); }

// NVVM's block-scope atomic (llvm.nvvm.atomic.add.gen.f.cta), which the host lowers to atomicrmw
extern "C" __global__ void block_atomic_add(float* x, float* out, int i) { out[0] = atomicAdd_block(&x[i], 0.0f); }

// a vector type of clang's (CUDA's int4 is a struct, which clang copies with memcpy)
typedef int int4v __attribute__((ext_vector_type(4)));

extern "C" __global__ void vector_load(const int4v* x, int4v* out, int i) { out[0] = x[i]; }

extern "C" __global__ void vector_store(int4v* x, const int4v* in, int i) { x[i] = in[0]; }

// stores the canary byte redzones.py fills the slack with: only the checked copy sees it
extern "C" __global__ void store_canary_bytes(int* x, int* out, int i) { x[i] = (int)0xa5a5a5a5u; }

extern "C" __global__ void constant_address_in_bounds(int* x, int* out) {
  out[0] = *(volatile int*)(X_BASE + 999 * sizeof(int));
}

extern "C" __global__ void constant_address_past_end(int* x, int* out) {
  out[0] = *(volatile int*)(X_BASE + 1000 * sizeof(int));
}

extern "C" __global__ void copy_from(int* x, int* out, int n) { __builtin_memcpy(out, x, n * sizeof(int)); }

extern "C" __global__ void copy_into(int* x, int* in, int n) { __builtin_memmove(x, in, n * sizeof(int)); }

extern "C" __global__ void fill_canary(int* x, int* out, int n) { __builtin_memset(x, 0xa5, n * sizeof(int)); }
