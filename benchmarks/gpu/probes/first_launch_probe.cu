// Probe (issue 38 fidelity): is a kernel's first launch from freshly loaded code slower than its later launches,
// and which cache or table holds what the later launches gain?
//
// The application corpus's replays that miss the recorded launch's time are mostly faster than it. Where the
// recorder timed the launch a second time in the application (MNEME_RECORD_RETIME), the second time agreed with
// the replay, not with the first; the recorded launch is often the first launch of its kernel in the process.
// This loads the same cubin (three kernels: a tiny one, a block reduction of a few KiB of code, one of tens of
// KiB) through the runtime's library API and times each kernel after the replay's flush (a memset over twice the L2) under:
//   warm        the same loaded module, launch after launch (the replay's sequence);
//   fresh       a new copy of the module loaded before each run: the run is its code's first launch;
//   fresh2      the second launch of such a copy (flushed again in between);
//   icache      the warm module, a kernel with a large body from another module run on every SM first;
//   tlb         the warm module, one word per 64 KiB of a 24 GiB buffer read first (the GPU's address
//               translation caches hold other pages);
//   icache+tlb  both.
// The time is taken twice: CUDA events around the launch, and the kernel's own span by the global timer (the
// earliest block start to the latest block end), which is what CUPTI's kernel records hold. Two rounds, the
// conditions interleaved run by run. Prints one JSON object per (round, kernel, condition). A probe: its
// findings go to docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -cubin -DPROBE_KERNELS -o .gpu/probe/first_launch.cubin benchmarks/gpu/probes/first_launch_probe.cu
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/first_launch_probe benchmarks/gpu/probes/first_launch_probe.cu
//   .gpu/probe/first_launch_probe .gpu/probe/first_launch.cubin [repeats]
#include <cuda_runtime.h>

#include "probe_common.cuh"

#ifdef PROBE_KERNELS

// Each block's thread 0 notes its start; span_close (probe_common.cuh) folds it into the kernel's span.
__device__ __forceinline__ void span_open(unsigned long long *span, unsigned long long *t0) {
  if (threadIdx.x == 0) *t0 = global_ns();
}

extern "C" __global__ void twice(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  unsigned long long t0 = 0;
  span_open(span, &t0);
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
  span_close(span, t0);
}

// A block reduction with a little arithmetic per element, unrolled: a few KiB of code, like a framework's reduce.
extern "C" __global__ void reduce_rows(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  __shared__ float part[32];
  unsigned long long t0 = 0;
  span_open(span, &t0);
  float acc = 0.0f;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * 4;
  for (unsigned long long i = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * 4; i + 3 < n; i += stride) {
    float4 v = *reinterpret_cast<const float4 *>(in + i);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      v.x = fmaf(v.x, 0.999f, 0.001f * k);
      v.y = fmaf(v.y, 0.998f, 0.002f * k);
      v.z = fmaf(v.z, 0.997f, 0.003f * k);
      v.w = fmaf(v.w, 0.996f, 0.004f * k);
    }
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0) out[blockIdx.x] = sqrtf(acc);
  }
  span_close(span, t0);
}

// Tens of KiB of straight-line code over each element: the instruction caches matter here if anywhere.
extern "C" __global__ void long_body(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  unsigned long long t0 = 0;
  span_open(span, &t0);
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    float v = in[i];
#pragma unroll
    for (int k = 0; k < 1024; k++) v = fmaf(v, 1.0001f, (float)(k * 7 % 1013) * 1e-6f);
    out[i] = v;
  }
  span_close(span, t0);
}

// Another module's large body, run on every SM to fill the instruction caches with other code.
extern "C" __global__ void evict_code(float *p) {
  float v = p[threadIdx.x];
#pragma unroll
  for (int k = 0; k < 8192; k++) v = v * 1.0001f + (float)(k * 13 % 2039);
  p[threadIdx.x] = v;
}

// One word per 64 KiB of a large buffer: every translation the GPU caches is replaced.
extern "C" __global__ void touch_pages(const float *p, unsigned long long pages, float *sink) {
  float acc = 0.0f;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < pages;
       i += (unsigned long long)gridDim.x * blockDim.x)
    acc += p[i * (65536 / sizeof(float))];
  if (acc == 12345.0f) *sink = acc;
}

#else

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

enum Condition { WARM, FRESH, FRESH2, ICACHE, TLB, BOTH, CONDITIONS };
static const char *const NAMES[CONDITIONS] = {"warm", "fresh", "fresh2", "icache", "tlb", "icache+tlb"};
static const char *const KERNELS[] = {"twice", "reduce_rows", "long_body"};

struct Probe {
  std::string image;
  cudaLibrary_t warm_library, other_library;
  cudaKernel_t evict, touch;
  void *flush, *in, *out, *span, *big, *sink, *scratch;
  unsigned long long n, big_pages;
  size_t flush_bytes;
  int sms;
  cudaEvent_t a, b;
};

static Sample launch_timed(Probe &p, cudaKernel_t f, int r) {
  CHECK(cudaMemsetAsync(p.flush, r & 0xff, p.flush_bytes));
  unsigned long long init[2] = {~0ull, 0ull};
  CHECK(cudaMemcpyAsync(p.span, init, sizeof init, cudaMemcpyHostToDevice));
  void *args[] = {&p.in, &p.out, &p.n, &p.span};
  CHECK(cudaEventRecord(p.a));
  dim3 grid((unsigned)std::min<unsigned long long>((p.n + 255) / 256, (unsigned long long)p.sms * 8));
  CHECK(cudaLaunchKernel((const void *)f, grid, dim3(256), args, 0, nullptr));
  CHECK(cudaEventRecord(p.b));
  CHECK(cudaEventSynchronize(p.b));
  unsigned long long got[2];
  CHECK(cudaMemcpy(got, p.span, sizeof got, cudaMemcpyDeviceToHost));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, p.a, p.b));
  return {ms * 1000.0f, (float)(got[1] - got[0]) / 1000.0f};
}

static void before(Probe &p, Condition c) {
  if (c == ICACHE || c == BOTH) {
    void *args[] = {&p.scratch};
    CHECK(cudaLaunchKernel((const void *)p.evict, dim3(p.sms * 2), dim3(256), args, 0, nullptr));
  }
  if (c == TLB || c == BOTH) {
    void *args[] = {&p.big, &p.big_pages, &p.sink};
    CHECK(cudaLaunchKernel((const void *)p.touch, dim3(p.sms * 4), dim3(256), args, 0, nullptr));
  }
}

static Sample run(Probe &p, const char *kernel, Condition c, int r) {
  cudaKernel_t f;
  if (c == FRESH || c == FRESH2) {
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, p.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    CHECK(cudaLibraryGetKernel(&f, lib, kernel));
    Sample s = launch_timed(p, f, r);
    if (c == FRESH2) s = launch_timed(p, f, r + 1);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaLibraryUnload(lib));
    return s;
  }
  CHECK(cudaLibraryGetKernel(&f, p.warm_library, kernel));
  before(p, c);
  return launch_timed(p, f, r);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CUBIN [repeats]\n", argv[0]);
    return 2;
  }
  int repeats = argc > 2 ? std::atoi(argv[2]) : 30;
  Probe p{};
  {
    std::ifstream f(argv[1], std::ios::binary);
    p.image.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (p.image.empty()) {
      std::fprintf(stderr, "%s: empty or unreadable\n", argv[1]);
      return 2;
    }
  }
  CHECK(cudaFree(nullptr));  // the primary context, as the runtime makes it
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
  p.flush_bytes = 2 * (size_t)l2;
  p.n = (1u << 20) / sizeof(float);  // 1 MiB in, 1 MiB out
  p.big_pages = (24ull << 30) / 65536;
  CHECK(cudaMalloc(&p.flush, p.flush_bytes));
  CHECK(cudaMalloc(&p.in, p.n * sizeof(float)));
  CHECK(cudaMalloc(&p.out, p.n * sizeof(float)));
  CHECK(cudaMalloc(&p.span, 16));
  CHECK(cudaMalloc(&p.sink, 16));
  CHECK(cudaMalloc(&p.scratch, 1 << 20));
  CHECK(cudaMalloc(&p.big, p.big_pages * 65536));
  CHECK(cudaMemset(p.big, 0, p.big_pages * 65536));
  CHECK(cudaMemset(p.in, 0, p.n * sizeof(float)));
  CHECK(cudaMemset(p.scratch, 0, 1 << 20));
  CHECK(cudaLibraryLoadData(&p.warm_library, p.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CHECK(cudaLibraryLoadData(&p.other_library, p.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CHECK(cudaLibraryGetKernel(&p.evict, p.other_library, "evict_code"));
  CHECK(cudaLibraryGetKernel(&p.touch, p.other_library, "touch_pages"));
  CHECK(cudaEventCreate(&p.a));
  CHECK(cudaEventCreate(&p.b));
  for (const char *kernel : KERNELS)  // the warm module's code has run before anything is timed
    for (int w = 0; w < 3; w++) run(p, kernel, WARM, w);
  for (int round = 0; round < 2; round++) {
    for (const char *kernel : KERNELS) {
      std::vector<float> ev[CONDITIONS], sp[CONDITIONS];
      for (int r = 0; r < repeats; r++)
        for (int c = 0; c < CONDITIONS; c++) {
          Sample s = run(p, kernel, (Condition)c, r);
          ev[c].push_back(s.event_us);
          sp[c].push_back(s.span_us);
        }
      for (int c = 0; c < CONDITIONS; c++)
        std::printf("{\"round\": %d, \"kernel\": \"%s\", \"condition\": \"%s\", \"event_us\": %.3f, "
                    "\"span_us\": %.3f, \"span_min_us\": %.3f}\n",
                    round, kernel, NAMES[c], median(ev[c]), median(sp[c]), *std::min_element(sp[c].begin(), sp[c].end()));
      std::fflush(stdout);
    }
  }
  return 0;
}

#endif
