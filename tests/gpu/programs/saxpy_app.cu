// A plain CUDA application for the recorder tests: built with nvcc's defaults (static cudart),
// it launches the corpus's saxpy kernel a few times and checks its own result.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../data/kernels/saxpy.cu"

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_));     \
      return 2;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 20);
  const int launches = argc > 2 ? std::atoi(argv[2]) : 3;
  // "random": pseudo-random integers below 2^20 (benchmarks: data that compresses like real data,
  // not a short repeating pattern); either way every result is exact, fused or not.
  const bool random = argc > 3 && std::strcmp(argv[3], "random") == 0;
  std::vector<float> x(n), y(n), expected(n);
  unsigned long long state = 0x9e3779b97f4a7c15ull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 33) & ((1u << 20) - 1));
  };
  for (int i = 0; i < n; ++i) {
    x[i] = random ? next() : static_cast<float>(i % 100);  // small integers: exact results
    y[i] = random ? next() : static_cast<float>(i % 7);
    expected[i] = y[i];
  }
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int k = 0; k < launches; ++k) {
    float a = 1.0f + k;
    saxpy<<<128, 256>>>(n, a, dx, dy);
    CHECK(cudaGetLastError());
    for (int i = 0; i < n; ++i) expected[i] = a * x[i] + expected[i];
  }
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (y[i] != expected[i]) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, y[i], expected[i]);
      return 1;
    }
  }
  std::printf("saxpy_app OK %p %p\n", (void*)dx, (void*)dy);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  return 0;
}
