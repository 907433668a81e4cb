// Two host threads, each launching on its own stream into its own buffers. Both upload first
// and meet before launching: a copy by one thread while the recorder snapshots the other's
// launch would land in that launch's epilogue (docs/design/recording.md, "Threads"). 17 launches
// each: the recorder times the recorded one and the 16 after it (replay fidelity).
// An optional mode (benchmarks/gpu/probes/streams_probe.py): "both" (the default), "seq" (the
// second thread starts once the first is done), "only0", "only1" (one thread), "lockstep" (both
// threads meet before each launch, so their kernels run at the same time).
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "../../data/kernels/saxpy.cu"
#include "check.h"

static std::atomic<int> uploaded{0};
static std::atomic<int> arrived{0};
static int together = 2;        // the threads that meet after uploading
static bool lockstep = false;  // and before each launch

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
  while (uploaded.load() < together) std::this_thread::yield();
  for (int k = 0; k < launches; ++k) {
    if (lockstep) {
      arrived.fetch_add(1);
      while (arrived.load() < together * (k + 1)) std::this_thread::yield();
    }
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

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "both";
  CHECK(cudaFree(nullptr));  // create the context before the threads race to
  int results[2] = {-1, -1};
  auto run = [&](int id) { results[id] = worker(id, 1 << (16 + id), 17); };
  if (std::strcmp(mode, "both") == 0 || std::strcmp(mode, "lockstep") == 0) {
    lockstep = std::strcmp(mode, "lockstep") == 0;
    std::thread a(run, 0), b(run, 1);
    a.join();
    b.join();
  } else if (std::strcmp(mode, "seq") == 0 || std::strncmp(mode, "only", 4) == 0) {
    together = 1;
    for (int id = 0; id < 2; ++id) {
      if (std::strcmp(mode, "seq") != 0 && mode[4] - '0' != id) {
        results[id] = 0;
        continue;
      }
      uploaded.store(0);
      std::thread t(run, id);
      t.join();
    }
  } else {
    std::fprintf(stderr, "streams_app: unknown mode %s (both, seq, only0, only1, lockstep)\n", mode);
    return 2;
  }
  if (results[0] != 0 || results[1] != 0) {
    std::fprintf(stderr, "thread results %d %d\n", results[0], results[1]);
    return 1;
  }
  std::printf("streams_app OK\n");
  return 0;
}
