// Atomics beyond atomicAdd: max through a CAS loop on floats, integer min/max/exch/inc, double add.
__device__ float atomic_max_float(float* addr, float value) {
  int* p = (int*)addr;
  int old = *p, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(p, assumed, __float_as_int(value));
  } while (assumed != old);
  return __int_as_float(old);
}

extern "C" __global__ void atomics(const float* x, int n, float* fmax, int* imin, int* imax, unsigned* ring,
                                   double* dsum) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomic_max_float(fmax, x[i]);
  atomicMin(imin, (int)(x[i] * 1000.0f));
  atomicMax(imax, (int)(x[i] * 1000.0f));
  atomicInc(ring, 99u);
  atomicAdd(dsum, (double)x[i]);
}
