// A float atomicAdd of a million values into one accumulator: the sum's last bits follow the order in
// which the blocks arrive, which changes from run to run. y = 2x beside it is deterministic.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#include "check.h"

extern "C" __global__ void scale_and_sum(const float *x, float *y, float *total, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = 2.0f * x[i];
    atomicAdd(total, x[i]);
  }
}

int main() {
  const int n = 1 << 20;
  float *host = static_cast<float *>(std::malloc(n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = 1.0f / float(1 + i % 977);
  float *x, *y, *total;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMalloc(&total, sizeof(float)));
  CHECK(cudaMemcpy(x, host, n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(total, 0, sizeof(float)));
  scale_and_sum<<<(n + 255) / 256, 256>>>(x, y, total, n);
  float sum = 0;
  CHECK(cudaMemcpy(&sum, total, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("atomic_sum_app OK %.9g\n", sum);
  return 0;
}
