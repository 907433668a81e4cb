// Stream-ordered memory: buffers from cudaMallocAsync on a stream, one freed with cudaFreeAsync
// right after the launch that reads it, then a new allocation. The recorder places them all and
// releases the freed one only when the stream has passed the free. Prints
// `async_app OK <x> <y> <tmp> <later>`.
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

int main() {
  const int n = 1 << 20, launches = 20;
  std::vector<float> x(n), y(n), t(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100);
    y[i] = static_cast<float>(i % 7);
    t[i] = static_cast<float>(i % 3);
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *dx = nullptr, *dy = nullptr, *dt = nullptr, *later = nullptr;
  CHECK(cudaMallocAsync(&dx, n * sizeof(float), s));
  CHECK(cudaMallocAsync(&dy, n * sizeof(float), s));
  CHECK(cudaMallocAsync(&dt, n * sizeof(float), s));
  CHECK(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dt, t.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  saxpy<<<128, 256, 0, s>>>(n, 1.0f, dt, dy);  // y += t, then t is freed in stream order
  CHECK(cudaGetLastError());
  CHECK(cudaFreeAsync(dt, s));
  CHECK(cudaMallocAsync(&later, n * sizeof(float), s));
  for (int k = 0; k < launches; ++k) {
    saxpy<<<128, 256, 0, s>>>(n, 2.0f, dx, dy);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaMemcpyAsync(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    float expected = static_cast<float>(i % 7) + static_cast<float>(i % 3) + 2.0f * launches * x[i];
    if (y[i] != expected) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, y[i], expected);
      return 1;
    }
  }
  std::printf("async_app OK %p %p %p %p\n", (void*)dx, (void*)dy, (void*)dt, (void*)later);
  CHECK(cudaFreeAsync(dx, s));
  CHECK(cudaFreeAsync(dy, s));
  CHECK(cudaFreeAsync(later, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
