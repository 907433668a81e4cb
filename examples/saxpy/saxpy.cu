// y = a * x + y over n elements, with a grid-stride loop: any grid and block size computes
// the same result, so Mneme can tune the launch geometry and still verify every variant.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}
