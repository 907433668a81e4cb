// Shared by the recorder's test programs: stop with a message when a CUDA call fails.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                               \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                               \
    }                                                                             \
  } while (0)
