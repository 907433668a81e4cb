// A 2D five-point stencil, 33 Jacobi steps with swapped buffers (2D grid and block): two argument
// sets of 17 and 16 launches, so the recorder times 16 and 15 repeats of each (replay fidelity).
#include <cmath>
#include <utility>
#include <vector>

#include "../../data/kernels/stencil2d.cu"
#include "check.h"

int main() {
  const int nx = 512, ny = 384, steps = 33;
  const size_t bytes = size_t(nx) * ny * sizeof(float);
  std::vector<float> a(nx * ny), b(nx * ny);
  for (int i = 0; i < nx * ny; ++i) a[i] = static_cast<float>((i * 37) % 101);
  float *da = nullptr, *db = nullptr;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((nx + 31) / 32, (ny + 7) / 8);
  for (int s = 0; s < steps; ++s) {
    stencil2d<<<grid, block>>>(da, db, nx, ny);
    CHECK(cudaGetLastError());
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        int i = y * nx + x;
        b[i] = (x == 0 || y == 0 || x == nx - 1 || y == ny - 1)
                   ? a[i] : 0.2f * (a[i] + a[i - 1] + a[i + 1] + a[i - nx] + a[i + nx]);
      }
    std::swap(da, db);
    std::swap(a, b);
  }
  std::vector<float> got(nx * ny);
  CHECK(cudaMemcpy(got.data(), da, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < nx * ny; ++i)
    if (std::fabs(got[i] - a[i]) > 1e-3f * (1.0f + std::fabs(a[i]))) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, got[i], a[i]);
      return 1;
    }
  std::printf("stencil_app OK\n");
  return 0;
}
