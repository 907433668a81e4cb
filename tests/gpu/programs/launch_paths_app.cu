// Launches kernels through each of cudart's launch paths, as programs we did not write do: a classic
// benchmark loop of two kernels (triple chevrons), a kernel taking a struct by value,
// cudaLaunchKernelExC, cudaLaunchCooperativeKernel, the driver's cuLaunchKernel (from
// cudaGetDriverEntryPointByVersion); then resets the
// device right after the last launch without synchronizing (as benchmark suites end), or, with the
// argument "exit", leaves with exit() from inside the loop. Built as it is and with
// --default-stream per-thread. Prints "launches <kernel> <n>" for each kernel it launched.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

struct Step {
  float scale;
  int n;
  float *out;
};

extern "C" __global__ void relax(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.5f * (in[i] + (i + 1 < n ? in[i + 1] : in[i]));
}

extern "C" __global__ void swap_back(const float *out, float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) in[i] = out[i] + 1.0f;
}

extern "C" __global__ void by_value(Step s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.n) s.out[i] = s.out[i] * s.scale + i;
}

extern "C" __global__ void launched_ex(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 2.0f + 1.0f;
}

extern "C" __global__ void cooperative(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] -= 3.0f;
}

extern "C" __global__ void by_driver(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 0.25f;
}

int main(int argc, char **argv) {
  const bool leave_in_loop = argc > 1 && std::strcmp(argv[1], "exit") == 0;
  const int n = 1 << 16, iterations = 4, threads = 256, blocks = (n + threads - 1) / threads;
  float *in, *out, *other;
  CHECK(cudaMalloc(&in, n * sizeof(float)));
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMalloc(&other, n * sizeof(float)));
  float *host = static_cast<float *>(std::malloc(n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = float(i % 97);
  CHECK(cudaMemcpy(in, host, n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(other, host, n * sizeof(float), cudaMemcpyHostToDevice));
  for (int it = 0; it < iterations; ++it) {
    relax<<<blocks, threads>>>(in, out, n);
    swap_back<<<blocks, threads>>>(out, in, n);
    if (leave_in_loop && it == 1) {
      std::printf("launches relax 2\nlaunches swap_back 2\n");
      std::fflush(stdout);
      std::exit(0);  // no synchronize, no cudaFree: the recorder must still have written both launches
    }
  }
  Step step{1.5f, n, other};
  by_value<<<blocks, threads>>>(step);

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributePriority;
  attribute.val.priority = 0;
  config.attrs = &attribute;
  config.numAttrs = 1;
  void *ex_args[] = {&other, const_cast<int *>(&n)};
  CHECK(cudaLaunchKernelExC(&config, reinterpret_cast<const void *>(launched_ex), ex_args));

  int coop_blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&coop_blocks, cooperative, threads, 0));
  void *coop_args[] = {&other, const_cast<int *>(&n)};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void *>(cooperative), dim3(1), dim3(threads), coop_args));

  cudaFunction_t function;
  CHECK(cudaGetFuncBySymbol(&function, reinterpret_cast<const void *>(by_driver)));
  void *driver_args[] = {&other, const_cast<int *>(&n)};
  using launch_t = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void **, void **);
  void *entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000, cudaEnableDefault, &found));
  if (!entry || reinterpret_cast<launch_t>(entry)(reinterpret_cast<CUfunction>(function), blocks, 1, 1, threads, 1,
                                                  1, 0, 0, driver_args, nullptr) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuLaunchKernel failed\n");
    return 2;
  }
  std::printf("launches relax %d\nlaunches swap_back %d\nlaunches by_value 1\nlaunches launched_ex 1\n"
              "launches cooperative 1\nlaunches by_driver 1\n", iterations, iterations);
  std::fflush(stdout);
  CHECK(cudaDeviceReset());  // right after the last launch: no synchronize
  std::free(host);
  return 0;
}
