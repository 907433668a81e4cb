/* A test double of the CUDA driver (built as libcuda.so.1 by the tests), for the recorder without a
   GPU: the launch entry points a program reaches through cuGetProcAddress (as cudart does) and by
   name (a program linked against libcuda), and the memory, stream and event calls a recorded launch
   makes. Each launch is counted and succeeds; a kernel handle is a `struct double_kernel`, whose
   name cuFuncGetName returns and whose host implementation, if any, a launch runs. CUDA graphs and
   stream capture: graph_double.c. It is evidence for
   the recorder's logic, NOT for a GPU: "device" memory is host memory, really at the addresses asked
   for (mmap), copies are memcpy, and streams and events complete at once, in order. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_double.h"

static long launches, resets;

__attribute__((visibility("default"))) long double_launches(void) { return launches; }
__attribute__((visibility("default"))) long double_resets(void) { return resets; }

#define API __attribute__((visibility("default")))
#define CAPTURING_STREAM ((CUstream)0x1234)

API CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }

API CUresult cuFuncGetName(const char **name, CUfunction f) {
    *name = ((const struct double_kernel *)f)->name;
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size) {
    if ((int)index >= ((const struct double_kernel *)f)->params) return CUDA_ERROR_INVALID_VALUE;
    *offset = 8 * index;
    *size = 8;
    return CUDA_SUCCESS;
}

int double_capturing(CUstream s); /* graph_double.c: stream capture */
CUresult double_capture_kernel(CUstream s, CUfunction f, const unsigned grid[3], const unsigned block[3],
                               unsigned shared, void **params);
CUresult double_capture_copy(CUstream s, const CUDA_MEMCPY3D *p);
CUresult double_copy(const CUDA_MEMCPY3D *p);
CUresult double_memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned size, size_t width, size_t height);

/* CAPTURING_STREAM reports a capture and runs its launches (launch_paths.c only counts them); a
   stream between cuStreamBeginCapture and cuStreamEndCapture adds them to its graph. */
API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
    *status = s == CAPTURING_STREAM || double_capturing(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                           : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

/* CUDA_DOUBLE_POOL_LOG=path: the memory pool's threshold and trims, the device-to-device copies and the
   launches, one line each, in order; each copy then takes 20 ms, so that a recorder's writer thread has
   time to act in the middle of a recording (test_cuda_recorder_launch_paths.py). */
static void pool_log(const char *line) {
    const char *path = getenv("CUDA_DOUBLE_POOL_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", line);
    fclose(f);
}

CUresult double_run_kernel(CUfunction f, void **params) {
    const struct double_kernel *k = (const struct double_kernel *)f;
    if (k->host) k->host(params);
    ++launches;
    pool_log("launch");
    return CUDA_SUCCESS;
}

static CUresult launched(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, CUstream s, void **params) {
    if (double_capturing(s)) {
        const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
        return double_capture_kernel(s, f, grid, block, shared, params);
    }
    return double_run_kernel(f, params);
}

#define LAUNCH_ARGS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                    unsigned shared, CUstream s, void **params
#define LAUNCHED launched(f, gx, gy, gz, bx, by, bz, shared, s, params)
#define LAUNCHED_EX(c) launched(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, \
                                c->sharedMemBytes, c->hStream, p)
API CUresult cuLaunchKernel(LAUNCH_ARGS, void **extra) { return LAUNCHED; }
API CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **extra) { return LAUNCHED; }
API CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS) { return LAUNCHED; }
API CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS) { return LAUNCHED; }
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return LAUNCHED_EX(c); }
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return LAUNCHED_EX(c); }

/* ---- contexts, memory, streams, events ---- */
#define OK return CUDA_SUCCESS
API CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)0x100; OK; }
API CUresult cuCtxSetCurrent(CUcontext c) { OK; }
API CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; OK; }
API CUresult cuCtxSynchronize(void) { OK; }
API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    *v = a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE ? 1 << 20 : 1;
    OK;
}
API CUresult cuGetErrorName(CUresult r, const char **name) {
    *name = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_OF_THE_DOUBLE";
    OK;
}
API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = *total = 8ull << 30; OK; }
API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags o) {
    *g = 2u << 20;
    OK;
}
API CUresult cuMemAddressReserve(CUdeviceptr *got, size_t size, size_t align, CUdeviceptr at, unsigned long long f) {
    void *p = mmap((void *)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED_NOREPLACE : 0),
                   -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *got = (CUdeviceptr)p;
    OK;
}
API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { munmap((void *)p, size); OK; }
API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p, unsigned long long f) {
    *h = 1;
    OK;
}
API CUresult cuMemRelease(CUmemGenericAllocationHandle h) { OK; }
API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long f) {
    return mprotect((void *)p, size, PROT_READ | PROT_WRITE) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) { OK; }
API CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    madvise((void *)p, size, MADV_DONTNEED);
    mprotect((void *)p, size, PROT_NONE);
    OK;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = (CUdeviceptr)malloc(n ? n : 1); OK; }
API CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)p); OK; }
API CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n ? n : 1); OK; }
API CUresult cuMemFreeHost(void *p) { free(p); OK; }
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (void *)src, n); OK; }
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { memcpy(dst, (void *)src, n); OK; }
API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) {
    return double_capturing(s) ? double_capture_copy(s, p) : double_copy(p);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    if (getenv("CUDA_DOUBLE_POOL_LOG")) {
        pool_log("copy");
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src, p.dstDevice = dst, p.WidthInBytes = n, p.Height = p.Depth = 1;
    return cuMemcpy3DAsync_v2(&p, s);
}
API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) { memset((void *)dst, v, n); OK; }
API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
    return double_memset(dst, 0, v, 2, n, 1);
}
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) { return double_memset(dst, 0, v, 4, n, 1); }
API CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
    return double_memset(dst, pitch, v, 1, w, h);
}
API CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) {
    return double_memset(dst, pitch, v, 2, w, h);
}
API CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h, CUstream s) {
    return double_memset(dst, pitch, v, 4, w, h);
}
API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) { *pool = (CUmemoryPool)0x200; OK; }
API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    pool_log("trim");
    OK;
}
API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    char line[64];
    snprintf(line, sizeof line, "attribute %d %llu", (int)attr, (unsigned long long)*(cuuint64_t *)value);
    pool_log(line);
    OK;
}
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    *p = (CUdeviceptr)malloc(n ? n : 1);
    OK;
}
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { free((void *)p); OK; }
API CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    static unsigned long next = 0x300; /* a handle per stream: captures are per stream */
    *s = (CUstream)next;
    next += 0x10;
    OK;
}
API CUresult cuStreamSynchronize(CUstream s) { OK; }
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { OK; }
/* An event is the time it was recorded: work completes at once. */
API CUresult cuEventCreate(CUevent *e, unsigned flags) {
    *e = (CUevent)calloc(1, sizeof(struct timespec));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuEventRecord(CUevent e, CUstream s) { clock_gettime(CLOCK_MONOTONIC, (struct timespec *)e); OK; }
API CUresult cuEventQuery(CUevent e) { OK; }
API CUresult cuEventSynchronize(CUevent e) { OK; }
API CUresult cuEventDestroy_v2(CUevent e) { free(e); OK; }
API CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
    const struct timespec *a = (const struct timespec *)start, *b = (const struct timespec *)end;
    *ms = (float)((b->tv_sec - a->tv_sec) * 1e3 + (b->tv_nsec - a->tv_nsec) * 1e-6);
    OK;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active) {
    *flags = 0;
    *active = resets == 0;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { *ctx = (CUcontext)0x100; return CUDA_SUCCESS; }
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return CUDA_SUCCESS; }
API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { ++resets; return CUDA_SUCCESS; }

struct entry {
    const char *name;
    void *legacy, *per_thread;
};

static const struct entry table[] = {
    {"cuLaunchKernel", (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel, (void *)cuLaunchCooperativeKernel_ptsz},
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2, (void *)cuDevicePrimaryCtxReset_v2},
    /* as cudart asks for them at version 12000 and later (graph_double.c) */
    {"cuGraphInstantiate", (void *)cuGraphInstantiateWithFlags, (void *)cuGraphInstantiateWithFlags},
    {"cuGraphLaunch", (void *)cuGraphLaunch, (void *)cuGraphLaunch},
    {"cuGraphExecUpdate", (void *)cuGraphExecUpdate_v2, (void *)cuGraphExecUpdate_v2},
    {"cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams_v2,
     (void *)cuGraphExecKernelNodeSetParams_v2},
    {"cuGraphExecDestroy", (void *)cuGraphExecDestroy, (void *)cuGraphExecDestroy},
};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status) {
    (void)version;
    for (unsigned i = 0; i < sizeof table / sizeof table[0]; ++i)
        if (strcmp(symbol, table[i].name) == 0) {
            *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? table[i].per_thread : table[i].legacy;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = 0;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
