// Inline PTX blocks of several instructions, in the shapes libraries write them: a warp sum whose
// shuffle adds only where the source lane exists (f32, u32, and u64 through a register pair), a
// max through setp/selp, and fp8 pairs widened to f16 pairs (cuda_fp8.h's conversion on sm_89+).
#include <cuda_fp8.h>

__device__ float step_f32(float x, int offset, int clamp) {
  float out;
  asm volatile("{\n\t.reg .f32 acc;\n\t.reg .pred valid;\n\t"
               "shfl.sync.down.b32 acc|valid, %1, %2, %3, 0xffffffff;\n\t"
               "@valid add.f32 acc, acc, %1;\n\tmov.f32 %0, acc;\n\t}"
               : "=f"(out) : "f"(x), "r"(offset), "r"(clamp));
  return out;
}

__device__ unsigned step_u32(unsigned x, int offset, int clamp) {
  unsigned out;
  asm volatile("{\n\t.reg .u32 acc;\n\t.reg .pred valid;\n\t"
               "shfl.sync.down.b32 acc|valid, %1, %2, %3, 0xffffffff;\n\t"
               "@valid add.u32 acc, acc, %1;\n\tmov.u32 %0, acc;\n\t}"
               : "=r"(out) : "r"(x), "r"(offset), "r"(clamp));
  return out;
}

__device__ unsigned long long step_u64(unsigned long long x, int offset, int clamp) {
  unsigned long long out;
  // The sum goes through a register of the block's own: "=l" lets the compiler give %0 and %1 the same
  // register (an H100 run did), so writing %0 before the last read of %1 would double the shuffled value.
  asm volatile("{\n\t.reg .u32 low, high;\n\t.reg .u64 sum;\n\t.reg .pred valid;\n\t"
               "mov.b64 {low, high}, %1;\n\t"
               "shfl.sync.down.b32 low|valid, low, %2, %3, 0xffffffff;\n\t"
               "shfl.sync.down.b32 high|valid, high, %2, %3, 0xffffffff;\n\t"
               "mov.b64 sum, {low, high};\n\t@valid add.u64 sum, sum, %1;\n\tmov.b64 %0, sum;\n\t}"
               : "=l"(out) : "l"(x), "r"(offset), "r"(clamp));
  return out;
}

__device__ int larger(int a, int b) {
  int out;
  asm("{\n\t.reg .pred gt;\n\tsetp.gt.s32 gt, %1, %2;\n\tselp.s32 %0, %1, %2, gt;\n\t}" : "=r"(out) : "r"(a), "r"(b));
  return out;
}

// Sums within segments of `width` lanes (clamp = width - 1: the shuffle stays inside the segment).
extern "C" __global__ void segment_sums(const float* xf, const unsigned* xu, const unsigned long long* xl,
                                        const int* a, const int* b, float* sf, unsigned* su,
                                        unsigned long long* sl, int* big, int width) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float f = xf[i];
  unsigned u = xu[i];
  unsigned long long l = xl[i];
  for (int offset = 1; offset < width; offset *= 2) {
    int clamp = ((32 - width) << 8) | 31;
    f = step_f32(f, offset, clamp);
    u = step_u32(u, offset, clamp);
    l = step_u64(l, offset, clamp);
  }
  sf[i] = f;
  su[i] = u;
  sl[i] = l;
  big[i] = larger(a[i], b[i]);
}

extern "C" __global__ void fp8_to_half(const unsigned short* pairs, unsigned* e4m3, unsigned* e5m2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
    e4m3[i] = (unsigned)h.x | ((unsigned)h.y << 16);
    h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E5M2);
    e5m2[i] = (unsigned)h.x | ((unsigned)h.y << 16);
  }
}

// f32 pairs and f16 pairs narrowed to fp8 pairs, rounded to nearest even and saturated (cuda_fp8.h, sm_89+).
extern "C" __global__ void to_fp8(const float* x, const unsigned* halves, unsigned short* f32_e4m3,
                                  unsigned short* f32_e5m2, unsigned short* f16_e4m3, unsigned short* f16_e5m2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float2 pair = make_float2(x[2 * i], x[2 * i + 1]);
    f32_e4m3[i] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
    f32_e5m2[i] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E5M2);
    __half2_raw h;
    h.x = (unsigned short)(halves[i] & 0xFFFFu);
    h.y = (unsigned short)(halves[i] >> 16);
    f16_e4m3[i] = __nv_cvt_halfraw2_to_fp8x2(h, __NV_SATFINITE, __NV_E4M3);
    f16_e5m2[i] = __nv_cvt_halfraw2_to_fp8x2(h, __NV_SATFINITE, __NV_E5M2);
  }
}
