/* A test double of the HIP runtime's ABI (built as libamdhip64.so.N by the tests), for the HIP
 * recorder's tests on a machine without an AMD GPU. It is evidence for the recorder's logic
 * (placement, code-object registration, argument packing, prologue/epilogue capture, finalize),
 * NOT for AMD hardware: "device" memory is host memory, really at the addresses asked for
 * (mmap), copies are memcpy, streams and events complete in order at once, and a launch calls a
 * host implementation of the kernel that the test program registered with
 * mneme_hip_double_register(). Declarations: backends/hip/recorder/hip_abi.h (ROCm 6 layout). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hip_abi.h"

#define EXPORT __attribute__((visibility("default")))

typedef void (*host_kernel)(void **args, hip_dim3 grid, hip_dim3 block);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct { const void *stub; char name[256]; } functions[256];
static int n_functions;
typedef void (*packed_kernel)(const char *args, hip_dim3 grid, hip_dim3 block);
static struct { char name[256]; host_kernel fn; packed_kernel packed; } kernels[256];
static int n_kernels;
static const size_t GRANULARITY = 2u << 20;
static const size_t MEMORY = 8ull << 30;  /* what hipMemGetInfo reports */

EXPORT int mneme_hip_double_register(const char *kernel, host_kernel fn) {
    pthread_mutex_lock(&lock);
    snprintf(kernels[n_kernels].name, sizeof kernels[n_kernels].name, "%s", kernel);
    kernels[n_kernels++].fn = fn;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* The same kernel from a packed argument buffer (hipModuleLaunchKernel's `extra`). */
EXPORT int mneme_hip_double_register_packed(const char *kernel, packed_kernel fn) {
    pthread_mutex_lock(&lock);
    for (int k = 0; k < n_kernels; ++k)
        if (strcmp(kernels[k].name, kernel) == 0) kernels[k].packed = fn;
    pthread_mutex_unlock(&lock);
    return 0;
}

static int kernel_index(const char *name) {
    for (int k = 0; k < n_kernels; ++k)
        if (strcmp(kernels[k].name, name) == 0) return k;
    return -1;
}

static host_kernel kernel_of(const void *stub) {
    host_kernel fn = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_functions && !fn; ++i)
        if (functions[i].stub == stub)
            for (int k = 0; k < n_kernels && !fn; ++k)
                if (strcmp(kernels[k].name, functions[i].name) == 0) fn = kernels[k].fn;
    pthread_mutex_unlock(&lock);
    return fn;
}

/* ---- memory ---- */
static void *map_anywhere(size_t size) {
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Plain allocations keep their size in a header page so that a free can unmap them. The exported
 * entry points call these, never each other: the recorder interposes the exported ones. */
static hipError_t alloc_pages(void **ptr, size_t size) {
    char *p = map_anywhere(size + 4096);
    if (!p) return hipErrorOutOfMemory;
    *(size_t *)p = size + 4096;
    *ptr = p + 4096;
    return hipSuccess;
}
static hipError_t free_pages(void *ptr) {
    if (!ptr) return hipSuccess;
    char *p = (char *)ptr - 4096;
    munmap(p, *(size_t *)p);
    return hipSuccess;
}
EXPORT hipError_t hipMalloc(void **ptr, size_t size) { return alloc_pages(ptr, size); }
EXPORT hipError_t hipExtMallocWithFlags(void **ptr, size_t size, unsigned flags) { (void)flags; return alloc_pages(ptr, size); }
EXPORT hipError_t hipFree(void *ptr) { return free_pages(ptr); }
EXPORT hipError_t hipHostMalloc(void **ptr, size_t size, unsigned flags) { (void)flags; return alloc_pages(ptr, size); }
EXPORT hipError_t hipHostFree(void *ptr) { return free_pages(ptr); }
EXPORT hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total) {
    *free_bytes = *total = MEMORY;
    return hipSuccess;
}
EXPORT hipError_t hipMemGetAllocationGranularity(size_t *g, const hipMemAllocationProp *prop, int option) {
    (void)prop, (void)option;
    *g = GRANULARITY;
    return hipSuccess;
}
EXPORT hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr, unsigned long long flags) {
    (void)alignment, (void)flags;
    void *p = mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (addr ? MAP_FIXED_NOREPLACE : 0),
                   -1, 0);
    if (p == MAP_FAILED) return hipErrorOutOfMemory;
    *ptr = p;
    return hipSuccess;
}
EXPORT hipError_t hipMemAddressFree(void *ptr, size_t size) { return munmap(ptr, size) ? hipErrorInvalidValue : hipSuccess; }
EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size, const hipMemAllocationProp *prop,
                               unsigned long long flags) {
    (void)prop, (void)flags;
    size_t *h = malloc(sizeof(size_t));
    *h = size;
    *handle = h;
    return hipSuccess;
}
EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle) { free(handle); return hipSuccess; }
EXPORT hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                            unsigned long long flags) {
    (void)offset, (void)handle, (void)flags;
    /* fresh zeroed pages at exactly ptr, inside the reservation */
    void *p = mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == ptr ? hipSuccess : hipErrorOutOfMemory;
}
EXPORT hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count) {
    (void)desc, (void)count;
    return mprotect(ptr, size, PROT_READ | PROT_WRITE) ? hipErrorInvalidValue : hipSuccess;
}
EXPORT hipError_t hipMemUnmap(void *ptr, size_t size) {
    void *p = mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == ptr ? hipSuccess : hipErrorInvalidValue;
}
EXPORT hipError_t hipMemPoolCreate(hipMemPool_t *pool, const hipMemPoolProps *props) {
    (void)props;
    *pool = malloc(1);
    return hipSuccess;
}
EXPORT hipError_t hipMallocFromPoolAsync(void **ptr, size_t size, hipMemPool_t pool, hipStream_t stream) {
    (void)pool, (void)stream;
    return alloc_pages(ptr, size);
}
EXPORT hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t stream) { (void)stream; return alloc_pages(ptr, size); }
EXPORT hipError_t hipFreeAsync(void *ptr, hipStream_t stream) { (void)stream; return free_pages(ptr); }
EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep) { (void)pool, (void)keep; return hipSuccess; }

EXPORT hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
    *pitch = (width + 511) / 512 * 512;
    return alloc_pages(ptr, *pitch * height);
}
typedef struct { void *ptr; size_t pitch, xsize, ysize; } pitched_ptr;
typedef struct { size_t width, height, depth; } extent3d;
EXPORT hipError_t hipMalloc3D(pitched_ptr *out, extent3d e) {
    out->pitch = (e.width + 511) / 512 * 512, out->xsize = e.width, out->ysize = e.height;
    return alloc_pages(&out->ptr, out->pitch * e.height * e.depth);
}
EXPORT hipError_t hipMallocManaged(void **ptr, size_t size, unsigned flags) { (void)flags; return alloc_pages(ptr, size); }

/* ---- copies, streams, events: all complete at once, in order ---- */
EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) { (void)kind; memcpy(dst, src, n); return hipSuccess; }
EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, hipStream_t s) {
    (void)s, (void)kind;
    memcpy(dst, src, n);
    return hipSuccess;
}
EXPORT hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t n) { memcpy(dst, src, n); return hipSuccess; }
EXPORT hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t n, hipStream_t s) { (void)s; memcpy(dst, src, n); return hipSuccess; }
EXPORT hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n, hipStream_t s) {
    (void)s;
    memcpy(dst, src, n);
    return hipSuccess;
}
EXPORT hipError_t hipMemset(void *dst, int value, size_t n) { memset(dst, value, n); return hipSuccess; }
EXPORT hipError_t hipDeviceSynchronize(void) { return hipSuccess; }
EXPORT hipError_t hipGetLastError(void) { return hipSuccess; }
EXPORT hipError_t hipGetDevice(int *device) { *device = 0; return hipSuccess; }
EXPORT hipError_t hipSetDevice(int device) { return device == 0 ? hipSuccess : hipErrorInvalidValue; }
EXPORT hipError_t hipGetDeviceCount(int *count) { *count = 1; return hipSuccess; }
EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags) { (void)flags; *s = malloc(1); return hipSuccess; }
EXPORT hipError_t hipStreamCreate(hipStream_t *s) { *s = malloc(1); return hipSuccess; }
EXPORT hipError_t hipStreamDestroy(hipStream_t s) { free(s); return hipSuccess; }
EXPORT hipError_t hipStreamSynchronize(hipStream_t s) { (void)s; return hipSuccess; }
EXPORT hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags) { (void)s, (void)e, (void)flags; return hipSuccess; }
EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags) { (void)flags; *e = malloc(1); return hipSuccess; }
EXPORT hipError_t hipEventCreate(hipEvent_t *e) { *e = malloc(1); return hipSuccess; }
EXPORT hipError_t hipEventDestroy(hipEvent_t e) { free(e); return hipSuccess; }
EXPORT hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) { (void)e, (void)s; return hipSuccess; }
EXPORT hipError_t hipEventQuery(hipEvent_t e) { (void)e; return hipSuccess; }
EXPORT hipError_t hipEventSynchronize(hipEvent_t e) { (void)e; return hipSuccess; }

/* ---- code objects and launches ---- */
static void *modules_handle[1];

EXPORT void **__hipRegisterFatBinary(const void *data) { (void)data; return modules_handle; }
EXPORT void __hipUnregisterFatBinary(void **modules) { (void)modules; }
EXPORT void __hipRegisterFunction(void **modules, const void *stub, char *device_fn, const char *device_name,
                                  unsigned thread_limit, void *tid, void *bid, void *block, void *grid, int *wsize) {
    (void)modules, (void)device_name, (void)thread_limit, (void)tid, (void)bid, (void)block, (void)grid, (void)wsize;
    pthread_mutex_lock(&lock);
    functions[n_functions].stub = stub;
    snprintf(functions[n_functions++].name, sizeof functions[0].name, "%s", device_fn);
    pthread_mutex_unlock(&lock);
}
/* Device globals: a zeroed buffer per registered variable (the double does not read initial values
 * out of the code object, as the runtime does: the test program sets what it reads). */
static struct { const void *var; void *device; } variables[256];
static int n_variables;

EXPORT void __hipRegisterVar(void **modules, void *var, char *host_var, char *device_var, int ext, size_t size,
                             int constant, int global) {
    (void)modules, (void)host_var, (void)device_var, (void)ext, (void)constant, (void)global;
    void *device = NULL;
    if (alloc_pages(&device, size) != hipSuccess) return;
    pthread_mutex_lock(&lock);
    variables[n_variables].var = var;
    variables[n_variables++].device = device;
    pthread_mutex_unlock(&lock);
}
EXPORT hipError_t hipGetSymbolAddress(void **ptr, const void *symbol) {
    hipError_t r = hipErrorNotFound;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_variables; ++i)
        if (variables[i].var == symbol) *ptr = variables[i].device, r = hipSuccess;
    pthread_mutex_unlock(&lock);
    return r;
}

static __thread struct { hip_dim3 grid, block; size_t shared; hipStream_t stream; } pushed;

EXPORT hipError_t __hipPushCallConfiguration(hip_dim3 grid, hip_dim3 block, size_t shared, hipStream_t stream) {
    pushed.grid = grid, pushed.block = block, pushed.shared = shared, pushed.stream = stream;
    return hipSuccess;
}
EXPORT hipError_t __hipPopCallConfiguration(hip_dim3 *grid, hip_dim3 *block, size_t *shared, hipStream_t *stream) {
    *grid = pushed.grid, *block = pushed.block, *shared = pushed.shared, *stream = pushed.stream;
    return hipSuccess;
}
EXPORT hipError_t hipLaunchKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args, size_t shared,
                                  hipStream_t stream) {
    (void)shared, (void)stream;
    host_kernel fn = kernel_of(stub);
    if (!fn) {
        fprintf(stderr, "hip test double: no host implementation registered for the launched kernel\n");
        return hipErrorNotFound;
    }
    fn(args, grid, block);
    return hipSuccess;
}

static hipError_t run(const char *name, void **args, void **extra, hip_dim3 grid, hip_dim3 block) {
    pthread_mutex_lock(&lock);
    int k = kernel_index(name);
    host_kernel fn = k >= 0 ? kernels[k].fn : NULL;
    packed_kernel packed = k >= 0 ? kernels[k].packed : NULL;
    pthread_mutex_unlock(&lock);
    if (args && fn) {
        fn(args, grid, block);
        return hipSuccess;
    }
    if (!args && extra && packed && extra[0] == (void *)1) {  /* HIP_LAUNCH_PARAM_BUFFER_POINTER first */
        packed((const char *)extra[1], grid, block);
        return hipSuccess;
    }
    fprintf(stderr, "hip test double: no host implementation registered for %s\n", name);
    return hipErrorNotFound;
}

EXPORT hipError_t hipExtLaunchKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args, size_t shared,
                                     hipStream_t stream, hipEvent_t start, hipEvent_t stop, int flags) {
    (void)start, (void)stop, (void)flags;
    return hipLaunchKernel(stub, grid, block, args, shared, stream);
}
EXPORT hipError_t hipLaunchCooperativeKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args,
                                             unsigned shared, hipStream_t stream) {
    return hipLaunchKernel(stub, grid, block, args, shared, stream);
}

/* Modules: the image is not read; a function is its name. */
static char module_tag;
EXPORT hipError_t hipModuleLoadData(hipModule_t *module, const void *image) { (void)image; *module = &module_tag; return hipSuccess; }
EXPORT hipError_t hipModuleLoadDataEx(hipModule_t *module, const void *image, unsigned n, int *o, void **v) {
    (void)n, (void)o, (void)v;
    return hipModuleLoadData(module, image);
}
EXPORT hipError_t hipModuleLoad(hipModule_t *module, const char *path) { (void)path; *module = &module_tag; return hipSuccess; }
EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *name) {
    (void)module;
    *function = strdup(name);
    return hipSuccess;
}
EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared, hipStream_t stream, void **params,
                                        void **extra) {
    (void)shared, (void)stream;
    hip_dim3 grid = {gx, gy, gz}, block = {bx, by, bz};
    return run((const char *)f, params, extra, grid, block);
}
EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
                                           uint32_t by, uint32_t bz, size_t shared, hipStream_t stream,
                                           void **params, void **extra, hipEvent_t start, hipEvent_t stop,
                                           uint32_t flags) {
    (void)shared, (void)stream, (void)start, (void)stop, (void)flags;
    hip_dim3 grid = {gx / bx, gy / by, gz / bz}, block = {bx, by, bz};  /* work-items to blocks */
    return run((const char *)f, params, extra, grid, block);
}
EXPORT hipError_t hipGraphLaunch(void *graph, hipStream_t stream) { (void)graph, (void)stream; return hipSuccess; }
