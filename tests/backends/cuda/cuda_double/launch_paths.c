/* Launches kernels through every launch entry point of the driver, as programs reach them: through
   cuGetProcAddress from dlopen + dlsym (cudart, static or shared; legacy and per-thread default
   stream), and by name from a program linked against libcuda (plain and _ptsz, and cuGetProcAddress
   itself). Each path launches its own kernel LAUNCHES times; a launch into a capturing stream and a
   cudaDeviceReset-style primary context reset end it. Prints the launches it made and the resets
   the driver saw. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

#define LAUNCHES 3

#include "cuda_double.h" /* no `host` here: the launches only count */

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*coop_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **);
typedef CUresult (*reset_t)(CUdevice);

CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void **);

static struct double_kernel k_rt_legacy = {"rt_legacy", 1}, k_rt_ptds = {"rt_per_thread", 1},
                            k_rt_ex = {"rt_ex", 1}, k_rt_ex_ptds = {"rt_ex_per_thread", 1},
                            k_rt_coop = {"rt_coop", 1}, k_rt_coop_ptds = {"rt_coop_per_thread", 1},
                            k_plain = {"plain", 1}, k_plain_ptsz = {"plain_ptsz", 1},
                            k_plain_ex_ptsz = {"plain_ex_ptsz", 1}, k_plain_coop_ptsz = {"plain_coop_ptsz", 1},
                            k_getproc_by_name = {"getproc_by_name", 1}, k_captured = {"captured", 1};

static long made;

static void launch(launch_t fn, struct double_kernel *k, CUstream s) {
    unsigned long long arg = 42;
    void *params[] = {&arg};
    if (fn((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, s, params, 0) == CUDA_SUCCESS) ++made;
}

static void launch_ex(launch_ex_t fn, struct double_kernel *k) {
    unsigned long long arg = 42;
    void *params[] = {&arg};
    CUlaunchConfig cfg = {1, 1, 1, 32, 1, 1, 0, 0, 0, 0};
    if (fn(&cfg, (CUfunction)k, params, 0) == CUDA_SUCCESS) ++made;
}

static void coop(coop_t fn, struct double_kernel *k) {
    unsigned long long arg = 42;
    void *params[] = {&arg};
    if (fn((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, 0, params) == CUDA_SUCCESS) ++made;
}

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    getproc_t getproc = h ? (getproc_t)dlsym(h, "cuGetProcAddress_v2") : 0;
    if (!getproc) return 3;
    void *fn[6] = {0};
    getproc("cuLaunchKernel", &fn[0], 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0);
    getproc("cuLaunchKernel", &fn[1], 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 0);
    getproc("cuLaunchKernelEx", &fn[2], 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0);
    getproc("cuLaunchKernelEx", &fn[3], 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 0);
    getproc("cuLaunchCooperativeKernel", &fn[4], 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0);
    getproc("cuLaunchCooperativeKernel", &fn[5], 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 0);
    void *by_name = 0;
    cuGetProcAddress_v2("cuLaunchKernel", &by_name, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0);
    for (int i = 0; i < LAUNCHES; ++i) {
        launch((launch_t)fn[0], &k_rt_legacy, 0);
        launch((launch_t)fn[1], &k_rt_ptds, 0);
        launch_ex((launch_ex_t)fn[2], &k_rt_ex);
        launch_ex((launch_ex_t)fn[3], &k_rt_ex_ptds);
        coop((coop_t)fn[4], &k_rt_coop);
        coop((coop_t)fn[5], &k_rt_coop_ptds);
        launch(cuLaunchKernel, &k_plain, 0);
        launch(cuLaunchKernel_ptsz, &k_plain_ptsz, 0);
        launch_ex(cuLaunchKernelEx_ptsz, &k_plain_ex_ptsz);
        coop(cuLaunchCooperativeKernel_ptsz, &k_plain_coop_ptsz);
        launch((launch_t)by_name, &k_getproc_by_name, 0);
        launch((launch_t)fn[0], &k_captured, (CUstream)0x1234);
    }
    void *reset = 0;
    getproc("cuDevicePrimaryCtxReset", &reset, 12000, 0, 0);
    ((reset_t)reset)(0);
    long (*resets)(void) = (long (*)(void))dlsym(h, "double_resets");
    printf("%ld %ld\n", made, resets ? resets() : -1);
    return 0;
}
