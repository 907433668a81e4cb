// SIMD video instructions on bytes and halves: CUDA's header functions and forms written by hand.
#define VIDEO(name, text)                                                   \
  __device__ unsigned name(unsigned a, unsigned b) {                       \
    unsigned r;                                                             \
    asm(text " %0,%1,%2,%3;" : "=r"(r) : "r"(a), "r"(b), "r"(0u));          \
    return r;                                                               \
  }
VIDEO(add4_us_sat, "vadd4.u32.u32.u32.sat")
VIDEO(sub4_ss_sat, "vsub4.s32.s32.s32.sat")
VIDEO(sub4_uu, "vsub4.u32.u32.u32")
VIDEO(max4_s, "vmax4.s32.s32.s32")
VIDEO(min2_u, "vmin2.u32.u32.u32")
VIDEO(absdiff4_u, "vabsdiff4.u32.u32.u32")
VIDEO(add2_ss_sat, "vadd2.s32.s32.s32.sat")
VIDEO(set4_eq, "vset4.u32.u32.eq")
VIDEO(set4_lt_s, "vset4.s32.s32.lt")
VIDEO(set2_ge_u, "vset2.u32.u32.ge")

extern "C" __global__ void video(const unsigned* a, const unsigned* b, unsigned* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned x = a[i], y = b[i];
  unsigned* o = out + 13 * i;
  o[0] = add4_us_sat(x, y);
  o[1] = sub4_ss_sat(x, y);
  o[2] = sub4_uu(x, y);
  o[3] = max4_s(x, y);
  o[4] = min2_u(x, y);
  o[5] = absdiff4_u(x, y);
  o[6] = add2_ss_sat(x, y);
  o[7] = set4_eq(x, y);
  o[8] = set4_lt_s(x, y);
  o[9] = set2_ge_u(x, y);
  o[10] = __vsubss4(x, y);
  o[11] = __vcmpeq4(x, y);
  o[12] = __vsub4(x, y);
}
