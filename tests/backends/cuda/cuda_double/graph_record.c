/* Launches CUDA graphs under the recorder on the driver double (cuda_double.c, graph_double.c). Two
   placed allocations of N floats, x = 0, 1, 2, ... and y = 0, and two kernels the double runs on the
   host: "scale" (x[i] *= factor) and "offset" (y[i] += c). The graph: scale(x, 2), then a copy of x
   into y, then offset(y, 1), launched LAUNCHES times. Built by argv[1]:
     explicit   with cuGraphAdd*Node (a program linked against libcuda, the entry points by name);
     captured   by stream capture (cuLaunchKernel and cuMemcpyDtoDAsync into a capturing stream),
                instantiated and launched through cuGetProcAddress as cudart does;
     concurrent captured, and while the capture is in progress "beside" (y[i] += 7) launched on
                another stream (the recorder must not record it: its synchronize would break the capture);
     host       explicit, with a host node between the copy and offset (the recorder cannot run it
                alone: the graph must run as a graph);
     update     explicit; after the first launch cuGraphExecKernelNodeSetParams (through
                cuGetProcAddress, as cudart calls it) makes scale's factor 3, after the second
                cuGraphExecUpdate (by name) from a graph whose factor is 5; one launch more;
     nested     a memset of y to 1.0f, then a child graph holding scale(x, 2), an event record node,
                an empty node, an event wait node, offset(y, 1), and offset(y, 100), which
                cuGraphNodeSetEnabled disables in the executable graph;
                after the second launch cuGraphExecChildGraphNodeSetParams makes the child's factor 3.
   Prints: x[1] y[1] after capture ended (captured: nothing ran yet), x[1] y[1] at the end, the
   graph launches the driver ran as graphs, kernel launches the driver ran, host node calls. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define N 256
#define LAUNCHES 3

#include "cuda_double.h"

static void scale(void **params) {
    float *x = *(float **)params[0];
    double factor = *(double *)params[1];
    for (int i = 0; i < N; ++i) x[i] *= (float)factor;
}

static void offset(void **params) {
    float *y = *(float **)params[0];
    double c = *(double *)params[1];
    for (int i = 0; i < N; ++i) y[i] += (float)c;
}

static struct double_kernel k_scale = {"scale", 2, scale}, k_offset = {"offset", 2, offset},
                            k_beside = {"beside", 2, offset};
static int host_calls;
static void host_node(void *data) { ++*(int *)data; }

static CUdeviceptr x, y;
static double factor = 2, one = 1;

static CUDA_KERNEL_NODE_PARAMS kernel_params(struct double_kernel *k, CUdeviceptr *buffer, double *value,
                                             void **params) {
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = (CUfunction)k;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = N, p.blockDimY = p.blockDimZ = 1;
    params[0] = buffer;
    params[1] = value;
    p.kernelParams = params;
    return p;
}

static CUDA_MEMCPY3D copy_x_to_y(void) {
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = x, c.dstDevice = y, c.WidthInBytes = N * sizeof(float), c.Height = c.Depth = 1;
    return c;
}

/* scale(x, *f) -> copy x to y -> [host node] -> offset(y, 1); the scale node into *scale_node. */
static CUgraph explicit_graph(double *f, int with_host, CUgraphNode *scale_node) {
    CUgraph g;
    CUgraphNode a, b, h, c;
    void *pa[2], *pc[2];
    cuGraphCreate(&g, 0);
    CUDA_KERNEL_NODE_PARAMS ka = kernel_params(&k_scale, &x, f, pa), kc = kernel_params(&k_offset, &y, &one, pc);
    CUDA_MEMCPY3D copy = copy_x_to_y();
    cuGraphAddKernelNode(&a, g, 0, 0, &ka);
    cuGraphAddMemcpyNode(&b, g, &a, 1, &copy, 0);
    if (with_host) {
        CUDA_HOST_NODE_PARAMS hp = {host_node, &host_calls};
        cuGraphAddHostNode(&h, g, &b, 1, &hp);
        b = h;
    }
    cuGraphAddKernelNode(&c, g, &b, 1, &kc);
    if (scale_node) *scale_node = a;
    return g;
}

/* A graph of one node, scale(x, *f). */
static CUgraph scale_graph(double *f) {
    CUgraph g;
    CUgraphNode a;
    void *pa[2];
    CUDA_KERNEL_NODE_PARAMS ka = kernel_params(&k_scale, &x, f, pa);
    cuGraphCreate(&g, 0);
    cuGraphAddKernelNode(&a, g, 0, 0, &ka);
    return g;
}

static CUgraphNode child_node;

/* memset y = 1.0f -> child { scale(x, 2) } (child_node) -> record event -> empty -> wait event -> offset(y, 1)
   -> offset(y, 100) (*disabled). */
static CUgraph nested_graph(CUgraphNode *disabled) {
    static double hundred = 100;
    CUgraph g, child;
    CUgraphNode m, c, e, o, a, rec, wait;
    CUevent event;
    cuEventCreate(&event, 0);
    void *pa[2], *po[2], *pd[2];
    cuGraphCreate(&g, 0);
    cuGraphCreate(&child, 0);
    CUDA_KERNEL_NODE_PARAMS ka = kernel_params(&k_scale, &x, &factor, pa), ko = kernel_params(&k_offset, &y, &one, po),
                            kd = kernel_params(&k_offset, &y, &hundred, pd);
    CUDA_MEMSET_NODE_PARAMS set = {y, 0, 0x3f800000u, 4, N, 1};
    cuGraphAddKernelNode(&a, child, 0, 0, &ka);
    cuGraphAddMemsetNode(&m, g, 0, 0, &set, 0);
    cuGraphAddChildGraphNode(&c, g, &m, 1, child);
    child_node = c;
    cuGraphAddEventRecordNode(&rec, g, &c, 1, event);
    cuGraphAddEmptyNode(&e, g, &rec, 1);
    cuGraphAddEventWaitNode(&wait, g, &e, 1, event);
    cuGraphAddKernelNode(&o, g, &wait, 1, &ko);
    cuGraphAddKernelNode(disabled, g, &o, 1, &kd);
    return g;
}

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*instantiate_t)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graph_launch_t)(CUgraphExec, CUstream);
typedef CUresult (*set_params_t)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "explicit";
    if (cuInit(0) != CUDA_SUCCESS || cuMemAlloc(&x, N * sizeof(float)) != CUDA_SUCCESS ||
        cuMemAlloc(&y, N * sizeof(float)) != CUDA_SUCCESS)
        return 3;
    float *hx = (float *)x, *hy = (float *)y; /* the double's device memory is this process's memory */
    for (int i = 0; i < N; ++i) hx[i] = (float)i, hy[i] = 0;
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode scale_node = 0;
    CUstream stream;
    cuStreamCreate(&stream, 0);
    instantiate_t instantiate = cuGraphInstantiate;
    graph_launch_t launch = cuGraphLaunch;
    if (strcmp(how, "captured") == 0 || strcmp(how, "concurrent") == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        getproc_t getproc = h ? (getproc_t)dlsym(h, "cuGetProcAddress_v2") : 0;
        if (!getproc || getproc("cuGraphInstantiate", (void **)&instantiate, 12000, 0, 0) != CUDA_SUCCESS ||
            getproc("cuGraphLaunch", (void **)&launch, 12000, 0, 0) != CUDA_SUCCESS)
            return 3;
        void *pa[2] = {&x, &factor}, *pc[2] = {&y, &one};
        cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
        cuLaunchKernel((CUfunction)&k_scale, 1, 1, 1, N, 1, 1, 0, stream, pa, 0);
        cuMemcpyDtoDAsync(y, x, N * sizeof(float), stream);
        cuLaunchKernel((CUfunction)&k_offset, 1, 1, 1, N, 1, 1, 0, stream, pc, 0);
        if (strcmp(how, "concurrent") == 0) {
            CUstream other;
            double seven = 7;
            void *po[2] = {&y, &seven};
            cuStreamCreate(&other, 0);
            if (cuLaunchKernel((CUfunction)&k_beside, 1, 1, 1, N, 1, 1, 0, other, po, 0) != CUDA_SUCCESS) return 4;
        }
        cuStreamEndCapture(stream, &graph);
    } else if (strcmp(how, "nested") == 0) {
        graph = nested_graph(&scale_node);
    } else {
        graph = explicit_graph(&factor, strcmp(how, "host") == 0, &scale_node);
    }
    printf("%g %g\n", hx[1], hy[1]); /* concurrent: y is 7, the launch on the other stream ran */
    if (instantiate(&exec, graph, 0) != CUDA_SUCCESS) return 3;
    if (strcmp(how, "nested") == 0 && cuGraphNodeSetEnabled(exec, scale_node, 0) != CUDA_SUCCESS) return 5;
    int launches_made = LAUNCHES + (strcmp(how, "update") == 0); /* one more: after the updates */
    for (int k = 0; k < launches_made; ++k) {
        if (launch(exec, stream) != CUDA_SUCCESS) return 4;
        if (strcmp(how, "update") == 0 && k == 0) {
            double three = 3;
            void *params[2];
            CUDA_KERNEL_NODE_PARAMS p = kernel_params(&k_scale, &x, &three, params);
            void *h = dlopen("libcuda.so.1", RTLD_NOW);
            getproc_t getproc = h ? (getproc_t)dlsym(h, "cuGetProcAddress_v2") : 0;
            set_params_t set_params = 0;
            if (!getproc ||
                getproc("cuGraphExecKernelNodeSetParams", (void **)&set_params, 12000, 0, 0) != CUDA_SUCCESS ||
                set_params(exec, scale_node, &p) != CUDA_SUCCESS)
                return 5;
        } else if (strcmp(how, "nested") == 0 && k == 1) {
            static double three = 3;
            if (cuGraphExecChildGraphNodeSetParams(exec, child_node, scale_graph(&three)) != CUDA_SUCCESS) return 5;
        } else if (strcmp(how, "update") == 0 && k == 1) {
            double five = 5;
            CUgraphExecUpdateResultInfo info;
            if (cuGraphExecUpdate(exec, explicit_graph(&five, 0, 0), &info) != CUDA_SUCCESS) return 5;
        }
    }
    cuStreamSynchronize(stream);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    long (*graph_launches)(void) = (long (*)(void))dlsym(h, "double_graph_launches");
    long (*launches)(void) = (long (*)(void))dlsym(h, "double_launches");
    printf("%g %g %ld %ld %d\n", hx[1], hy[1], graph_launches(), launches(), host_calls);
    cuGraphExecDestroy(exec);
    return 0;
}
