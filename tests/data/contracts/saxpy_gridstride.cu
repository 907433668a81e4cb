// y = a*x + y over a grid-stride loop: any block and any grid cover every element.
extern "C" __global__ void saxpy_gridstride(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}
