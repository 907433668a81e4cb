// Probe (issue 38 fidelity): what state of an application's process makes a short flushed kernel slower?
//
// The application corpus's replays that miss the recorded launch's time are *faster* than it, by 8-23% on kernels
// of 2-10 us. The recorder's second timing and its launch of the recorded image in the application agree with the
// recorded time, and the idle gap before a launch does not matter (idle_gap_probe.cu), so the difference lies in
// what the application's process has done before the launch that a fresh replay process has not. This times one
// kernel (out[i] = 2 * in[i], 0.25 and 1 MB) after the replay's flush (a memset over twice the L2) and, before
// each flush, does one of:
//   base      nothing (the replay's own sequence);
//   other     another small kernel on other memory (the application's previous launch);
//   code      a kernel with a large body on every SM (the SMs' instruction caches hold other code);
//   shared    a kernel that takes 200 KiB of shared memory per block (another L1/shared split);
// then, in this order, changes the process for good and times `base` again after each:
//   local     a kernel with a large local-memory frame has run (the context's local memory grew);
//   many      20,000 allocations of 64 KiB exist (a framework's small pools);
//   footprint 16 GiB more of device memory is allocated and written (a framework's caching allocator);
//   streams   32 more streams exist, each with work that has finished.
// Each condition runs in two rounds against drift. Prints one JSON object per (size, round, condition). A probe:
// its findings go to docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/process_state_probe benchmarks/gpu/probes/process_state_probe.cu
#include <cuda_runtime.h>

#include "probe_common.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void twice(const float *in, float *out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
}

__global__ void add_one(float *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] += 1.0f;
}

// About 4096 dependent multiply-adds with distinct constants, unrolled: tens of KiB of code.
__global__ void big_body(float *p) {
  float v = p[threadIdx.x];
#pragma unroll
  for (int k = 0; k < 4096; k++) v = v * 1.0001f + (float)(k * 7 % 1013);
  p[threadIdx.x] = v;
}

__global__ void shared_heavy(float *p) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
}

__global__ void local_heavy(float *p, int k) {
  volatile float frame[16384];  // 64 KiB of local memory per thread
  for (int i = 0; i < 16384; i += 512) frame[(i + k) % 16384] = p[threadIdx.x];
  p[threadIdx.x] = frame[k % 16384];
}

struct Setup {
  size_t flush_bytes;
  void *flush;
  float *scratch;  // 64 MiB for the side kernels
  int sms;
};

enum Before { BASE, OTHER, CODE, SHARED };

static float time_once(const Setup &s, Before before, const float *in, float *out, size_t n, cudaEvent_t a,
                       cudaEvent_t b, int r) {
  if (before == OTHER) add_one<<<s.sms * 4, 256>>>(s.scratch, 1 << 20);
  if (before == CODE) big_body<<<s.sms * 2, 256>>>(s.scratch);
  if (before == SHARED) shared_heavy<<<s.sms, 256, 200 * 1024>>>(s.scratch);
  CHECK(cudaMemsetAsync(s.flush, r & 0xff, s.flush_bytes));
  CHECK(cudaEventRecord(a));
  int blocks = (int)std::min<size_t>((n + 255) / 256, 65535);
  twice<<<blocks, 256>>>(in, out, n);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.0f;
}

static void report(double mb, int round, const char *condition, std::vector<float> t) {
  std::sort(t.begin(), t.end());
  std::printf("{\"mb\": %.2f, \"round\": %d, \"condition\": \"%s\", \"median_us\": %.3f, \"min_us\": %.3f, "
              "\"p90_us\": %.3f}\n",
              mb, round, condition, t[t.size() / 2], t.front(), t[t.size() * 9 / 10]);
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 40;
  int l2 = 0;
  Setup s{};
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(shared_heavy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  s.flush_bytes = 2 * (size_t)l2;
  CHECK(cudaMalloc(&s.flush, s.flush_bytes));
  CHECK(cudaMalloc(&s.scratch, 64u << 20));
  CHECK(cudaMemset(s.scratch, 0, 64u << 20));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const double sizes_mb[] = {0.25, 1.0};
  float *in[2], *out[2];
  size_t n[2];
  for (int k = 0; k < 2; k++) {
    n[k] = (size_t)(sizes_mb[k] * (1 << 20)) / sizeof(float);
    CHECK(cudaMalloc(&in[k], n[k] * sizeof(float)));
    CHECK(cudaMalloc(&out[k], n[k] * sizeof(float)));
    CHECK(cudaMemset(in[k], 1, n[k] * sizeof(float)));
  }
  auto measure = [&](Before before, const char *name, int round) {
    for (int k = 0; k < 2; k++) {
      std::vector<float> t;
      for (int w = 0; w < 5; w++) time_once(s, before, in[k], out[k], n[k], a, b, w);
      for (int r = 0; r < repeats; r++) t.push_back(time_once(s, before, in[k], out[k], n[k], a, b, r));
      report(sizes_mb[k], round, name, t);
    }
  };
  for (int round = 0; round < 2; round++) {
    measure(BASE, "base", round);
    measure(OTHER, "other", round);
    measure(CODE, "code", round);
    measure(SHARED, "shared", round);
  }
  // The changes for good, each followed by the replay's own sequence.
  local_heavy<<<s.sms * 8, 256>>>(s.scratch, 3);
  CHECK(cudaDeviceSynchronize());
  for (int round = 0; round < 2; round++) measure(BASE, "local", round);
  std::vector<void *> small(20000);
  for (void *&p : small) CHECK(cudaMalloc(&p, 64 << 10));
  for (int round = 0; round < 2; round++) measure(BASE, "many", round);
  std::vector<void *> big(16);
  for (void *&p : big) {
    CHECK(cudaMalloc(&p, 1ull << 30));
    CHECK(cudaMemset(p, 7, 1ull << 30));
  }
  CHECK(cudaDeviceSynchronize());
  for (int round = 0; round < 2; round++) measure(BASE, "footprint", round);
  std::vector<cudaStream_t> streams(32);
  for (cudaStream_t &st : streams) {
    CHECK(cudaStreamCreate(&st));
    add_one<<<4, 256, 0, st>>>(s.scratch, 1024);
  }
  CHECK(cudaDeviceSynchronize());
  for (int round = 0; round < 2; round++) measure(BASE, "streams", round);
  // And the replay's sequence in a process that has done all of the above, from the first condition again.
  for (int round = 0; round < 2; round++) measure(OTHER, "all+other", round);
  return 0;
}
