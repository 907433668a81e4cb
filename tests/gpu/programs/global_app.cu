// A kernel that reads one __device__ global (bias, set with cudaMemcpyToSymbol) and increments
// another (launch_count): the recording must carry both, by name, in prologue and epilogue.
// 17 launches: the recorder times the recorded one and the 16 after it (replay fidelity).
#include <vector>

#include "../../data/kernels/device_global.cu"
#include "check.h"

int main() {
  const int n = 4096, launches = 17;
  std::vector<float> x(n, 1.0f);
  float *dx = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const float b = 2.0f;
  const int zero = 0;
  CHECK(cudaMemcpyToSymbol(bias, &b, sizeof b));
  CHECK(cudaMemcpyToSymbol(launch_count, &zero, sizeof zero));
  for (int k = 0; k < launches; ++k) {
    add_bias<<<(n + 127) / 128, 128>>>(dx, n);
    CHECK(cudaGetLastError());
  }
  int count = 0;
  CHECK(cudaMemcpyFromSymbol(&count, launch_count, sizeof count));
  CHECK(cudaMemcpy(x.data(), dx, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (count != launches || x[0] != 1.0f + launches * b || x[n - 1] != 1.0f + launches * b) {
    std::fprintf(stderr, "count %d, x[0] %f\n", count, x[0]);
    return 1;
  }
  std::printf("global_app OK\n");
  return 0;
}
