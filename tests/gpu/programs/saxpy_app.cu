// A plain CUDA application for the recorder tests: built with nvcc's defaults (static cudart),
// it launches the corpus's saxpy kernel a few times and checks its own result.
#include <cstdio>
#include <cstdlib>
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
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100);  // small integers: every result is exact, fused or not
    y[i] = static_cast<float>(i % 7);
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
