#include <hip/hip_runtime.h>

// The AMDGPU intrinsics everyday HIP code uses, one output column per operation, for the host
// backend's tests against NumPy models (tests/plugins/backends/host/test_host_amdgpu_wave.py).
// Built for gfx90a (wave64) and gfx1100 (wave32); launch one block of 64 (or 128) work-items.

typedef short short2v __attribute__((ext_vector_type(2)));
typedef unsigned short ushort2v __attribute__((ext_vector_type(2)));
typedef _Float16 half2v __attribute__((ext_vector_type(2)));

extern "C" __device__ int __ockl_wfred_add_i32(int);
extern "C" __device__ int __ockl_wfred_min_i32(int);
extern "C" __device__ int __ockl_wfred_max_i32(int);
extern "C" __device__ int __ockl_wfred_or_i32(int);
extern "C" __device__ int __ockl_wfred_xor_i32(int);
extern "C" __device__ float __ockl_wfred_add_f32(float);
extern "C" __device__ int __ockl_wfscan_add_i32(int, bool);
extern "C" __device__ unsigned __ockl_wfbcast_u32(unsigned, unsigned);
extern "C" __device__ unsigned __ockl_activelane_u32(void);

#define LANE (blockIdx.x * blockDim.x + threadIdx.x)

#if !defined(__gfx1100__)
// Packed-integer and half dot products: 11 columns.
extern "C" __global__ void dot_products(const int* a, const int* b, const int* c, const float* fc, int* out) {
  int i = LANE;
  int x = a[i], y = b[i], z = c[i];
  int* o = out + i * 11;
  short2v s0 = __builtin_bit_cast(short2v, x), s1 = __builtin_bit_cast(short2v, y);
  ushort2v u0 = __builtin_bit_cast(ushort2v, x), u1 = __builtin_bit_cast(ushort2v, y);
  half2v h0 = __builtin_bit_cast(half2v, x), h1 = __builtin_bit_cast(half2v, y);
  o[0] = __builtin_amdgcn_sdot2(s0, s1, z, false);
  o[1] = __builtin_amdgcn_sdot2(s0, s1, z, true);
  o[2] = (int)__builtin_amdgcn_udot2(u0, u1, (unsigned)z, true);
  o[3] = __builtin_amdgcn_sdot4(x, y, z, false);
  o[4] = __builtin_amdgcn_sdot4(x, y, z, true);
  o[5] = (int)__builtin_amdgcn_udot4((unsigned)x, (unsigned)y, (unsigned)z, false);
  o[6] = (int)__builtin_amdgcn_udot4((unsigned)x, (unsigned)y, (unsigned)z, true);
  o[7] = __builtin_amdgcn_sdot8(x, y, z, false);
  o[8] = (int)__builtin_amdgcn_udot8((unsigned)x, (unsigned)y, (unsigned)z, true);
  o[9] = __float_as_int(__builtin_amdgcn_fdot2(h0, h1, fc[i], false));
  o[10] = __float_as_int(__builtin_amdgcn_fdot2(h0, h1, fc[i], true));
}
#else
// gfx11's mixed-sign dot products: 3 columns.
extern "C" __global__ void dot_products(const int* a, const int* b, const int* c, const float* fc, int* out) {
  int i = LANE;
  int x = a[i], y = b[i], z = c[i];
  int* o = out + i * 3;
  o[0] = __builtin_amdgcn_sudot4(true, x, false, y, z, false);
  o[1] = __builtin_amdgcn_sudot4(false, x, true, y, z, true);
  o[2] = __builtin_amdgcn_sudot8(true, x, true, y, z, false);
}
#endif

// Compare ballots: __ballot of a float comparison (clang folds it into llvm.amdgcn.fcmp), and the
// icmp/fcmp builtins with their LLVM predicates. One 64-bit mask per column.
extern "C" __global__ void compare_ballots(const float* f, const float* g, const int* v, const int* w,
                                           unsigned long long* out) {
  int i = LANE;
  unsigned long long* o = out + i * 7;
  o[0] = __ballot(f[i] > 0.0f);
  o[1] = __builtin_amdgcn_fcmpf(f[i], g[i], 4);   // olt
  o[2] = __builtin_amdgcn_fcmpf(f[i], g[i], 8);   // uno
  o[3] = __builtin_amdgcn_fcmpf(f[i], g[i], 9);   // ueq
  o[4] = __builtin_amdgcn_uicmp(v[i], w[i], 36);  // ult
  o[5] = __builtin_amdgcn_sicmp(v[i], w[i], 41);  // sle
  o[6] = __builtin_amdgcn_sicmpl((long long)v[i] * 3, (long long)w[i], 32);  // eq on 64-bit values
}

// Lane reads, lane counts and wave-size queries: 8 columns.
extern "C" __global__ void lane_reads(const int* v, const unsigned* mask, int src, int* out) {
  int i = LANE;
  int* o = out + i * 8;
  o[0] = __builtin_amdgcn_readlane(v[i], src);
  o[1] = __builtin_amdgcn_readfirstlane(v[i]);
  o[2] = __builtin_amdgcn_mbcnt_lo(mask[0], 0);
  o[3] = __builtin_amdgcn_mbcnt_hi(mask[1], __builtin_amdgcn_mbcnt_lo(mask[0], 5));
  o[4] = __builtin_amdgcn_wavefrontsize();
  o[5] = warpSize;
  o[6] = __lane_id();
  o[7] = __builtin_amdgcn_readlane(v[i] * 2, src + 1);
}

// DPP: one column per (control, row mask, bank mask, bound_ctrl) of DPP_CASES.
#define DPP(k, ctrl, rows, banks, bound) o[k] = __builtin_amdgcn_update_dpp(old, x, ctrl, rows, banks, bound);
#if !defined(__gfx1100__)
#define DPP_CASES(D)                                                                                  \
  D(0, 0x1B, 0xF, 0xF, false) D(1, 0xE4, 0xF, 0xF, false) D(2, 0x101, 0xF, 0xF, false)                \
  D(3, 0x103, 0xF, 0xF, true) D(4, 0x10F, 0xF, 0xF, false) D(5, 0x111, 0xF, 0xF, false)               \
  D(6, 0x118, 0xF, 0xF, true) D(7, 0x121, 0xF, 0xF, false) D(8, 0x12F, 0xF, 0xF, false)               \
  D(9, 0x130, 0xF, 0xF, false) D(10, 0x134, 0xF, 0xF, false) D(11, 0x138, 0xF, 0xF, true)             \
  D(12, 0x13C, 0xF, 0xF, false) D(13, 0x140, 0xF, 0xF, false) D(14, 0x141, 0xF, 0xF, false)           \
  D(15, 0x142, 0xA, 0xF, false) D(16, 0x143, 0xC, 0xF, false) D(17, 0x111, 0x5, 0x6, false)           \
  D(18, 0x142, 0xF, 0xF, true)
#define DPP_COLUMNS 19
#else
#define DPP_CASES(D)                                                                                  \
  D(0, 0x1B, 0xF, 0xF, false) D(1, 0x101, 0xF, 0xF, false) D(2, 0x112, 0xF, 0xF, true)                \
  D(3, 0x125, 0xF, 0xF, false) D(4, 0x140, 0xF, 0xF, false) D(5, 0x141, 0x1, 0xF, false)              \
  D(6, 0x153, 0xF, 0xF, false) D(7, 0x165, 0xF, 0xF, false) D(8, 0x111, 0x2, 0x9, true)
#define DPP_COLUMNS 9
#endif
extern "C" __global__ void dpp_moves(const int* v, const int* old_values, int* out) {
  int i = LANE;
  int x = v[i], old = old_values[i];
  int* o = out + i * DPP_COLUMNS;
  DPP_CASES(DPP)
}

// Permutes: ds_permute / ds_bpermute to computed lanes and ds_swizzle's modes: 6 columns (8 on gfx11).
extern "C" __global__ void permutes(const int* v, const int* lanes, int* out) {
  int i = LANE;
  int x = v[i], to = lanes[i] * 4;
#if !defined(__gfx1100__)
  int* o = out + i * 6;
#else
  int* o = out + i * 9;
  o[6] = __builtin_amdgcn_permlane16(0, x, 0x01234567, 0x89ABCDEF, false, false);
  o[7] = __builtin_amdgcn_permlanex16(0, x, 0x76543210, 0xFEDCBA98, false, false);
  o[8] = __builtin_amdgcn_mov_dpp8(x, 0x2C688F);  // lanes 0..7 read 7,1,2,3,4,5,6,0... per 3-bit field
#endif
  o[0] = __builtin_amdgcn_ds_permute(to, x);
  o[1] = __builtin_amdgcn_ds_bpermute(to, x);
  o[2] = __builtin_amdgcn_ds_swizzle(x, 0x80E4 ^ 0xFF);   // quad permute
  o[3] = __builtin_amdgcn_ds_swizzle(x, 0x0C1F);          // bit mask: and 31, xor 3
  o[4] = __builtin_amdgcn_ds_swizzle(x, 0x0030);          // bit mask: and 16, or 1
  o[5] = __builtin_amdgcn_ds_swizzle(x, (8 << 10) | 0x1F);  // xor 8: rows of 16 swap halves
}

// The ROCm device libraries' wave primitives (ockl): reductions, scans, broadcast, active lanes.
extern "C" __global__ void ockl_wave(const int* v, const float* f, int* out, float* fout) {
  int i = LANE;
  int x = v[i];
  int* o = out + i * 9;
  o[0] = __ockl_wfred_add_i32(x);
  o[1] = __ockl_wfred_min_i32(x);
  o[2] = __ockl_wfred_max_i32(x);
  o[3] = __ockl_wfred_or_i32(x);
  o[4] = __ockl_wfred_xor_i32(x);
  o[5] = __ockl_wfscan_add_i32(x, true);   // inclusive
  o[6] = __ockl_wfscan_add_i32(x, false);  // exclusive
  o[7] = (int)__ockl_wfbcast_u32((unsigned)x, 3);
  o[8] = (int)__ockl_activelane_u32();
  fout[i] = __ockl_wfred_add_f32(f[i]);
}

// Clocks and sleep: s_memtime (gfx9) or the cycle counter (gfx11) never run backwards
// across an s_sleep.
extern "C" __global__ void clocks(long long* before, long long* after) {
  int i = LANE;
#if !defined(__gfx1100__)
  long long t0 = __builtin_amdgcn_s_memtime();
  __builtin_amdgcn_s_sleep(10);
  long long t1 = __builtin_amdgcn_s_memtime();
#else
  long long t0 = __builtin_readcyclecounter();
  __builtin_amdgcn_s_sleep(10);
  long long t1 = __builtin_readcyclecounter();
#endif
  before[i] = t0;
  after[i] = t1;
}
