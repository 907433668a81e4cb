// vecadd: c = a + b, then c = 2 * a + c, on the GPU; checks the result on the host.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels.cuh"

#define CHECK(call)                                                                 \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 20);
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = float(i);
    b[i] = float(2 * i);
  }
  float *da, *db, *dc;
  const size_t bytes = size_t(n) * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));

  CHECK(launch_vecadd(da, db, dc, n, 0));
  axpy<float><<<(n + 255) / 256, 256>>>(2.0f, da, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));

  for (int i = 0; i < n; ++i) {
    if (c[i] != 5.0f * float(i)) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, c[i], 5.0f * float(i));
      return 1;
    }
  }
  std::printf("vecadd: %d elements OK\n", n);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return 0;
}
