// One kernel per execution mode of the host backend, each with something the mode must handle.

// Per-thread calls: a device function that is never inlined reads the thread index itself.
__device__ __noinline__ int my_index() { return blockIdx.x * blockDim.x + threadIdx.x; }

extern "C" __global__ void iota3(int* out, int n) {
  int i = my_index();
  if (i < n) out[i] = 3 * i;
}

// Fibers: static and dynamic shared memory together, read by a never-inlined device function.
__device__ __noinline__ float right_neighbour(const float* tile) { return tile[(threadIdx.x + 1) % blockDim.x]; }

extern "C" __global__ void rotate(const float* in, float* out) {
  __shared__ float tile[128];
  extern __shared__ float doubled[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = in[i];
  doubled[threadIdx.x] = 2.0f * in[i];
  __syncthreads();
  out[i] = right_neighbour(tile) + doubled[(threadIdx.x + 2) % blockDim.x];
}

// One call per block: a 3D block, every index and dimension used.
extern "C" __global__ void coords(int* out) {
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[b * blockDim.x * blockDim.y * blockDim.z + t] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z + 1000 * b;
}

// One call per block, block after block: shared memory is a block's own, and atomics make the order
// of the threads visible, so neither runs a row of blocks per call (retarget.FLAG_BLOCK_RUNS).
extern "C" __global__ void coords_shared(int* out) {
  __shared__ int mine[256];
  int t = threadIdx.x + blockDim.x * threadIdx.y;
  mine[t] = 1000 * blockIdx.x + t;  // each thread its own slot: no barrier needed
  out[blockIdx.x * blockDim.x * blockDim.y + t] = mine[t];
}

extern "C" __global__ void coords_counted(int* out, int* total) {
  int t = threadIdx.x + blockDim.x * threadIdx.y;
  out[blockIdx.x * blockDim.x * blockDim.y + t] = 1000 * blockIdx.x + t;
  atomicAdd(total, 1);
}

// The atomic in inline PTX: its implementation is added beside the kernel, still block after block.
extern "C" __global__ void coords_counted_asm(int* out, int* total) {
  int t = threadIdx.x + blockDim.x * threadIdx.y;
  out[blockIdx.x * blockDim.x * blockDim.y + t] = 1000 * blockIdx.x + t;
  int old;
  asm volatile("atom.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(total), "r"(1) : "memory");
}
