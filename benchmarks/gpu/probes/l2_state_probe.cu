// Probe (issue 38 fidelity): does the L2 flush before a timed launch leave a state that depends on what came
// before it?
//
// The application corpus's instances that replayed 6-14% faster than their recorded launch came within 5%
// when the replay read or rewrote every recorded range through the SMs before its flush (bench_app_corpus's
// diagnosis `sm-read`, `sm-rewrite`). Were the flush a flush, what came before it could not matter. So this
// times one kernel (out[i] = 2 * in[i]) after each pair of
//   a state: how its buffers were last touched (`ce-write`: host-to-device copies, as a replay's restore;
//     `sm-write`: a kernel's stores, as the application's kernels leave them; `sm-write+ce-read`: then read
//     by device-to-host copies, as the recorder's prologue capture reads them; `ce-write+sm-read`: the
//     diagnosis's sm-read; `idle`: the buffers untouched since the last timed run);
//   a flush: `memset` (the recorder's and the replay's: cuMemsetD8 over twice the L2), `memset4x` (four
//     times the L2), `store` (a kernel's plain stores over twice the L2), `load` (a kernel's loads of twice
//     the L2, nothing written back), `memset+load` (the memset, then the loads of another buffer);
// and prints one JSON object per (size, flush, state): the median of the kernel's event-timed runs. A flush
// that removes the state gives one time per flush and size, whatever the state. A probe: its findings go to
// docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/l2_state_probe benchmarks/gpu/probes/l2_state_probe.cu
//   scripts/gpu-suite --run .gpu/probe/l2_state_probe [repeats]
#include <cuda_runtime.h>

#include "probe_common.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>


__global__ void twice(const float *in, float *out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
}

__global__ void store(float *p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}

// Loads every element; writes one value only if the sum is impossible, so nothing but the loads reaches the L2.
__global__ void load(const float *p, size_t n, float *sink) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += p[i];
  if (s == -1.0f) *sink = s;
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  int device = 0, l2 = 0, sms = 0;
  CHECK(cudaSetDevice(device));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  size_t flush_bytes = 4 * (size_t)l2;  // memset4x uses all of it; the others its first half
  float *flush_a = nullptr, *flush_b = nullptr, *sink = nullptr;
  CHECK(cudaMalloc(&flush_a, flush_bytes));
  CHECK(cudaMalloc(&flush_b, 2 * (size_t)l2));
  CHECK(cudaMalloc(&sink, sizeof(float)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const int grid = sms * 8, block = 256;
  const std::vector<size_t> sizes = {1u << 18, 1u << 21, 1u << 23};  // floats: 1, 8, 32 MB per buffer
  const std::vector<std::string> flushes = {"memset", "memset4x", "store", "load", "memset+load"};
  const std::vector<std::string> states = {"ce-write", "sm-write", "sm-write+ce-read", "ce-write+sm-read", "idle"};
  for (size_t n : sizes) {
    size_t bytes = n * sizeof(float);
    float *in = nullptr, *out = nullptr;
    CHECK(cudaMalloc(&in, bytes));
    CHECK(cudaMalloc(&out, bytes));
    float *host = nullptr;
    CHECK(cudaMallocHost(&host, bytes));
    for (size_t i = 0; i < n; ++i) host[i] = (float)(i % 1000);
    CHECK(cudaMemcpy(in, host, bytes, cudaMemcpyHostToDevice));
    for (const auto &flush : flushes) {
      for (const auto &state : states) {
        std::vector<float> us;
        for (int r = 0; r < repeats + 1; ++r) {  // the first run of each pair is a warm-up, not counted
          if (state == "ce-write" || state == "ce-write+sm-read") {
            CHECK(cudaMemcpyAsync(in, host, bytes, cudaMemcpyHostToDevice, stream));
            CHECK(cudaMemcpyAsync(out, host, bytes, cudaMemcpyHostToDevice, stream));
          } else if (state == "sm-write" || state == "sm-write+ce-read") {
            store<<<grid, block, 0, stream>>>(in, n, 1.0f);
            store<<<grid, block, 0, stream>>>(out, n, 0.0f);
          }
          if (state == "sm-write+ce-read") {
            CHECK(cudaMemcpyAsync(host, in, bytes, cudaMemcpyDeviceToHost, stream));
            CHECK(cudaMemcpyAsync(host, out, bytes, cudaMemcpyDeviceToHost, stream));
          } else if (state == "ce-write+sm-read") {
            load<<<grid, block, 0, stream>>>(in, n, sink);
            load<<<grid, block, 0, stream>>>(out, n, sink);
          }
          if (flush == "memset" || flush == "memset+load") CHECK(cudaMemsetAsync(flush_a, 0, 2 * (size_t)l2, stream));
          if (flush == "memset4x") CHECK(cudaMemsetAsync(flush_a, 0, flush_bytes, stream));
          if (flush == "store") store<<<grid, block, 0, stream>>>(flush_a, 2 * (size_t)l2 / sizeof(float), 0.0f);
          if (flush == "load") load<<<grid, block, 0, stream>>>(flush_a, 2 * (size_t)l2 / sizeof(float), sink);
          if (flush == "memset+load") load<<<grid, block, 0, stream>>>(flush_b, 2 * (size_t)l2 / sizeof(float), sink);
          CHECK(cudaStreamSynchronize(stream));  // as the recorder and the replay: the device idle before the launch
          CHECK(cudaEventRecord(start, stream));
          twice<<<grid, block, 0, stream>>>(in, out, n);
          CHECK(cudaEventRecord(stop, stream));
          CHECK(cudaEventSynchronize(stop));
          float ms = 0.0f;
          CHECK(cudaEventElapsedTime(&ms, start, stop));
          if (r > 0) us.push_back(ms * 1000.0f);
        }
        std::sort(us.begin(), us.end());
        std::printf("{\"mb\": %.1f, \"flush\": \"%s\", \"state\": \"%s\", \"median_us\": %.3f, \"min_us\": %.3f, "
                    "\"max_us\": %.3f}\n",
                    bytes / 1048576.0, flush.c_str(), state.c_str(), us[us.size() / 2], us.front(), us.back());
      }
    }
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFreeHost(host));
  }
  return 0;
}
