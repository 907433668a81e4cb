// saxpy over memory a recording does not hold, and over memory it does: x in mapped pinned host
// memory (cudaHostAlloc), then x in managed memory (cudaMallocManaged), then x in device memory
// with a registered host buffer (cudaHostRegister) that no kernel is given. The recorder warns
// once for each of the first two, naming the allocation, and not for the third; the results are
// the application's own. Prints `hostmem_app OK <pinned x> <managed x>`.
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

static bool same(const std::vector<float> &y, const std::vector<float> &x, float a, float y0) {
  for (size_t i = 0; i < y.size(); ++i)
    if (y[i] != y0 + a * x[i]) {
      std::fprintf(stderr, "mismatch at %zu: %f != %f\n", i, y[i], y0 + a * x[i]);
      return false;
    }
  return true;
}

int main() {
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 100);
  float *dy = nullptr, *dx = nullptr, *pinned = nullptr, *managed = nullptr;
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaHostAlloc(&pinned, bytes, cudaHostAllocMapped));
  CHECK(cudaMallocManaged(&managed, bytes));
  std::vector<float> registered(n, 0.0f);
  CHECK(cudaHostRegister(registered.data(), bytes, cudaHostRegisterDefault));
  for (int i = 0; i < n; ++i) pinned[i] = managed[i] = x[i];

  float *sources[] = {pinned, managed, dx};
  CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  for (int k = 0; k < 3; ++k) {
    CHECK(cudaMemset(dy, 0, bytes));
    for (int rep = 0; rep < 2; ++rep) saxpy<<<64, 256>>>(n, 1.0f + k + rep, sources[k], dy);  // 2 instances
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(registered.data(), dy, bytes, cudaMemcpyDeviceToHost));
    if (!same(registered, x, 3.0f + 2.0f * k, 0.0f)) return 1;
  }
  std::printf("hostmem_app OK %p %p\n", static_cast<void *>(pinned), static_cast<void *>(managed));
  CHECK(cudaHostUnregister(registered.data()));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(managed));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  return 0;
}
