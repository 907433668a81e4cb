// vecadd: c = a + b, then c = 2 * a + c, on the GPU; checks the result on the host.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    hipError_t err_ = (call);                                                        \
    if (err_ != hipSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(err_)); \
      return 1;                                                                      \
    }                                                                                \
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
  CHECK(hipMalloc(&da, bytes));
  CHECK(hipMalloc(&db, bytes));
  CHECK(hipMalloc(&dc, bytes));
  CHECK(hipMemcpy(da, a.data(), bytes, hipMemcpyHostToDevice));
  CHECK(hipMemcpy(db, b.data(), bytes, hipMemcpyHostToDevice));

  CHECK(launch_vecadd(da, db, dc, n, 0));
  hipLaunchKernelGGL(axpy<float>, dim3((n + 255) / 256), dim3(256), 0, 0, 2.0f, da, dc, n);
  CHECK(hipGetLastError());
  CHECK(hipMemcpy(c.data(), dc, bytes, hipMemcpyDeviceToHost));

  for (int i = 0; i < n; ++i) {
    if (c[i] != 5.0f * float(i)) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, c[i], 5.0f * float(i));
      return 1;
    }
  }
  std::printf("vecadd: %d elements OK\n", n);
  CHECK(hipFree(da));
  CHECK(hipFree(db));
  CHECK(hipFree(dc));
  return 0;
}
