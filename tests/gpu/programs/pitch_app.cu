// 2D arrays from cudaMallocPitch and a 2D kernel over them: the recorder places pitched
// allocations and hands back the pitch the driver itself would choose. The same launch runs 20
// times (the recorder times it inside the application). Prints `pitch_app OK <in> <out> <pitch>`.
#include <vector>

#include "check.h"

__global__ void scale_add_2d(const float* in, size_t in_pitch, float* out, size_t out_pitch, int width,
                             int height) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const float* row_in = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in) + y * in_pitch);
  float* row_out = reinterpret_cast<float*>(reinterpret_cast<char*>(out) + y * out_pitch);
  row_out[x] = 2.0f * row_in[x] + row_out[x];
}

int main() {
  const int width = 1000, height = 700, launches = 20;
  std::vector<float> in(width * height), out(width * height, 1.0f);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) in[y * width + x] = static_cast<float>((x + y) % 10);
  float *din = nullptr, *dout = nullptr;
  size_t in_pitch = 0, out_pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&din), &in_pitch, width * sizeof(float), height));
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&dout), &out_pitch, width * sizeof(float), height));
  if (in_pitch < width * sizeof(float) || out_pitch != in_pitch) {
    std::fprintf(stderr, "bad pitches %zu %zu\n", in_pitch, out_pitch);
    return 1;
  }
  CHECK(cudaMemcpy2D(din, in_pitch, in.data(), width * sizeof(float), width * sizeof(float), height,
                     cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(dout, out_pitch, out.data(), width * sizeof(float), width * sizeof(float), height,
                     cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((width + 31) / 32, (height + 7) / 8);
  for (int k = 0; k < launches; ++k) {
    scale_add_2d<<<grid, block>>>(din, in_pitch, dout, out_pitch, width, height);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaMemcpy2D(out.data(), width * sizeof(float), dout, out_pitch, width * sizeof(float), height,
                     cudaMemcpyDeviceToHost));
  for (int i = 0; i < width * height; ++i) {
    if (out[i] != 1.0f + 2.0f * launches * in[i]) {
      std::fprintf(stderr, "mismatch at %d: %f\n", i, out[i]);
      return 1;
    }
  }
  std::printf("pitch_app OK %p %p %zu\n", (void*)din, (void*)dout, in_pitch);
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return 0;
}
