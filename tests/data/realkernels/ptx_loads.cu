// Hand-written PTX loads (llama.cpp's copy kernels use the non-coherent forms) and half2 halves.
#include <cuda_fp16.h>

extern "C" __global__ void nc_loads(const unsigned *src, const unsigned long long *pairs, const __half2 *h2,
                                    unsigned *out, unsigned long long *pairs_out, float *halves) {
  int i = threadIdx.x;
  unsigned v;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(src + i));
  unsigned long long a, b;
  asm("ld.global.nc.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(pairs + 2 * i));
  out[i] = v;
  pairs_out[2 * i] = b;
  pairs_out[2 * i + 1] = a;
  halves[2 * i] = __low2float(h2[i]);
  halves[2 * i + 1] = __high2float(h2[i]);
}
