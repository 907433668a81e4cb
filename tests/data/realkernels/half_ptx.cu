// CUDA's fp16/bf16 header functions whose device code is one-instruction inline PTX.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void half_conversions(const float *x, const float *y, unsigned short *h, float *back,
                                            int *ints, unsigned short *sums, unsigned *pairs, unsigned short *bf,
                                            int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half a = __float2half_rn(x[i]);
  __half b = __float2half_rn(y[i]);
  h[i] = __half_as_ushort(a);
  back[i] = __half2float(a);
  ints[4 * i + 0] = __half2int_rz(a);
  ints[4 * i + 1] = __half2int_rn(a);
  ints[4 * i + 2] = __half2int_rd(a);
  ints[4 * i + 3] = __half2int_ru(a);
  sums[3 * i + 0] = __half_as_ushort(__hadd(a, b));
  sums[3 * i + 1] = __half_as_ushort(__hsub(a, b));
  sums[3 * i + 2] = __half_as_ushort(__hmul(a, b));
  __half2 p = __floats2half2_rn(x[i], y[i]);
  __half2 q = __hadd2(p, __halves2half2(b, a));
  pairs[2 * i + 0] = *reinterpret_cast<unsigned *>(&p);
  pairs[2 * i + 1] = *reinterpret_cast<unsigned *>(&q);
  bf[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
