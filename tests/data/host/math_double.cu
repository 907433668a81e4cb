// Double-precision libdevice: sin, cos, exp, log, pow, tanh, erf, rsqrt, fma, cbrt, atan2.
extern "C" __global__ void math_double(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    double v = x[i];
    y[i] = sin(v) * cos(v) + exp(-v) + log1p(v * v) + pow(v * v + 1.0, 0.3) + tanh(v) + erf(v)
         + rsqrt(v * v + 2.0) + fma(v, v, 1.0) + cbrt(v) + atan2(v, 2.0) + expf((float)v) + tanhf((float)v);
  }
}
