// Probe (issue 38 fidelity): does the time a short kernel takes depend on how long the GPU idled before it?
//
// The application corpus's replays that miss the recorded launch's time are mostly *faster* than it (8-23% on
// kernels of 2-10 us), while the recorder's second timing in the application agrees with the first. A fresh
// replay process runs its timed launches back to back; an application launches with gaps (Python, the host's
// own work) between them. So this times one kernel (out[i] = 2 * in[i], 1 and 8 MB) after the replay's flush (a
// memset over twice the L2), with the host idle for 0, 20 us, 200 us, 2 ms or 20 ms before each flush, and
// reads the SM clock the kernel ran at (clock64 against globaltimer in thread 0). clock_probe.cu asked the
// first half of this (the clock after idle, for a kernel of fixed cycles); this one times the replay's own
// sequence, flush then kernel, as the corpus's misses would show it. Prints one JSON object per
// (size, gap). A probe: its findings go to docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/idle_gap_probe benchmarks/gpu/probes/idle_gap_probe.cu
#include <cuda_runtime.h>

#include "probe_common.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>


__global__ void twice(const float *in, float *out, size_t n, unsigned long long *clocks) {
  unsigned long long c0 = 0, t0 = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    c0 = clock64();
    t0 = global_ns();
  }
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long c1 = clock64(), t1 = global_ns();
    clocks[0] = c1 - c0;
    clocks[1] = t1 - t0;
  }
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 30;
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  size_t flush_bytes = 2 * (size_t)l2;
  void *flush;
  CHECK(cudaMalloc(&flush, flush_bytes));
  unsigned long long *clocks;
  CHECK(cudaMalloc(&clocks, 2 * sizeof(unsigned long long)));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int gaps_us[] = {0, 20, 200, 2000, 20000};
  for (double mb : {1.0, 8.0}) {
    size_t n = (size_t)(mb * (1 << 20)) / sizeof(float);
    float *in, *out;
    CHECK(cudaMalloc(&in, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemset(in, 1, n * sizeof(float)));
    int blocks = (int)std::min<size_t>((n + 255) / 256, 65535);
    for (int warm = 0; warm < 20; warm++) twice<<<blocks, 256>>>(in, out, n, clocks);
    CHECK(cudaDeviceSynchronize());
    for (int round = 0; round < 2; round++) {  // the gaps in one order, then again, against drift
      for (int gap : gaps_us) {
        std::vector<float> times;
        std::vector<double> mhz;
        for (int r = 0; r < repeats; r++) {
          if (gap) std::this_thread::sleep_for(std::chrono::microseconds(gap));
          CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes));
          CHECK(cudaEventRecord(a));
          twice<<<blocks, 256>>>(in, out, n, clocks);
          CHECK(cudaEventRecord(b));
          CHECK(cudaEventSynchronize(b));
          float ms = 0;
          CHECK(cudaEventElapsedTime(&ms, a, b));
          unsigned long long host[2];
          CHECK(cudaMemcpy(host, clocks, sizeof host, cudaMemcpyDeviceToHost));
          times.push_back(ms * 1000.0f);
          if (host[1]) mhz.push_back(1e3 * (double)host[0] / (double)host[1]);
        }
        std::sort(times.begin(), times.end());
        std::sort(mhz.begin(), mhz.end());
        std::printf(
            "{\"mb\": %.1f, \"round\": %d, \"gap_us\": %d, \"median_us\": %.3f, \"min_us\": %.3f, \"max_us\": %.3f, "
            "\"sm_mhz_median\": %.0f, \"sm_mhz_min\": %.0f}\n",
            mb, round, gap, times[times.size() / 2], times.front(), times.back(),
            mhz.empty() ? 0.0 : mhz[mhz.size() / 2], mhz.empty() ? 0.0 : mhz.front());
        std::fflush(stdout);
      }
    }
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  }
  return 0;
}
