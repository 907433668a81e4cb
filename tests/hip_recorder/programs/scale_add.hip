// A small HIP program for the HIP recorder's tests: y = a * x + y on n floats, launched with <<<>>>.
// Under the test double of the HIP runtime (tests/hip_recorder/double/) the kernel runs as the host
// implementation below, which the program hands to the double (mneme_hip_double_register): that is
// evidence for the recorder's logic, not for AMD hardware.
#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void scale_add(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
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

#define CHECK(call)                                                                  \
    do {                                                                             \
        hipError_t e = (call);                                                       \
        if (e != hipSuccess) {                                                       \
            fprintf(stderr, "%s failed: %d\n", #call, (int)e);                       \
            return 1;                                                                \
        }                                                                            \
    } while (0)

int main(int argc, char **argv) {
    typedef void (*host_fn)(void **, dim3, dim3);
    typedef int (*register_fn)(const char *, host_fn);
    register_fn reg = (register_fn)dlsym(RTLD_DEFAULT, "mneme_hip_double_register");
    if (reg) reg("_Z9scale_addPfPKffi", scale_add_on_host);
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int launches = argc > 2 ? atoi(argv[2]) : 2;
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) hx[i] = (float)i, hy[i] = 1.0f;
    float *x, *y;
    CHECK(hipMalloc((void **)&x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&y, n * sizeof(float)));
    CHECK(hipMemcpy(x, hx, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(y, hy, n * sizeof(float), hipMemcpyHostToDevice));
    for (int k = 0; k < launches; ++k) {
        scale_add<<<(n + 255) / 256, 256>>>(y, x, 2.0f + k, n);
        CHECK(hipGetLastError());
    }
    CHECK(hipDeviceSynchronize());
    CHECK(hipMemcpy(hy, y, n * sizeof(float), hipMemcpyDeviceToHost));
    float want = 1.0f;
    for (int k = 0; k < launches; ++k) want += (2.0f + k) * (float)(n - 1);
    printf("y[%d] = %g (expected %g)\n", n - 1, hy[n - 1], want);
    CHECK(hipFree(x));
    CHECK(hipFree(y));
    return hy[n - 1] == want ? 0 : 1;
}
