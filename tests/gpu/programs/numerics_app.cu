// sqrtf(a / b) over a million floats: one division and one square root per element, no multiply-add
// to fuse, so the result's bits are those of the two instructions the build chose (div.rn or div.full,
// sqrt.rn or sqrt.approx). Built with `mneme-cc nvcc` with nvcc's defaults, with -prec-div=false
// -prec-sqrt=false and with -use_fast_math (scripts/gpu-suite --prepare): the IR replay must give the
// binary's bits in each. fast_math_mix holds what -use_fast_math swaps for approximations (expf, sinf,
// cosf, tanhf, logf, powf, divisions) and a product with two uses, as ggml's softmax, GELU and RoPE do.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#include "check.h"

extern "C" __global__ void ratio_root(const float *a, const float *b, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sqrtf(a[i] / b[i]);
}

extern "C" __global__ void fast_math_mix(const float *a, const float *b, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = a[i] * 0.01f, y = b[i] * 0.01f;
    float ramp = x * y;  // two uses: nvcc keeps the product a multiply
    out[i] = expf(-x) * (1.0f - ramp) + y * ramp + sinf(x) * cosf(y) + tanhf(x - y) + logf(y + 1.0f) +
             powf(y + 1.0f, x) + 1.0f / (1.0f + expf(-y)) + x / (y + 0.5f);
  }
}

int main() {
  const int n = 1 << 20;
  float *host = static_cast<float *>(std::malloc(2 * n * sizeof(float)));
  unsigned state = 12345u;
  for (int i = 0; i < 2 * n; ++i) {  // values over many binades, where approximations differ from IEEE
    state = state * 1664525u + 1013904223u;
    host[i] = (float)((state >> 8) & 0xFFFF) * 1.0e-3f + 1.0e-6f * (float)(state >> 24);
  }
  float *a, *b, *out;
  CHECK(cudaMalloc(&a, n * sizeof(float)));
  CHECK(cudaMalloc(&b, n * sizeof(float)));
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMemcpy(a, host, n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, host + n, n * sizeof(float), cudaMemcpyHostToDevice));
  ratio_root<<<(n + 255) / 256, 256>>>(a, b, out, n);
  CHECK(cudaMemcpy(host, out, sizeof(float), cudaMemcpyDeviceToHost));
  fast_math_mix<<<(n + 255) / 256, 256>>>(a, b, out, n);
  CHECK(cudaMemcpy(host + 1, out, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("numerics_app OK %g %g\n", host[0], host[1]);
  return 0;
}
