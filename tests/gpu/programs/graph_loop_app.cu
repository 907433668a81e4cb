// The recorder's cost to an application that launches one CUDA graph many times (benchmarks/gpu/
// bench_recorder.py, "graph"): a graph of NODES launches of tick (x += 1), captured from a stream,
// launched once (the recorder records its kernel node then), then LAUNCHES - 1 more times, timed on
// the host around that loop (synchronized). Checks the result; prints "graph_loop_app OK <seconds>".
//   graph_loop_app [NODES=32] [LAUNCHES=10000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

extern "C" __global__ void tick(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

int main(int argc, char **argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 32;
  const int launches = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int n = 4096, threads = 256;
  float *x;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMemset(x, 0, n * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < nodes; ++k) tick<<<n / threads, threads, 0, s>>>(x, n);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  auto start = std::chrono::steady_clock::now();
  for (int k = 1; k < launches; ++k) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<float> got(n);
  CHECK(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    if (got[i] != float(nodes) * float(launches)) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, got[i], float(nodes) * float(launches));
      return 1;
    }
  std::printf("graph_loop_app OK %.6f\n", seconds);
  return 0;
}
