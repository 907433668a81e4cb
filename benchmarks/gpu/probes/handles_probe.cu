// Probe (issue 38 fidelity): does a kernel's time depend on how its memory is backed, one physical allocation for
// the whole range or one per 2 MiB granule?
//
// The recorder places each application allocation in its zone with a physical allocation of its own (cuMemCreate
// rounded up to the granularity, mapped at the zone's cursor), so a framework that allocates in 2 MiB blocks leaves
// a kernel's tensors on many small physical allocations side by side. The replay maps each recorded range (the
// allocations that touch, merged) with one cuMemCreate. Eleven instances of the application corpus run 6-14% faster
// in the replay than in the application, the application's second launch included
// (docs/design/investigations/replay-timing-2026-12-06.md, twelfth section). Here the same kernels run on the same
// virtual range backed three ways:
//   one        one physical allocation for the range (the replay's mapping);
//   granules   one physical allocation per granule, mapped side by side (the recorder's zone, 2 MiB allocations);
//   malloc     cudaMalloc per buffer (outside any reservation: the driver's own choice);
// and two kernels: `twice` (out = 2 * in, a stream) and `rows` (each block normalizes a row of 1024 floats, reading
// it twice, as llama.cpp's norm_f32). Each launch follows the replay's flush (a memset over twice the L2) and a
// synchronize. The time is the kernel's own span by the global timer (what CUPTI's kernel records hold), median of
// the runs, the backings interleaved run by run, two rounds. All of it twice: alone in the process, as the replay
// is, then beside a crowd of 2 MiB allocations, each written once, as in a framework's process (many more
// translations for the GPU to keep). Prints one JSON object per (crowd, round, kernel, bytes, backing).
// A probe: its findings go to docs/design/investigations/, not to a results file.
//
//   nvcc -arch=sm_90 -O2 -o .gpu/probe/handles_probe benchmarks/gpu/probes/handles_probe.cu
//   .gpu/probe/handles_probe [repeats] [crowd: allocations of 2 MiB, default 2048]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

// The driver's functions through the runtime (no libcuda to link against where the probe is built).
template <typename F>
static F driver_fn(const char *name) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (!fn || found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "no driver function %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(fn);
}
#define DRV(name) static auto p_##name = driver_fn<decltype(&::name)>(#name)

#define DRIVER(x)                                                                                  \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      std::fprintf(stderr, "%s:%d: CUDA driver error %d\n", __FILE__, __LINE__, (int)r_);            \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void twice(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  unsigned long long t0 = threadIdx.x == 0 ? global_ns() : 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    out[i] = 2.0f * in[i];
  span_close(span, t0);
}

// One block a row of 1024 floats: the mean, then the variance (the row read twice), then the row normalized.
__global__ void rows(const float *in, float *out, unsigned long long n, unsigned long long *span) {
  __shared__ float part[32];
  unsigned long long t0 = threadIdx.x == 0 ? global_ns() : 0;
  const float *row = in + blockIdx.x * 1024ull;
  float *dst = out + blockIdx.x * 1024ull;
  float stats[2];
  for (int pass = 0; pass < 2; pass++) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) {
      float v = row[i];
      acc += pass == 0 ? v : (v - stats[0]) * (v - stats[0]);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    stats[pass] = acc / 1024.0f;
    __syncthreads();
  }
  float scale = rsqrtf(stats[1] + 1e-5f);
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) dst[i] = (row[i] - stats[0]) * scale;
  span_close(span, t0);
}

enum Backing { ONE, GRANULES, MALLOC, BACKINGS };
static const char *const NAMES[BACKINGS] = {"one", "granules", "malloc"};

struct Buffers {
  float *in, *out;
};

// Device memory on GPU 0, as the recorder's zone and the replay allocate it.
static CUmemAllocationProp device_memory() {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

// The bytes that back two buffers of `bytes`: whole granules.
static size_t mapped_bytes(size_t bytes, size_t granule) { return (2 * bytes + granule - 1) / granule * granule; }

// [base, base + 2 * bytes) backed by one physical allocation, or one per granule.
static Buffers map_range(CUdeviceptr base, size_t bytes, size_t granule, bool per_granule,
                         std::vector<CUmemGenericAllocationHandle> &handles) {
  const CUmemAllocationProp prop = device_memory();
  DRV(cuMemCreate);
  DRV(cuMemMap);
  DRV(cuMemSetAccess);
  size_t total = mapped_bytes(bytes, granule), step = per_granule ? granule : total;
  for (size_t off = 0; off < total; off += step) {
    CUmemGenericAllocationHandle h;
    DRIVER(p_cuMemCreate(&h, step, &prop, 0));
    DRIVER(p_cuMemMap(base + off, step, 0, h, 0));
    handles.push_back(h);
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRIVER(p_cuMemSetAccess(base, total, &access, 1));
  return {reinterpret_cast<float *>(base), reinterpret_cast<float *>(base + bytes)};
}

struct Probe {
  int repeats, sms;
  void *flush, *span;
  size_t flush_bytes, granule, crowd_mib;
  cudaEvent_t a, b;
};

// Every size, kernel and backing, two rounds: one JSON line each.
static void measure(const Probe &ctx) {
  DRV(cuMemUnmap);
  DRV(cuMemRelease);
  DRV(cuMemAddressFree);
  DRV(cuMemAddressReserve);
  for (size_t bytes : {(size_t)1 << 20, (size_t)8 << 20, (size_t)32 << 20}) {
    size_t reserve = 2 * bytes + 2 * ctx.granule;
    Buffers buf[BACKINGS];
    std::vector<CUmemGenericAllocationHandle> handles;
    CUdeviceptr bases[2];
    for (int k = 0; k < 2; k++) {
      DRIVER(p_cuMemAddressReserve(&bases[k], reserve, ctx.granule, 0, 0));
      buf[k] = map_range(bases[k], bytes, ctx.granule, k == GRANULES, handles);
    }
    CHECK(cudaMalloc(&buf[MALLOC].in, bytes));
    CHECK(cudaMalloc(&buf[MALLOC].out, bytes));
    for (auto &x : buf) CHECK(cudaMemset(x.in, 0, bytes));
    unsigned long long n = bytes / sizeof(float);
    for (int round = 0; round < 2; round++) {
      for (int kernel = 0; kernel < 2; kernel++) {
        std::vector<float> sp[BACKINGS], ev[BACKINGS];
        for (int r = 0; r < ctx.repeats + 2; r++)
          for (int c = 0; c < BACKINGS; c++) {
            CHECK(cudaMemsetAsync(ctx.flush, r & 0xff, ctx.flush_bytes));
            unsigned long long init[2] = {~0ull, 0ull};
            CHECK(cudaMemcpyAsync(ctx.span, init, sizeof init, cudaMemcpyHostToDevice));
            CHECK(cudaDeviceSynchronize());
            void *span = ctx.span;
            void *args[] = {&buf[c].in, &buf[c].out, &n, &span};
            dim3 grid = kernel == 0 ? dim3((unsigned)std::min<unsigned long long>((n + 255) / 256, ctx.sms * 8ull))
                                    : dim3((unsigned)(n / 1024));
            CHECK(cudaEventRecord(ctx.a));
            CHECK(cudaLaunchKernel(kernel == 0 ? (const void *)twice : (const void *)rows, grid, dim3(256), args, 0,
                                   nullptr));
            CHECK(cudaEventRecord(ctx.b));
            CHECK(cudaEventSynchronize(ctx.b));
            unsigned long long got[2];
            CHECK(cudaMemcpy(got, ctx.span, sizeof got, cudaMemcpyDeviceToHost));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, ctx.a, ctx.b));
            if (r < 2) continue;  // the first launches of each backing: its translations not yet cached
            sp[c].push_back((float)(got[1] - got[0]) / 1000.0f);
            ev[c].push_back(ms * 1000.0f);
          }
        for (int c = 0; c < BACKINGS; c++)
          std::printf("{\"crowd_mib\": %zu, \"round\": %d, \"kernel\": \"%s\", \"bytes\": %zu, \"backing\": \"%s\", "
                      "\"span_us\": %.3f, \"span_min_us\": %.3f, \"event_us\": %.3f}\n",
                      ctx.crowd_mib, round, kernel == 0 ? "twice" : "rows", bytes, NAMES[c], median(sp[c]),
                      *std::min_element(sp[c].begin(), sp[c].end()), median(ev[c]));
        std::fflush(stdout);
      }
    }
    CHECK(cudaFree(buf[MALLOC].in));
    CHECK(cudaFree(buf[MALLOC].out));
    for (int k = 0; k < 2; k++) DRIVER(p_cuMemUnmap(bases[k], mapped_bytes(bytes, ctx.granule)));
    for (auto h : handles) DRIVER(p_cuMemRelease(h));
    for (int k = 0; k < 2; k++) DRIVER(p_cuMemAddressFree(bases[k], reserve));
  }
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 30;
  CHECK(cudaFree(nullptr));
  int l2 = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  void *flush, *span;
  size_t flush_bytes = 2 * (size_t)l2;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&span, 16));
  const CUmemAllocationProp prop = device_memory();
  DRV(cuMemGetAllocationGranularity);
  size_t granule = 0;
  DRIVER(p_cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  Probe ctx = {repeats, sms, flush, span, flush_bytes, granule, 0, a, b};
  measure(ctx);
  int crowd_count = argc > 2 ? std::atoi(argv[2]) : 2048;
  std::vector<void *> crowd(crowd_count);
  for (int i = 0; i < crowd_count; i++) {
    CHECK(cudaMalloc(&crowd[i], 2 << 20));
    CHECK(cudaMemset(crowd[i], i & 0xff, 2 << 20));
  }
  ctx.crowd_mib = 2 * (size_t)crowd_count;
  measure(ctx);
  for (void *p : crowd) CHECK(cudaFree(p));
  return 0;
}
