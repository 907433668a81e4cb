#include <hip/hip_runtime.h>

// HIP kernels for the host backend's AMDGPU path: wave64 cross-lane operations, LDS, barriers,
// atomics, device globals and ROCm device-library math. Launch with blocks of a multiple of 64.

// __shfl* lower to ds_bpermute over the 64 lanes of a wave.
extern "C" __global__ void wave_shuffles(const int* in, int* xor_out, int* up_out, int* idx_out, int* down_out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  xor_out[i] = __shfl_xor(v, 33);                   // across the two halves of the wave
  up_out[i] = __shfl_up(v, 5);                      // lanes below 5 keep their own value
  idx_out[i] = __shfl(v, 63 - (int)(threadIdx.x % 64));
  down_out[i] = __shfl_down(v, 3, 16);              // within 16-lane segments
}

// __ballot is a 64-bit mask; __any and __all vote over the wave.
extern "C" __global__ void wave_votes(const int* in, unsigned long long* ballots, int* anys, int* alls, int* counts) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int p = in[i] > 0;
  unsigned long long b = __ballot(p);
  if (threadIdx.x % 64 == 0) ballots[i / 64] = b;
  anys[i] = __any(p);
  alls[i] = __all(p);
  counts[i] = __popcll(b);
}

// ds_swizzle: a quad permutation (reverse each quad) and the bit-mask mode (swap neighbours).
extern "C" __global__ void wave_swizzle(const int* in, int* quad_out, int* swap_out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  quad_out[i] = __builtin_amdgcn_ds_swizzle(v, 0x801B);
  swap_out[i] = __builtin_amdgcn_ds_swizzle(v, 0x1F | (1 << 10));
}

__device__ unsigned int launches = 0;
__device__ float scale = 2.0f;

// Dynamic LDS, barriers and atomics: each block scales its values by the global `scale`, stores
// them reversed within the block, and adds its sum, maximum and element count to global totals.
extern "C" __global__ void block_atomics(const float* in, float* reversed, float* sum, int* max_bits,
                                         unsigned* count, int* dims, int n) {
  extern __shared__ float tile[];
  unsigned t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  tile[t] = i < n ? in[i] * scale : 0.0f;
  __syncthreads();
  int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
  if (j < n) reversed[j] = tile[t];
  if (i < n) {
    atomicAdd(sum, tile[t]);
    atomicMax(max_bits, __float_as_int(fabsf(tile[t])));
    atomicAdd(count, 1u);
  }
  if (i == 0) {
    atomicAdd(&launches, 1u);
    dims[0] = gridDim.x;
    dims[1] = blockDim.x;
    dims[2] = gridDim.y * 100 + blockDim.y * 10 + blockDim.z;
  }
}

// ROCm device-library (ocml) math in single and double precision.
extern "C" __global__ void ocml_math(const float* x, float* y, const double* xd, double* yd, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = cosf(v) + tanhf(v) + exp2f(v) + log2f(1.0f + v * v) + cbrtf(v) + erff(v) + fmodf(v, 0.75f);
    double d = xd[i];
    yd[i] = exp(d) + log1p(d * d) + sqrt(fabs(d)) + pow(fabs(d), 0.5) + tanh(d) + atan2(d, 1.5);
  }
}

// Double-precision trigonometry: ocml reduces large arguments with v_trig_preop_f64.
extern "C" __global__ void ocml_trig_double(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sin(x[i]) + cos(x[i]) * 0.5 + tan(x[i] * 0.25);
}
