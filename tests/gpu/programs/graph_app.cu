// A kernel launched once directly and then through a CUDA graph (stream capture, cudaGraphLaunch
// five times, another argument): the recorder records the direct launch and the graph's kernel node
// (the graph's first launch runs node by node); the result is the application's own. Prints
// `graph_app OK`.
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

int main() {
  const int n = 1 << 16, graph_launches = 5;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100);
    y[i] = static_cast<float>(i % 7);
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  saxpy<<<64, 256, 0, s>>>(n, 1.0f, dx, dy);
  CHECK(cudaGetLastError());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  saxpy<<<64, 256, 0, s>>>(n, 2.0f, dx, dy);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < graph_launches; ++k) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float expected = static_cast<float>(i % 7) + (1.0f + 2.0f * graph_launches) * x[i];
    if (y[i] != expected) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, y[i], expected);
      return 1;
    }
  }
  std::printf("graph_app OK\n");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
