// Probe (issue 7 fidelity): does a short kernel that runs first after the GPU sat idle run at a
// lower SM clock, and does device work just before it (the recorder's L2-flush memset, repeated,
// or a busy kernel) bring the clock up?
//
// A kernel `spin` keeps one thread per SM busy for a fixed number of SM cycles (clock64) and
// reads the global timer (ns) around it, so cycles / ns is the SM clock it ran at. Each case
// sleeps on the host for a gap, runs its warm-up work on the stream, then the measured spin; five
// repeats per case. It prints one JSON object per line. A probe: its findings go to
// docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/bin/clock_probe benchmarks/gpu/probes/clock_probe.cu   (--prepare does)
//   scripts/gpu-suite --run .gpu/bin/clock_probe
#include <cuda_runtime.h>

#include "probe_common.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>


// One thread per block spins for `cycles` SM cycles; block b writes (ns, cycles) at out[2b].
__global__ void spin(long long cycles, unsigned long long *out) {
  if (threadIdx.x != 0) return;
  unsigned long long t0 = global_ns();
  long long c0 = clock64(), c1 = c0;
  while (c1 - c0 < cycles) c1 = clock64();
  unsigned long long t1 = global_ns();
  out[2 * blockIdx.x] = t1 - t0;
  out[2 * blockIdx.x + 1] = (unsigned long long)(c1 - c0);
}

int main() {
  int sms = 0, l2 = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  unsigned long long *out = nullptr;
  void *flush = nullptr;
  const size_t flush_bytes = 2 * (size_t)l2;
  CHECK(cudaMalloc(&out, 2 * sms * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&flush, flush_bytes));
  std::vector<unsigned long long> host(2 * sms);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));

  // The measured kernel: ~5 us at 2 GHz, one block per SM. Returns the median SM clock in MHz and
  // the event time of the launch in us.
  auto measure = [&](double *event_us) {
    const long long cycles = 10000;
    CHECK(cudaEventRecord(a));
    spin<<<sms, 32>>>(cycles, out);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    *event_us = ms * 1e3;
    CHECK(cudaMemcpy(host.data(), out, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost));
    std::vector<double> mhz;
    for (int i = 0; i < sms; ++i) mhz.push_back(host[2 * i + 1] * 1e3 / (double)host[2 * i]);
    std::sort(mhz.begin(), mhz.end());
    return mhz[mhz.size() / 2];
  };
  auto warm = [&](const char *kind, int amount) {
    if (kind[0] == 'm')  // memsets of twice the L2, as the recorder's flush
      for (int i = 0; i < amount; ++i) CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    else if (kind[0] == 's')  // a busy kernel of `amount` us at 2 GHz
      spin<<<sms, 32>>>(2000LL * amount, out);
  };

  double ev = 0;
  double first = measure(&ev);
  std::printf("{\"case\": \"first kernel of the process\", \"mhz\": %.0f, \"event_us\": %.2f}\n", first, ev);
  struct Case {
    const char *warm;
    int amount;
  };
  const Case cases[] = {{"none", 0}, {"memset", 1}, {"memset", 4}, {"memset", 16}, {"memset", 64},
                        {"spin", 100}, {"spin", 1000}};
  const int gaps_ms[] = {0, 1, 10, 100, 300};
  for (int gap : gaps_ms) {
    for (const Case &c : cases) {
      std::printf("{\"gap_ms\": %d, \"warm\": \"%s\", \"amount\": %d, \"mhz\": [", gap, c.warm, c.amount);
      std::vector<double> evs;
      for (int r = 0; r < 5; ++r) {
        CHECK(cudaDeviceSynchronize());
        std::this_thread::sleep_for(std::chrono::milliseconds(gap));
        warm(c.warm, c.amount);
        double mhz = measure(&ev);
        evs.push_back(ev);
        std::printf("%s%.0f", r ? ", " : "", mhz);
      }
      std::printf("], \"event_us\": [");
      for (size_t r = 0; r < evs.size(); ++r) std::printf("%s%.2f", r ? ", " : "", evs[r]);
      std::printf("]}\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
