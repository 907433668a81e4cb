// Reads a __device__ global (a bias) and counts launches in another.
__device__ float bias = 1.0f;
__device__ int launch_count = 0;

extern "C" __global__ void add_bias(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += bias;
  if (i == 0) launch_count += 1;
}
