// What the CUDA probes here share: a check that ends the probe on a CUDA error, the global timer's reading, a
// kernel's span folded block by block, and one timed launch's sample with the median of many.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));             \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// The GPU's global timer, in nanoseconds.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Each block's thread 0 folds its start `t0` and its end into span[0] (min) and span[1] (max): the kernel's own span,
// the earliest block start to the latest block end, which is what CUPTI's kernel records hold.
__device__ __forceinline__ void span_close(unsigned long long *span, unsigned long long t0) {
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMin(&span[0], t0);
    atomicMax(&span[1], global_ns());
  }
}

// One timed launch: CUDA events around it, and its span by the global timer.
struct Sample {
  float event_us, span_us;
};

static inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
