/* CUDA graphs in the driver double (linked into libcuda.so.1 with cuda_double.c): a small real model
   for driving the recorder, NOT a claim about CUDA. A graph holds nodes (kernel, memcpy, memset, host,
   empty, child graph), each with the nodes it depends on; a node is added after its dependencies, so
   a graph's node order is a topological one. Event record and wait nodes record and wait as the
   double's events do (at once). Instantiating copies the graph (later edits of the graph
   do not change the executable one; each copied node remembers the node it came from, by which exec
   updates name it); a launch runs the copy's nodes in order, at once (the double's streams complete
   work at once). Stream capture: between cuStreamBeginCapture and cuStreamEndCapture, kernel launches
   and copies into that stream add nodes, each depending on the one before, instead of running. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define MAX_PARAMS 16

#include "cuda_double.h"

CUresult double_run_kernel(CUfunction f, void **params); /* cuda_double.c */

struct dgraph;
struct dnode {
    CUgraphNodeType type;
    struct dnode **deps;
    size_t ndeps;
    struct dnode *origin; /* in an executable graph: the node it was instantiated from */
    int enabled;
    CUDA_KERNEL_NODE_PARAMS kernel; /* kernelParams points into args */
    unsigned long long args[MAX_PARAMS];
    void *argp[MAX_PARAMS];
    CUDA_MEMCPY3D copy;
    CUDA_MEMSET_NODE_PARAMS set;
    CUDA_HOST_NODE_PARAMS host;
    struct dgraph *child;
    CUevent event;
};

struct dgraph {
    struct dnode **nodes;
    size_t n;
};

static long graph_launches; /* launches of executable graphs (cuGraphLaunch), not of their nodes */

API long double_graph_launches(void) { return graph_launches; }

static void set_kernel(struct dnode *node, const CUDA_KERNEL_NODE_PARAMS *p) {
    node->kernel = *p;
    const struct double_kernel *k = (const struct double_kernel *)(p->func ? p->func : (CUfunction)p->kern);
    for (int i = 0; i < k->params && i < MAX_PARAMS; ++i) {
        memcpy(&node->args[i], p->kernelParams[i], 8);
        node->argp[i] = &node->args[i];
    }
    node->kernel.kernelParams = node->argp;
    node->kernel.extra = 0;
}

static struct dnode *add_node(CUgraph graph, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type) {
    struct dgraph *g = (struct dgraph *)graph;
    struct dnode *node = (struct dnode *)calloc(1, sizeof *node);
    node->type = type;
    node->enabled = 1;
    node->deps = (struct dnode **)calloc(ndeps ? ndeps : 1, sizeof *node->deps);
    for (size_t i = 0; i < ndeps; ++i) node->deps[i] = (struct dnode *)deps[i];
    node->ndeps = ndeps;
    g->nodes = (struct dnode **)realloc(g->nodes, (g->n + 1) * sizeof *g->nodes);
    g->nodes[g->n++] = node;
    return node;
}

static struct dgraph *clone_graph(const struct dgraph *g, int remember_origin) {
    struct dgraph *c = (struct dgraph *)calloc(1, sizeof *c);
    c->nodes = (struct dnode **)calloc(g->n ? g->n : 1, sizeof *c->nodes);
    c->n = g->n;
    for (size_t i = 0; i < g->n; ++i) {
        struct dnode *node = (struct dnode *)malloc(sizeof *node);
        *node = *g->nodes[i];
        node->origin = remember_origin ? g->nodes[i] : 0;
        node->kernel.kernelParams = node->argp;
        for (int k = 0; k < MAX_PARAMS; ++k) node->argp[k] = &node->args[k];
        node->deps = (struct dnode **)calloc(node->ndeps ? node->ndeps : 1, sizeof *node->deps);
        for (size_t d = 0; d < node->ndeps; ++d)
            for (size_t j = 0; j < i; ++j)
                if (g->nodes[j] == g->nodes[i]->deps[d]) node->deps[d] = c->nodes[j];
        if (node->child) node->child = clone_graph(node->child, remember_origin);
        c->nodes[i] = node;
    }
    return c;
}

API CUresult cuGraphCreate(CUgraph *graph, unsigned flags) {
    *graph = (CUgraph)calloc(1, sizeof(struct dgraph));
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(CUgraph graph) { return CUDA_SUCCESS; } /* leaked: a test's few graphs */

API CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                     const CUDA_KERNEL_NODE_PARAMS *p) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_KERNEL);
    set_kernel(node, p);
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                  const CUDA_MEMCPY3D *p, CUcontext ctx) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_MEMCPY);
    node->copy = *p;
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                  const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_MEMSET);
    node->set = *p;
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                const CUDA_HOST_NODE_PARAMS *p) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_HOST);
    node->host = *p;
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                       CUevent event) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    node->event = event;
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                     CUevent event) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    node->event = event;
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n) {
    *out = (CUgraphNode)add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_EMPTY);
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t n,
                                      CUgraph child) {
    struct dnode *node = add_node(graph, deps, n, CU_GRAPH_NODE_TYPE_GRAPH);
    node->child = clone_graph((struct dgraph *)child, 0); /* the graph embeds a copy, as CUDA's does */
    *out = (CUgraphNode)node;
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *n) {
    const struct dgraph *g = (const struct dgraph *)graph;
    if (nodes)
        for (size_t i = 0; i < g->n && i < *n; ++i) nodes[i] = (CUgraphNode)g->nodes[i];
    *n = g->n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetEdges_v2(CUgraph graph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *n) {
    const struct dgraph *g = (const struct dgraph *)graph;
    size_t k = 0;
    for (size_t i = 0; i < g->n; ++i)
        for (size_t d = 0; d < g->nodes[i]->ndeps; ++d, ++k)
            if (from && k < *n) {
                from[k] = (CUgraphNode)g->nodes[i]->deps[d];
                to[k] = (CUgraphNode)g->nodes[i];
                if (data) memset(&data[k], 0, sizeof data[k]);
            }
    *n = k;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type) {
    *type = ((struct dnode *)node)->type;
    return CUDA_SUCCESS;
}

#define NODE_OF(t) \
    struct dnode *d = (struct dnode *)node; \
    if (d->type != (t)) return CUDA_ERROR_INVALID_VALUE
API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p) {
    NODE_OF(CU_GRAPH_NODE_TYPE_KERNEL);
    *p = d->kernel;
    return CUDA_SUCCESS;
}
API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
    NODE_OF(CU_GRAPH_NODE_TYPE_KERNEL);
    set_kernel(d, p);
    return CUDA_SUCCESS;
}
API CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v) {
    NODE_OF(CU_GRAPH_NODE_TYPE_KERNEL);
    memset(v, 0, sizeof *v); /* no attribute set */
    return CUDA_SUCCESS;
}
API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *p) {
    NODE_OF(CU_GRAPH_NODE_TYPE_MEMCPY);
    *p = d->copy;
    return CUDA_SUCCESS;
}
API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p) {
    NODE_OF(CU_GRAPH_NODE_TYPE_MEMSET);
    *p = d->set;
    return CUDA_SUCCESS;
}
API CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *p) {
    NODE_OF(CU_GRAPH_NODE_TYPE_HOST);
    *p = d->host;
    return CUDA_SUCCESS;
}
API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent *event) {
    NODE_OF(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    *event = d->event;
    return CUDA_SUCCESS;
}
API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent *event) {
    NODE_OF(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    *event = d->event;
    return CUDA_SUCCESS;
}
API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *child) {
    NODE_OF(CU_GRAPH_NODE_TYPE_GRAPH);
    *child = (CUgraph)d->child;
    return CUDA_SUCCESS;
}

/* A 1D or 2D copy between host and "device" memory (both are this process's memory here). */
CUresult double_copy(const CUDA_MEMCPY3D *p) {
    const char *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? (const char *)p->srcHost : (const char *)p->srcDevice;
    char *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? (char *)p->dstHost : (char *)p->dstDevice;
    size_t rows = p->Height ? p->Height : 1;
    for (size_t r = 0; r < rows; ++r)
        memcpy(dst + p->dstY * p->dstPitch + r * p->dstPitch + p->dstXInBytes,
               src + p->srcY * p->srcPitch + r * p->srcPitch + p->srcXInBytes, p->WidthInBytes);
    return CUDA_SUCCESS;
}

CUresult double_memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned size, size_t width, size_t height) {
    for (size_t r = 0; r < (height ? height : 1); ++r)
        for (size_t i = 0; i < width; ++i) {
            char *at = (char *)dst + r * pitch + i * size;
            if (size == 1) *(unsigned char *)at = (unsigned char)value;
            else if (size == 2) *(unsigned short *)at = (unsigned short)value;
            else *(unsigned *)at = value;
        }
    return CUDA_SUCCESS;
}

static CUresult run_graph(const struct dgraph *g) {
    for (size_t i = 0; i < g->n; ++i) { /* insertion order is a topological one */
        const struct dnode *node = g->nodes[i];
        CUresult r = CUDA_SUCCESS;
        if (!node->enabled) continue;
        switch (node->type) {
            case CU_GRAPH_NODE_TYPE_KERNEL:
                r = double_run_kernel(node->kernel.func ? node->kernel.func : (CUfunction)node->kernel.kern,
                                      node->kernel.kernelParams);
                break;
            case CU_GRAPH_NODE_TYPE_MEMCPY: r = double_copy(&node->copy); break;
            case CU_GRAPH_NODE_TYPE_MEMSET:
                r = double_memset(node->set.dst, node->set.pitch, node->set.value, node->set.elementSize,
                                  node->set.width, node->set.height);
                break;
            case CU_GRAPH_NODE_TYPE_HOST: node->host.fn(node->host.userData); break;
            case CU_GRAPH_NODE_TYPE_GRAPH: r = run_graph(node->child); break;
            case CU_GRAPH_NODE_TYPE_EVENT_RECORD: r = cuEventRecord(node->event, 0); break;
            case CU_GRAPH_NODE_TYPE_WAIT_EVENT: r = cuStreamWaitEvent(0, node->event, 0); break;
            default: break;
        }
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    *exec = (CUgraphExec)clone_graph((struct dgraph *)graph, 1);
    return CUDA_SUCCESS;
}

API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
    ++graph_launches;
    return run_graph((const struct dgraph *)exec);
}

API CUresult cuGraphExecDestroy(CUgraphExec exec) { return CUDA_SUCCESS; }

static struct dnode *exec_node(CUgraphExec exec, CUgraphNode node) {
    const struct dgraph *g = (const struct dgraph *)exec;
    for (size_t i = 0; i < g->n; ++i)
        if (g->nodes[i]->origin == (struct dnode *)node) return g->nodes[i];
    return 0;
}

API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
    struct dnode *d = exec_node(exec, node);
    if (!d || d->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    set_kernel(d, p);
    return CUDA_SUCCESS;
}

/* A child graph node's graph in the executable graph, from another of the same shape. */
API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
    struct dnode *d = exec_node(exec, node);
    struct dgraph *g = (struct dgraph *)child;
    if (!d || d->type != CU_GRAPH_NODE_TYPE_GRAPH || d->child->n != g->n) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g->n; ++i) {
        struct dnode *to = d->child->nodes[i], *from = g->nodes[i];
        if (to->type != from->type) return CUDA_ERROR_INVALID_VALUE;
        if (from->type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel(to, &from->kernel);
        to->copy = from->copy;
        to->set = from->set;
    }
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned enabled) {
    struct dnode *d = exec_node(exec, node);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    d->enabled = enabled != 0;
    return CUDA_SUCCESS;
}

/* The graph's parameters into the executable graph, node by node in order (same topology required). */
API CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info) {
    struct dgraph *e = (struct dgraph *)exec, *g = (struct dgraph *)graph;
    if (e->n != g->n) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    for (size_t i = 0; i < g->n; ++i) {
        if (e->nodes[i]->type != g->nodes[i]->type) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel(e->nodes[i], &g->nodes[i]->kernel);
        e->nodes[i]->copy = g->nodes[i]->copy;
        e->nodes[i]->set = g->nodes[i]->set;
    }
    if (info) info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

/* ---- stream capture ---- */
#define MAX_CAPTURES 8
static struct capture {
    CUstream stream;
    CUgraph graph;
    CUgraphNode last;
} captures[MAX_CAPTURES];

static struct capture *capture_of(CUstream s) {
    for (int i = 0; i < MAX_CAPTURES; ++i)
        if (captures[i].graph && captures[i].stream == s) return &captures[i];
    return 0;
}

int double_capturing(CUstream s) { return capture_of(s) != 0; }

API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    for (int i = 0; i < MAX_CAPTURES; ++i)
        if (!captures[i].graph) {
            captures[i].stream = s;
            cuGraphCreate(&captures[i].graph, 0);
            captures[i].last = 0;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) {
    struct capture *c = capture_of(s);
    if (!c) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    *graph = c->graph;
    c->graph = 0;
    return CUDA_SUCCESS;
}

/* A launch into a capturing stream: a kernel node after the capture's last node. */
CUresult double_capture_kernel(CUstream s, CUfunction f, const unsigned grid[3], const unsigned block[3],
                               unsigned shared, void **params) {
    struct capture *c = capture_of(s);
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = grid[0], p.gridDimY = grid[1], p.gridDimZ = grid[2];
    p.blockDimX = block[0], p.blockDimY = block[1], p.blockDimZ = block[2];
    p.sharedMemBytes = shared;
    p.kernelParams = params;
    return cuGraphAddKernelNode_v2(&c->last, c->graph, c->last ? &c->last : 0, c->last ? 1 : 0, &p);
}

/* A copy into a capturing stream: a memcpy node after the capture's last node. */
CUresult double_capture_copy(CUstream s, const CUDA_MEMCPY3D *p) {
    struct capture *c = capture_of(s);
    return cuGraphAddMemcpyNode(&c->last, c->graph, c->last ? &c->last : 0, c->last ? 1 : 0, p, 0);
}
