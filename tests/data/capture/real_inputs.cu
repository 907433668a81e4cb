// Kernels whose inputs a capture description must express as real programs pass them (issue 28):
// reads just outside an array, pointers into another buffer, __constant__/__device__ globals,
// a struct passed by value.

// A three-point stencil that reads in[-1] and in[n], as benchmark kernels do on padded arrays.
extern "C" __global__ void stencil3(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}

// dst and src usually point into one pool allocation.
extern "C" __global__ void copy_scaled(const float* src, float* dst, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = a * src[i];
}

// A 1D convolution whose filter lives in constant memory, set by cudaMemcpyToSymbol in the program.
#define TAPS 5
__constant__ float conv_filter[TAPS];
__device__ float conv_bias;

extern "C" __global__ void conv1d(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = conv_bias;
  for (int t = 0; t < TAPS; ++t) {
    int j = i + t - TAPS / 2;
    if (j >= 0 && j < n) acc += conv_filter[t] * in[j];
  }
  out[i] = acc;
}

// Parameters passed as one struct by value, with a pointer inside it.
struct Axpby {
  int n;
  float alpha;
  const float* x;
  float beta;
  double offset;
};

extern "C" __global__ void axpby_struct(Axpby p, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) y[i] = p.alpha * p.x[i] + p.beta * y[i] + (float)p.offset;
}

// Writes out[i + 1]: one element past the end of `out`, which the program allocated with room for it.
extern "C" __global__ void shift_right(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i + 1] = in[i];
}
