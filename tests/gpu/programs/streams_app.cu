// Two host threads, each launching on its own stream into its own buffers. Both upload first
// and meet before launching: a copy by one thread while the recorder snapshots the other's
// launch would land in that launch's epilogue (docs/design/recording.md, "Threads"). 17 launches
// each: the recorder times the recorded one and the 16 after it (replay fidelity).
#include <atomic>
#include <thread>
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

static std::atomic<int> uploaded{0};

static int worker(int id, int n, int launches) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i + id) % 50);
    y[i] = static_cast<float>(id);
  }
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK(cudaStreamSynchronize(stream));
  uploaded.fetch_add(1);
  while (uploaded.load() < 2) std::this_thread::yield();
  for (int k = 0; k < launches; ++k) {
    float a = static_cast<float>(id + 1);
    saxpy<<<(n + 255) / 256, 256, 0, stream>>>(n, a, dx, dy);
    CHECK(cudaGetLastError());
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
  }
  std::vector<float> got(n);
  CHECK(cudaMemcpyAsync(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < n; ++i)
    if (got[i] != y[i]) return 1;
  CHECK(cudaStreamDestroy(stream));
  return 0;
}

int main() {
  CHECK(cudaFree(nullptr));  // create the context before the threads race to
  int results[2] = {-1, -1};
  std::thread a([&] { results[0] = worker(0, 1 << 16, 17); });
  std::thread b([&] { results[1] = worker(1, 1 << 17, 17); });
  a.join();
  b.join();
  if (results[0] != 0 || results[1] != 0) {
    std::fprintf(stderr, "thread results %d %d\n", results[0], results[1]);
    return 1;
  }
  std::printf("streams_app OK\n");
  return 0;
}
