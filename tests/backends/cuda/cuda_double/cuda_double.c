/* A test double of the CUDA driver's launch entry points (built as libcuda.so.1 by the tests), for the
   recorder's launch paths without a GPU: the entry points a program reaches through cuGetProcAddress
   (as cudart does) and by name (a program linked against libcuda). Each launch is counted and
   succeeds; a kernel handle is a `struct double_kernel`, whose name cuFuncGetName returns. */
#include <cuda.h>
#include <string.h>

struct double_kernel {
    const char *name;
    int params; /* each 8 bytes */
};

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

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
    *status = s == CAPTURING_STREAM ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

static CUresult launched(void) { ++launches; return CUDA_SUCCESS; }

#define LAUNCH_ARGS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                    unsigned shared, CUstream s, void **params
API CUresult cuLaunchKernel(LAUNCH_ARGS, void **extra) { return launched(); }
API CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **extra) { return launched(); }
API CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS) { return launched(); }
API CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS) { return launched(); }
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return launched(); }
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return launched(); }

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
