// A small HIP program for the HIP recorder's tests: y = a * x + y on n floats, launched with <<<>>>.
// Under the test double of the HIP runtime (tests/backends/hip/hip_recorder/double/) the kernel runs as the host
// implementation below, which the program hands to the double (mneme_hip_double_register): that is
// evidence for the recorder's logic, not for AMD hardware.
#include <hip/hip_runtime.h>
#include <hip/hip_ext.h>
#include <dlfcn.h>

#include "mneme_annotate.h"  // the same header as for CUDA (backends/cuda/recorder/include)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void scale_add(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// The same with device globals: a bias it reads and a count of launches it writes.
__device__ float bias = 0.5f;
__device__ unsigned calls = 0;

__global__ void scale_add_bias(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + bias;
    if (i == 0) calls += 1;
}

// The kernel's host implementation for the double: its arguments as hipLaunchKernel passes them.
// SCALE_ADD_HOST_OFF_BY_ONE=1 makes it compute a wrong result (one more), so that a test can show
// a replay is verified against what this implementation wrote, and fails when that differs.
static void scale_add_on_host(void **args, dim3 grid, dim3 block) {
    float *y = *(float **)args[0];
    const float *x = *(const float **)args[1];
    float a = *(float *)args[2];
    int n = *(int *)args[3];
    const char *off = getenv("SCALE_ADD_HOST_OFF_BY_ONE");
    float extra = off && off[0] == '1' ? 1.0f : 0.0f;
    for (unsigned b = 0; b < grid.x; ++b)
        for (unsigned t = 0; t < block.x; ++t) {
            int i = b * block.x + t;
            if (i < n) y[i] = a * x[i] + y[i] + extra;
        }
}

// scale_add_bias on the host: the globals where hipGetSymbolAddress says they are.
static float *bias_on_device;
static unsigned *calls_on_device;

static void scale_add_bias_on_host(void **args, dim3 grid, dim3 block) {
    float *y = *(float **)args[0];
    const float *x = *(const float **)args[1];
    float a = *(float *)args[2];
    int n = *(int *)args[3];
    for (unsigned b = 0; b < grid.x; ++b)
        for (unsigned t = 0; t < block.x; ++t) {
            int i = b * block.x + t;
            if (i < n) y[i] = a * x[i] + y[i] + *bias_on_device;
        }
    *calls_on_device += 1;
}

// The same, from a packed argument buffer (hipModuleLaunchKernel's `extra`): y, x, a, n at 0, 8, 16, 20.
static void scale_add_packed_on_host(const char *buf, dim3 grid, dim3 block) {
    void *args[4] = {(void *)(buf + 0), (void *)(buf + 8), (void *)(buf + 16), (void *)(buf + 20)};
    scale_add_on_host(args, grid, block);
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        hipError_t e = (call);                                                       \
        if (e != hipSuccess) {                                                       \
            fprintf(stderr, "%s failed: %d\n", #call, (int)e);                       \
            return 1;                                                                \
        }                                                                            \
    } while (0)

// Usage: scale_add [n] [launches] [how] [code object], how: chevron (<<<>>>, the default), ext
// (hipExtLaunchKernel), coop (hipLaunchCooperativeKernel), module (hipModuleLoadData of the code
// object file, hipModuleLaunchKernel with kernelParams), module-extra (the same with a packed
// `extra` buffer), pitch (y from hipMallocPitch), global (scale_add_bias, with device globals),
// annotate (y's verification policy declared with mneme_annotate). (hipExtModuleLaunchKernel is left out: Debian's
// HIP 5.2 header declares it with C++ linkage, ROCm 6's with C linkage, which the recorder interposes.)
int main(int argc, char **argv) {
    typedef void (*host_fn)(void **, dim3, dim3);
    typedef void (*packed_fn)(const char *, dim3, dim3);
    typedef int (*register_fn)(const char *, host_fn);
    typedef int (*register_packed_fn)(const char *, packed_fn);
    register_fn reg = (register_fn)dlsym(RTLD_DEFAULT, "mneme_hip_double_register");
    register_packed_fn reg_packed = (register_packed_fn)dlsym(RTLD_DEFAULT, "mneme_hip_double_register_packed");
    if (reg) reg("_Z9scale_addPfPKffi", scale_add_on_host);
    if (reg_packed) reg_packed("_Z9scale_addPfPKffi", scale_add_packed_on_host);
    if (reg) reg("_Z14scale_add_biasPfPKffi", scale_add_bias_on_host);
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int launches = argc > 2 ? atoi(argv[2]) : 2;
    const char *how = argc > 3 ? argv[3] : "chevron";
    hipFunction_t function = NULL;
    if (strncmp(how, "module", 6) == 0) {
        if (argc < 5) return 2;
        FILE *f = fopen(argv[4], "rb");
        if (!f) return 2;
        static char image[1 << 22];
        size_t size = fread(image, 1, sizeof image, f);
        fclose(f);
        if (size == 0) return 2;
        hipModule_t module;
        CHECK(hipModuleLoadData(&module, image));
        CHECK(hipModuleGetFunction(&function, module, "_Z9scale_addPfPKffi"));
    }
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) hx[i] = (float)i, hy[i] = 1.0f;
    float *x, *y;
    CHECK(hipMalloc((void **)&x, n * sizeof(float)));
    if (strcmp(how, "pitch") == 0) {
        size_t pitch = 0;
        CHECK(hipMallocPitch((void **)&y, &pitch, n * sizeof(float), 1));
    } else {
        CHECK(hipMalloc((void **)&y, n * sizeof(float)));
    }
    if (strcmp(how, "annotate") == 0 && mneme_annotate(y, "f32", 1e-6, 1, "none", "y") != 1) return 3;
    CHECK(hipMemcpy(x, hx, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(y, hy, n * sizeof(float), hipMemcpyHostToDevice));
    if (strcmp(how, "global") == 0) {
        CHECK(hipGetSymbolAddress((void **)&bias_on_device, HIP_SYMBOL(bias)));
        CHECK(hipGetSymbolAddress((void **)&calls_on_device, HIP_SYMBOL(calls)));
        float b = 0.5f;  // its initial value too, which the test double does not take from the code object
        CHECK(hipMemcpy(bias_on_device, &b, sizeof b, hipMemcpyHostToDevice));
    }
    dim3 grid((n + 255) / 256), block(256);
    for (int k = 0; k < launches; ++k) {
        float a = 2.0f + k;
        void *args[] = {&y, &x, &a, &n};
        struct {
            float *y;
            const float *x;
            float a;
            int n;
        } packed = {y, x, a, n};
        size_t packed_size = sizeof packed;
        void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &packed, HIP_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                         HIP_LAUNCH_PARAM_END};
        if (strcmp(how, "ext") == 0) {
            CHECK(hipExtLaunchKernel((const void *)scale_add, grid, block, args, 0, 0, NULL, NULL, 0));
        } else if (strcmp(how, "coop") == 0) {
            CHECK(hipLaunchCooperativeKernel((const void *)scale_add, grid, block, args, 0, 0));
        } else if (strcmp(how, "module") == 0) {
            CHECK(hipModuleLaunchKernel(function, grid.x, 1, 1, block.x, 1, 1, 0, 0, args, NULL));
        } else if (strcmp(how, "module-extra") == 0) {
            CHECK(hipModuleLaunchKernel(function, grid.x, 1, 1, block.x, 1, 1, 0, 0, NULL, extra));
        } else if (strcmp(how, "global") == 0) {
            scale_add_bias<<<grid, block>>>(y, x, a, n);
        } else {
            scale_add<<<grid, block>>>(y, x, a, n);
        }
        CHECK(hipGetLastError());
    }
    CHECK(hipDeviceSynchronize());
    CHECK(hipMemcpy(hy, y, n * sizeof(float), hipMemcpyDeviceToHost));
    float want = 1.0f;
    for (int k = 0; k < launches; ++k) want += (2.0f + k) * (float)(n - 1) + (strcmp(how, "global") == 0 ? 0.5f : 0.0f);
    printf("y[%d] = %g (expected %g)\n", n - 1, hy[n - 1], want);
    CHECK(hipFree(x));
    CHECK(hipFree(y));
    return hy[n - 1] == want ? 0 : 1;
}
