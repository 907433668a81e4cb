// Probe (issue 38 fidelity): does a device-memory mapping made right before a launch slow the kernel down, and
// does the recorder's prologue capture (its shadow allocation from a pool, then the copy) leave a state the
// replay's sequence does not?
//
// The recorded launch is timed right after the recorder allocated its two shadows from its pool (a pool trimmed
// to nothing after each drain, so each allocation maps memory anew) and copied the launch's memory into them; the
// application itself often allocates right before its launch (a framework's caching allocator growing). Its second
// launch (MNEME_RECORD_RETIME) and the replay, which map nothing right before, ran 15-25% faster on 2-10 us kernels
// (docs/design/investigations/replay-timing-2026-12-06.md). Each run here does one thing, then the replay's flush
// (a memset over twice the L2), a device synchronize, and the timed launch (out = 2 * in):
//   base        nothing (the replay's sequence);
//   malloc      cudaMalloc of 2 MiB (freed after the launch);
//   malloc64    cudaMalloc of 64 MiB (freed after the launch);
//   free        cudaFree of 2 MiB allocated after the previous run;
//   pool        two shadows from a pool trimmed to nothing after each run, the kernel's memory copied into one
//               (the recorder's prologue capture as it is);
//   pool_kept   the same from a pool that keeps its memory (release threshold: all of it);
//   capture     the copy alone, into a buffer allocated once (what is left of the capture without a mapping);
//   restore     the copy the other way, from that buffer into the kernel's memory (a replay's restore, the
//               recorder's second timing).
// The time is taken twice: CUDA events around the launch, and the kernel's own span by the global timer (the
// earliest block start to the latest block end, what CUPTI's kernel records hold). Two rounds, the conditions
// interleaved run by run. Prints one JSON object per (round, size, condition). A probe: its findings go to
// docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/mapping_probe benchmarks/gpu/probes/mapping_probe.cu
//   .gpu/probe/mapping_probe [repeats]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

__global__ void twice(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  unsigned long long t0 = threadIdx.x == 0 ? global_ns() : 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
  span_close(span, t0);
}

enum Condition { BASE, MALLOC, MALLOC64, FREE, POOL, POOL_KEPT, CAPTURE, RESTORE, CONDITIONS };
static const char *const NAMES[CONDITIONS] = {"base",      "malloc",  "malloc64", "free",
                                              "pool",      "pool_kept", "capture",  "restore"};

struct Probe {
  void *flush, *in, *out, *span, *copy, *pending_free;
  size_t flush_bytes, bytes;
  unsigned long long n;
  cudaMemPool_t trimmed, kept;
  cudaStream_t side;
  cudaEvent_t a, b, copied;
  int sms;
};

// The recorder's prologue capture: two shadows from `pool` on its own stream, the kernel's memory copied into one,
// the launch's stream waiting for the copy.
static void capture_into_pool(Probe &p, cudaMemPool_t pool, void *shadows[2]) {
  for (int s = 0; s < 2; s++) CHECK(cudaMallocFromPoolAsync(&shadows[s], 2 * p.bytes, pool, p.side));
  CHECK(cudaMemcpyAsync(shadows[0], p.in, p.bytes, cudaMemcpyDeviceToDevice, p.side));
  CHECK(cudaMemcpyAsync((char *)shadows[0] + p.bytes, p.out, p.bytes, cudaMemcpyDeviceToDevice, p.side));
  CHECK(cudaEventRecord(p.copied, p.side));
  CHECK(cudaStreamWaitEvent(nullptr, p.copied));
}

static Sample run(Probe &p, Condition c, int r) {
  void *fresh = nullptr, *shadows[2] = {nullptr, nullptr};
  cudaMemPool_t pool = c == POOL ? p.trimmed : p.kept;
  switch (c) {
    case MALLOC: CHECK(cudaMalloc(&fresh, 2 << 20)); break;
    case MALLOC64: CHECK(cudaMalloc(&fresh, 64 << 20)); break;
    case FREE:
      CHECK(cudaFree(p.pending_free));
      p.pending_free = nullptr;
      break;
    case POOL:
    case POOL_KEPT: capture_into_pool(p, pool, shadows); break;
    case CAPTURE:
      CHECK(cudaMemcpyAsync(p.copy, p.in, p.bytes, cudaMemcpyDeviceToDevice, p.side));
      CHECK(cudaMemcpyAsync((char *)p.copy + p.bytes, p.out, p.bytes, cudaMemcpyDeviceToDevice, p.side));
      CHECK(cudaEventRecord(p.copied, p.side));
      CHECK(cudaStreamWaitEvent(nullptr, p.copied));
      break;
    case RESTORE:
      CHECK(cudaMemcpyAsync(p.in, p.copy, p.bytes, cudaMemcpyDeviceToDevice, p.side));
      CHECK(cudaMemcpyAsync(p.out, (char *)p.copy + p.bytes, p.bytes, cudaMemcpyDeviceToDevice, p.side));
      CHECK(cudaStreamSynchronize(p.side));
      break;
    default: break;
  }
  CHECK(cudaMemsetAsync(p.flush, r & 0xff, p.flush_bytes));
  unsigned long long init[2] = {~0ull, 0ull};
  CHECK(cudaMemcpyAsync(p.span, init, sizeof init, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  void *args[] = {&p.in, &p.out, &p.n, &p.span};
  dim3 grid((unsigned)std::min<unsigned long long>((p.n + 255) / 256, (unsigned long long)p.sms * 8));
  CHECK(cudaEventRecord(p.a));
  CHECK(cudaLaunchKernel((const void *)twice, grid, dim3(256), args, 0, nullptr));
  CHECK(cudaEventRecord(p.b));
  CHECK(cudaEventSynchronize(p.b));
  unsigned long long got[2];
  CHECK(cudaMemcpy(got, p.span, sizeof got, cudaMemcpyDeviceToHost));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, p.a, p.b));
  if (fresh) CHECK(cudaFree(fresh));
  for (void *s : shadows)
    if (s) CHECK(cudaFreeAsync(s, p.side));
  CHECK(cudaStreamSynchronize(p.side));
  if (c == POOL) CHECK(cudaMemPoolTrimTo(p.trimmed, 0));
  if (!p.pending_free) CHECK(cudaMalloc(&p.pending_free, 2 << 20));
  return {ms * 1000.0f, (float)(got[1] - got[0]) / 1000.0f};
}

static cudaMemPool_t make_pool(bool keep) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  if (keep) {
    uint64_t all = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &all));
  }
  return pool;
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 40;
  Probe p{};
  CHECK(cudaFree(nullptr));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
  p.flush_bytes = 2 * (size_t)l2;
  CHECK(cudaMalloc(&p.flush, p.flush_bytes));
  CHECK(cudaMalloc(&p.span, 16));
  CHECK(cudaStreamCreateWithFlags(&p.side, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&p.a));
  CHECK(cudaEventCreate(&p.b));
  CHECK(cudaEventCreateWithFlags(&p.copied, cudaEventDisableTiming));
  p.trimmed = make_pool(false);
  p.kept = make_pool(true);
  for (size_t bytes : {(size_t)256 << 10, (size_t)1 << 20, (size_t)8 << 20}) {
    p.bytes = bytes;
    p.n = bytes / sizeof(float);
    CHECK(cudaMalloc(&p.in, bytes));
    CHECK(cudaMalloc(&p.out, bytes));
    CHECK(cudaMalloc(&p.copy, 2 * bytes));
    CHECK(cudaMemset(p.in, 0, bytes));
    CHECK(cudaMemset(p.out, 0, bytes));
    CHECK(cudaMemset(p.copy, 0, 2 * bytes));
    for (int w = 0; w < 3; w++) run(p, BASE, w);
    for (int round = 0; round < 2; round++) {
      std::vector<float> ev[CONDITIONS], sp[CONDITIONS];
      for (int r = 0; r < repeats; r++)
        for (int c = 0; c < CONDITIONS; c++) {
          Sample s = run(p, (Condition)c, r);
          ev[c].push_back(s.event_us);
          sp[c].push_back(s.span_us);
        }
      for (int c = 0; c < CONDITIONS; c++)
        std::printf("{\"round\": %d, \"bytes\": %zu, \"condition\": \"%s\", \"event_us\": %.3f, \"span_us\": %.3f, "
                    "\"span_min_us\": %.3f}\n",
                    round, bytes, NAMES[c], median(ev[c]), median(sp[c]), *std::min_element(sp[c].begin(), sp[c].end()));
      std::fflush(stdout);
    }
    CHECK(cudaFree(p.in));
    CHECK(cudaFree(p.out));
    CHECK(cudaFree(p.copy));
  }
  return 0;
}
