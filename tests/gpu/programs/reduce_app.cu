// A shared-memory tree reduction, two passes (the second reduces the first's partial sums).
#include <vector>

#include "../../data/kernels/reduce_sum.cu"
#include "check.h"

int main() {
  const int n = 1 << 18, block = 256, blocks = (n + block - 1) / block;
  std::vector<float> x(n);
  double expected = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 13);  // small integers: exact in float, in any order
    expected += x[i];
  }
  float *dx = nullptr, *partial = nullptr, *total = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&partial, blocks * sizeof(float)));
  CHECK(cudaMalloc(&total, 4 * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  reduce_sum<<<blocks, block>>>(dx, partial, n);
  CHECK(cudaGetLastError());
  float *in = partial;
  int m = blocks;
  while (m > 1) {  // 1024 -> 4 -> 1
    int next = (m + block - 1) / block;
    reduce_sum<<<next, block>>>(in, total, m);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(partial, total, next * sizeof(float), cudaMemcpyDeviceToDevice));
    m = next;
  }
  float got = 0;
  CHECK(cudaMemcpy(&got, partial, sizeof(float), cudaMemcpyDeviceToHost));
  if (got != static_cast<float>(expected)) {
    std::fprintf(stderr, "sum %f != %f\n", got, expected);
    return 1;
  }
  std::printf("reduce_app OK\n");
  return 0;
}
