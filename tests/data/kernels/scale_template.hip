#include <hip/hip_runtime.h>

// A templated kernel, explicitly instantiated: the names are C++-mangled
// (_Z5scaleIfEvPT_S0_i and _Z5scaleIiEvPT_S0_i).
template <typename T>
__global__ void scale(T* data, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * factor;
}

template __global__ void scale<float>(float*, float, int);
template __global__ void scale<int>(int*, int, int);
