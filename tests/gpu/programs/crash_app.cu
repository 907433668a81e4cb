// Launches saxpy a few times, waits for them, then dies of SIGSEGV: what the recorder completed
// before the crash must stay readable.
#include <csignal>
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

int main() {
  const int n = 1 << 16, launches = 3;
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int k = 0; k < launches; ++k) {
    saxpy<<<(n + 255) / 256, 256>>>(n, 1.0f + k, dx, dy);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("crash_app crashing now\n");
  std::fflush(stdout);
  std::raise(SIGSEGV);
  return 0;
}
