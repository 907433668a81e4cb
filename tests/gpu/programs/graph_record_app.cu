// CUDA graphs whose kernels the recorder must record (issue 38, point 1):
//  * captured: stream capture of scale(x, 2), a device-to-device copy of x into y, offset(y, 1);
//    instantiated and launched 4 times. While the capture is in progress, beside(v += 2) runs on
//    another stream (the recorder must leave it unrecorded: its synchronize would invalidate the
//    capture, and cudaStreamEndCapture would fail);
//  * explicit: built with the graph API: a memset of z to 0, axpy(z += 3 w), a child graph holding
//    square(z = z * z); launched 3 times, then its axpy node updated to a = 5
//    (cudaGraphExecKernelNodeSetParams) and launched once more;
//  * hosted: hosted(v += 1) followed by a host node; launched twice (the recorder cannot run a host
//    node alone: this graph runs as a graph, unrecorded, and the recorder says why).
// Checks every result against the host's, prints "launches <kernel> <n>" for each kernel node that
// ran and "graph_record_app OK".
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

extern "C" __global__ void scale(float *x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

extern "C" __global__ void offset(float *y, float c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += c;
}

extern "C" __global__ void axpy(float *z, const float *w, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] += a * w[i];
}

extern "C" __global__ void square(float *z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = z[i] * z[i];
}

extern "C" __global__ void beside(float *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += 2.0f;
}

extern "C" __global__ void hosted(float *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += 1.0f;
}

static int host_calls = 0;
static void CUDART_CB count_host_call(void *) { ++host_calls; }

static bool same(const std::vector<float> &got, const std::vector<float> &want, const char *what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      std::fprintf(stderr, "%s mismatch at %zu: %f != %f\n", what, i, got[i], want[i]);
      return false;
    }
  return true;
}

static cudaKernelNodeParams kernel_node(void *fn, int blocks, int threads, void **args) {
  cudaKernelNodeParams p = {};
  p.func = fn;
  p.gridDim = dim3(blocks);
  p.blockDim = dim3(threads);
  p.kernelParams = args;
  return p;
}

int main() {
  const int n = 1 << 16, threads = 256, blocks = (n + threads - 1) / threads;
  const int captured_launches = 4, explicit_launches = 3, hosted_launches = 2;
  const size_t bytes = n * sizeof(float);
  std::vector<float> hx(n), hw(n);
  for (int i = 0; i < n; ++i) hx[i] = float(i % 101), hw[i] = float(i % 13) - 6.0f;
  float *x, *y, *z, *w, *v;
  for (float **p : {&x, &y, &z, &w, &v}) CHECK(cudaMalloc(p, bytes));
  CHECK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(v, 0, bytes));
  cudaStream_t s, other;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

  // Captured: scale(x, 2) -> copy x to y -> offset(y, 1).
  cudaGraph_t captured;
  cudaGraphExec_t captured_exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale<<<blocks, threads, 0, s>>>(x, 2.0f, n);
  beside<<<blocks, threads, 0, other>>>(v, n);  // runs now, not captured
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s));
  offset<<<blocks, threads, 0, s>>>(y, 1.0f, n);
  CHECK(cudaStreamEndCapture(s, &captured));
  CHECK(cudaStreamSynchronize(other));
  CHECK(cudaGraphInstantiate(&captured_exec, captured, 0));
  for (int k = 0; k < captured_launches; ++k) CHECK(cudaGraphLaunch(captured_exec, s));

  // Explicit: memset z = 0 -> axpy(z, w, 3) -> child graph { square(z) }.
  cudaGraph_t graph, child;
  cudaGraphNode_t set_node, axpy_node, child_node, square_node;
  CHECK(cudaGraphCreate(&graph, 0));
  CHECK(cudaGraphCreate(&child, 0));
  cudaMemsetParams set = {};
  set.dst = z, set.value = 0, set.elementSize = 4, set.width = n, set.height = 1;
  CHECK(cudaGraphAddMemsetNode(&set_node, graph, nullptr, 0, &set));
  float a = 3.0f;
  int count = n;
  void *axpy_args[] = {&z, &w, &a, &count};
  cudaKernelNodeParams axpy_params = kernel_node(reinterpret_cast<void *>(axpy), blocks, threads, axpy_args);
  CHECK(cudaGraphAddKernelNode(&axpy_node, graph, &set_node, 1, &axpy_params));
  void *square_args[] = {&z, &count};
  cudaKernelNodeParams square_params = kernel_node(reinterpret_cast<void *>(square), blocks, threads, square_args);
  CHECK(cudaGraphAddKernelNode(&square_node, child, nullptr, 0, &square_params));
  CHECK(cudaGraphAddChildGraphNode(&child_node, graph, &axpy_node, 1, child));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < explicit_launches; ++k) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> got(n), want(n);
  CHECK(cudaMemcpy(got.data(), z, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) want[i] = (3.0f * hw[i]) * (3.0f * hw[i]);
  if (!same(got, want, "explicit graph (a = 3)")) return 1;
  a = 5.0f;  // the node keeps its own copy of the arguments: set them on the executable graph
  CHECK(cudaGraphExecKernelNodeSetParams(exec, axpy_node, &axpy_params));
  CHECK(cudaGraphLaunch(exec, s));

  // Hosted: hosted(v) -> host node.
  cudaGraph_t with_host;
  cudaGraphNode_t hosted_node, host_node;
  CHECK(cudaGraphCreate(&with_host, 0));
  void *hosted_args[] = {&v, &count};
  cudaKernelNodeParams hosted_params = kernel_node(reinterpret_cast<void *>(hosted), blocks, threads, hosted_args);
  CHECK(cudaGraphAddKernelNode(&hosted_node, with_host, nullptr, 0, &hosted_params));
  cudaHostNodeParams host = {count_host_call, nullptr};
  CHECK(cudaGraphAddHostNode(&host_node, with_host, &hosted_node, 1, &host));
  cudaGraphExec_t hosted_exec;
  CHECK(cudaGraphInstantiate(&hosted_exec, with_host, 0));
  for (int k = 0; k < hosted_launches; ++k) CHECK(cudaGraphLaunch(hosted_exec, s));
  CHECK(cudaStreamSynchronize(s));

  // Every result as the host computes it.
  std::vector<float> wx(n), wy(n);
  for (int i = 0; i < n; ++i) {
    float xi = hx[i];
    for (int k = 0; k < captured_launches; ++k) xi *= 2.0f;
    wx[i] = xi, wy[i] = xi + 1.0f, want[i] = (5.0f * hw[i]) * (5.0f * hw[i]);
  }
  CHECK(cudaMemcpy(got.data(), x, bytes, cudaMemcpyDeviceToHost));
  if (!same(got, wx, "captured graph, x")) return 1;
  CHECK(cudaMemcpy(got.data(), y, bytes, cudaMemcpyDeviceToHost));
  if (!same(got, wy, "captured graph, y")) return 1;
  CHECK(cudaMemcpy(got.data(), z, bytes, cudaMemcpyDeviceToHost));
  if (!same(got, want, "explicit graph (a = 5)")) return 1;
  CHECK(cudaMemcpy(got.data(), v, bytes, cudaMemcpyDeviceToHost));
  if (!same(got, std::vector<float>(n, 2.0f + hosted_launches), "beside and the hosted graph")) return 1;
  if (host_calls != hosted_launches) {
    std::fprintf(stderr, "host node ran %d times, not %d\n", host_calls, hosted_launches);
    return 1;
  }
  std::printf("launches scale %d\nlaunches offset %d\n", captured_launches, captured_launches);
  std::printf("launches axpy %d\nlaunches square %d\n", explicit_launches + 1, explicit_launches + 1);
  std::printf("launches beside 1\nlaunches hosted %d\ngraph_record_app OK\n", hosted_launches);
  for (cudaGraphExec_t e : {captured_exec, exec, hosted_exec}) CHECK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {captured, graph, child, with_host}) CHECK(cudaGraphDestroy(g));
  for (float *p : {x, y, z, w, v}) CHECK(cudaFree(p));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(other));
  return 0;
}
