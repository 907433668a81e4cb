// The int8 dot products of quantized matrix products, as CUDA's headers write them (inline PTX dp4a/dp2a), and
// the signed-by-unsigned forms the headers do not name.
__device__ int dp4a_su(int a, int b, int c) {
  int r;
  asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ int dp2a_hi_us(int a, int b, int c) {
  int r;
  asm("dp2a.hi.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
extern "C" __global__ void dots(const int* a, const int* b, const int* c, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int x = a[i], y = b[i], z = c[i];
  out[8 * i + 0] = __dp4a(x, y, z);
  out[8 * i + 1] = (int)__dp4a((unsigned)x, (unsigned)y, (unsigned)z);
  out[8 * i + 2] = __dp2a_lo(x, y, z);
  out[8 * i + 3] = __dp2a_hi(x, y, z);
  out[8 * i + 4] = (int)__dp2a_lo((unsigned)x, (unsigned)y, (unsigned)z);
  out[8 * i + 5] = (int)__dp2a_hi((unsigned)x, (unsigned)y, (unsigned)z);
  out[8 * i + 6] = dp4a_su(x, y, z);
  out[8 * i + 7] = dp2a_hi_us(x, y, z);
}
