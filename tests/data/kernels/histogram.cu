// Counts values into `bins` buckets with atomicAdd; values are clamped into range.
extern "C" __global__ void histogram(const int* values, unsigned* counts, int n, int bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int v = values[i];
    v = v < 0 ? 0 : (v >= bins ? bins - 1 : v);
    atomicAdd(&counts[v], 1u);
  }
}
