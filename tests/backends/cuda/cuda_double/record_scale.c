/* Records launches through the recorder on the driver double (cuda_double.c): one placed allocation of
   N floats (0, 1, 2, ...), and the kernel "scale" (x[i] *= factor, run on the host by the double)
   launched with these argument sets, in order: factor 2 twice (one argument set, recorded once), 3
   (a second set), 5 (past MNEME_RECORD_MAX=2 sets). Prints each launch's status. With the argument
   `linger`, it waits 200 ms before it ends (the recorder's writer thread idle meanwhile). */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define N 1024

#include "cuda_double.h"

static float seen[64];
static int runs;

static void scale(void **params) {
    float *x = *(float **)params[0];
    if (runs < 64) seen[runs++] = x[1];
    double factor = *(double *)params[1];
    unsigned long long n = *(unsigned long long *)params[2];
    for (unsigned long long i = 0; i < n; ++i) x[i] *= (float)factor;
}

static struct double_kernel k_scale = {"scale", 3, scale};

int main(int argc, char **argv) {
    CUdeviceptr buffer = 0;
    void *host = NULL;
    if (cuInit(0) != CUDA_SUCCESS) return 3;
    if (argc > 1 && strcmp(argv[1], "host") == 0) { /* x in pinned host memory: outside the recorded range */
        if (cuMemAllocHost(&host, N * sizeof(float)) != CUDA_SUCCESS) return 3;
        buffer = (CUdeviceptr)host;
    } else if (cuMemAlloc(&buffer, N * sizeof(float)) != CUDA_SUCCESS) {
        return 3;
    }
    float *x = (float *)buffer; /* the double's device memory is this process's memory */
    for (int i = 0; i < N; ++i) x[i] = (float)i;
    const double factors[] = {2, 2, 3, 5};
    for (int k = 0; k < 4; ++k) {
        unsigned long long n = N;
        double factor = factors[k];
        void *params[] = {&buffer, &factor, &n};
        printf("%d%s", (int)cuLaunchKernel((CUfunction)&k_scale, 1, 1, 1, 256, 1, 1, 0, 0, params, 0), k < 3 ? " " : "\n");
    }
    printf("0x%llx %g\n", (unsigned long long)buffer, x[1]);
    for (int i = 0; i < runs; ++i) printf("%g%s", seen[i], i + 1 < runs ? " " : "\n");
    if (argc > 1 && strcmp(argv[argc - 1], "linger") == 0) nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    return cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 4;
}
