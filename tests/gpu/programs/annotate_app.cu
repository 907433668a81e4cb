// The recorder's tolerance annotations: the application declares its output buffer as f32 with
// a relative tolerance of 1e-5 (mneme_annotate.h, header only: nothing extra to link). Under
// the recorder the call returns 1 and the policy lands in the snapshots; without it, 0.
#include <cstdio>
#include <vector>

#include "../../../backends/cuda/recorder/include/mneme_annotate.h"
#include "check.h"

__global__ void scale_add(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i] + 1.0f;
}

int main() {
  const int n = 1 << 16;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);  // small integers: exact results
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, n * sizeof(float)));
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(out, 0, n * sizeof(float)));
  int annotated = mneme_annotate(out, "f32", 1e-5, 1, "none", "output");
  scale_add<<<(n + 255) / 256, 256>>>(in, out, n);
  CHECK(cudaGetLastError());
  std::vector<float> result(n);
  CHECK(cudaMemcpy(result.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (result[i] != 2.0f * host[i] + 1.0f) {
      std::fprintf(stderr, "mismatch at %d: %f\n", i, result[i]);
      return 1;
    }
  }
  std::printf("annotate_app OK %d %p %p\n", annotated, (void*)in, (void*)out);
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
  return 0;
}
