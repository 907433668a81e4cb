// ---- CUDA graphs: what an instantiated graph runs ------------------------------------------------
// A kernel node runs only when its graph is launched (cuGraphLaunch), never through the launch entry
// points; launches into a stream being captured only add nodes. So at instantiation the recorder
// reads the graph into a plan: its nodes in one topological order, child graphs inlined, each with
// what running it alone on a stream takes (a kernel's function, geometry, attributes and argument
// bytes; a copy's or a memset's parameters; an event). While a launch of the graph holds a kernel
// node the recorder still wants to record, graph_launch.h runs that launch as its plan, node by node
// on the launch's stream, the kernel nodes through the recorder's own launch path; once none does,
// launches go to the driver's cuGraphLaunch. A graph with a node that cannot run alone exactly as in
// the graph is never run so: its plan says why, and its launches are counted with that reason.
// Updates of the executable graph after instantiation (cuGraphExec*SetParams, cuGraphExecUpdate,
// cuGraphExecChildGraphNodeSetParams, cuGraphNodeSetEnabled) change what it runs: the plan follows
// them (graph_updates.h; docs/design/recording.md, "CUDA graphs").

using graph_instantiate_t = CUresult (*)(CUgraphExec *, CUgraph, unsigned long long);
using graph_instantiate_v1_t = CUresult (*)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
using graph_instantiate_params_t = CUresult (*)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
using graph_launch_t = CUresult (*)(CUgraphExec, CUstream);
using graph_exec_destroy_t = CUresult (*)(CUgraphExec);
using graph_exec_update_t = CUresult (*)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
using graph_exec_update_v1_t = CUresult (*)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *);
using graph_exec_kernel_t = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
using graph_exec_kernel_v1_t = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *);
using graph_exec_memcpy_t = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext);
using graph_exec_memset_t = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
using graph_exec_event_t = CUresult (*)(CUgraphExec, CUgraphNode, CUevent);
using graph_exec_child_t = CUresult (*)(CUgraphExec, CUgraphNode, CUgraph);
using graph_exec_node_t = CUresult (*)(CUgraphExec, CUgraphNode, CUgraphNodeParams *);
using graph_node_enable_t = CUresult (*)(CUgraphExec, CUgraphNode, unsigned);

struct RealGraphs {
    graph_instantiate_t instantiate = nullptr;
    graph_instantiate_v1_t instantiate_v1 = nullptr, instantiate_v2 = nullptr;
    graph_instantiate_params_t instantiate_params = nullptr, instantiate_params_ptsz = nullptr;
    graph_launch_t launch = nullptr, launch_ptsz = nullptr;
    graph_exec_destroy_t destroy = nullptr;
    graph_exec_update_t update = nullptr;
    graph_exec_update_v1_t update_v1 = nullptr;  // before 12.0
    graph_exec_kernel_t kernel = nullptr;
    graph_exec_kernel_v1_t kernel_v1 = nullptr;  // before 12.0
    graph_exec_memcpy_t memcpy = nullptr;
    graph_exec_memset_t memset = nullptr;
    graph_exec_event_t record_event = nullptr, wait_event = nullptr;
    graph_exec_child_t child = nullptr;
    graph_exec_node_t node = nullptr;
    graph_node_enable_t enable = nullptr;
};

RealGraphs &real_graphs() {
    static auto *r = new RealGraphs();
    return *r;
}

// One node of a plan, as running it alone on a stream needs it.
struct GraphStep {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    CUgraphNode node = nullptr;  // the application's handle of it (exec updates name nodes by it)
    bool enabled = true;         // cuGraphNodeSetEnabled
    // A kernel node: its function (or CUkernel), launch, argument bytes at their offsets.
    CUfunction f = nullptr;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
    bool cooperative = false;
    unsigned cluster[3] = {0, 0, 0};
    std::string args;
    std::vector<std::pair<size_t, size_t>> layout;
    std::string name;  // the kernel's, when selected
    bool selected = false;
    uint64_t key = 0;             // instance_key, when selected
    KernelCounts *kc = nullptr;   // its counts (bind_counts: entries of counts() are never erased)
    long ordinal = 0;             // how many nodes of the same kernel come before it in the plan
    // A copy, a memset, an event record or wait.
    CUDA_MEMCPY3D copy = {};
    CUDA_MEMSET_NODE_PARAMS set = {};
    CUevent event = nullptr;
};

// Where a child graph's nodes are in its plan (cuGraphExecChildGraphNodeSetParams replaces them).
struct ChildSteps {
    CUgraphNode node;  // the child graph node
    size_t begin, end;
};

struct GraphPlan {
    std::vector<GraphStep> steps;  // one topological order; a child graph's nodes inlined in its place
    std::vector<ChildSteps> children;  // each child graph node's steps (nested ones first)
    std::string unsupported;       // why this graph cannot run node by node; "" when it can
    unsigned long long flags = 0;  // its instantiation flags
    bool any_selected = false;     // a kernel node of a selected kernel
};

std::unordered_map<void *, GraphPlan> &graph_plans() {  // CUgraphExec -> its plan (mu() held)
    static auto *m = new std::unordered_map<void *, GraphPlan>();
    return *m;
}

// A device-launchable graph may be launched by any kernel running in a graph (and by no kernel
// launched on a stream): once the process has one, no graph is run node by node.
bool device_launch_graphs = false;  // mu() held

const char *node_type_name(CUgraphNodeType type) {
    switch (type) {
        case CU_GRAPH_NODE_TYPE_HOST: return "a host node, whose callback may wait for the host thread, which "
                                             "running the graph node by node would hold";
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "an external semaphore signal node";
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "an external semaphore wait node";
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "a memory allocation node (its memory is the graph's own)";
        case CU_GRAPH_NODE_TYPE_MEM_FREE: return "a memory free node (its memory is the graph's own)";
        case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "a batch memory operation node";
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "a conditional node (its condition is set on the device)";
        default: return "a node of a type the recorder does not know";
    }
}

// A kernel node's parameters into its step; false (and `why`) when its argument bytes cannot be read.
bool fill_kernel(GraphStep &s, const CUDA_KERNEL_NODE_PARAMS &p, std::string &why) {
    s.f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
    if (!s.f) {
        why = "a kernel node without a function";
        return false;
    }
    s.grid[0] = p.gridDimX, s.grid[1] = p.gridDimY, s.grid[2] = p.gridDimZ;
    s.block[0] = p.blockDimX, s.block[1] = p.blockDimY, s.block[2] = p.blockDimZ;
    s.shared = p.sharedMemBytes;
    Selection sel = select_kernel(s.f);
    s.args.clear();
    s.layout.clear();
    // Without cuFuncGetParamInfo (drivers before 12.4) a kernel's parameters cannot be told from none.
    DRV(cuFuncGetParamInfo);
    if (!p_cuFuncGetParamInfo) {
        why = "a kernel node whose parameters the driver cannot describe (no cuFuncGetParamInfo: CUDA 12.4)";
        return false;
    }
    if (!pack_args(sel.resolved, p.kernelParams, p.extra, s.args, s.layout)) {
        why = "a kernel node whose parameters could not be read (cuFuncGetParamInfo)";
        return false;
    }
    s.selected = sel.selected;
    s.name = sel.selected ? sel.name : "";
    s.key = sel.selected ? instance_key(s.grid, s.block, s.shared, s.args) : 0;
    return true;
}

// The launch attributes a kernel node carries that running it alone must repeat, or refuse.
bool kernel_attributes(GraphStep &s, CUgraphNode node, std::string &why) {
    DRV(cuGraphKernelNodeGetAttribute);
    if (!p_cuGraphKernelNodeGetAttribute) return true;  // a driver before attributes: none set
    CUkernelNodeAttrValue v;
    memset(&v, 0, sizeof v);
    if (p_cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v) == CUDA_SUCCESS &&
        v.deviceUpdatableKernelNode.deviceUpdatable) {
        why = "a device-updatable kernel node (the device may change its parameters)";
        return false;
    }
    memset(&v, 0, sizeof v);
    if (p_cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v) == CUDA_SUCCESS)
        s.cooperative = v.cooperative != 0;
    memset(&v, 0, sizeof v);
    if (p_cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS)
        s.cluster[0] = v.clusterDim.x, s.cluster[1] = v.clusterDim.y, s.cluster[2] = v.clusterDim.z;
    return true;
}

// The graph's nodes and edges, nodes in one topological order (among the ready nodes, the first in
// the driver's order: the same graph gives the same order, which cuGraphExecUpdate's pairing needs).
bool topological_nodes(CUgraph graph, std::vector<CUgraphNode> &order, std::string &why) {
    DRV(cuGraphGetNodes);
    DRV(cuGraphGetEdges_v2);
    using edges_v1_t = CUresult (*)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *);
    static auto edges_v1 = driver_fn<edges_v1_t>("cuGraphGetEdges");
    size_t n = 0, e = 0;
    if (!p_cuGraphGetNodes || p_cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) {
        why = "its nodes could not be listed (cuGraphGetNodes)";
        return false;
    }
    std::vector<CUgraphNode> nodes(n);
    if (n && p_cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) {
        why = "its nodes could not be listed (cuGraphGetNodes)";
        return false;
    }
    std::vector<CUgraphNode> from, to;
    auto list_edges = [&](bool count_only) {
        if (p_cuGraphGetEdges_v2) {
            std::vector<CUgraphEdgeData> data(count_only ? 0 : e);  // programmatic edges: order them like any
            return p_cuGraphGetEdges_v2(graph, count_only ? nullptr : from.data(), count_only ? nullptr : to.data(),
                                        count_only ? nullptr : data.data(), &e);
        }
        return edges_v1 ? edges_v1(graph, count_only ? nullptr : from.data(), count_only ? nullptr : to.data(), &e)
                        : CUDA_ERROR_NOT_FOUND;
    };
    if (list_edges(true) != CUDA_SUCCESS) {
        why = "its edges could not be listed (cuGraphGetEdges)";
        return false;
    }
    from.resize(e), to.resize(e);
    if (e && list_edges(false) != CUDA_SUCCESS) {
        why = "its edges could not be listed (cuGraphGetEdges)";
        return false;
    }
    std::unordered_map<CUgraphNode, size_t> index;
    for (size_t i = 0; i < n; ++i) index[nodes[i]] = i;
    std::vector<size_t> waiting(n, 0);
    std::vector<std::vector<size_t>> after(n);
    for (size_t k = 0; k < e; ++k) {
        auto a = index.find(from[k]), b = index.find(to[k]);
        if (a == index.end() || b == index.end()) continue;
        after[a->second].push_back(b->second);
        waiting[b->second]++;
    }
    std::set<size_t> ready;
    for (size_t i = 0; i < n; ++i)
        if (!waiting[i]) ready.insert(i);
    while (!ready.empty()) {
        size_t i = *ready.begin();
        ready.erase(ready.begin());
        order.push_back(nodes[i]);
        for (size_t j : after[i])
            if (--waiting[j] == 0) ready.insert(j);
    }
    if (order.size() != n) {
        why = "its edges form a cycle";
        return false;
    }
    return true;
}

// Read `graph` into `plan` (child graphs inlined); stops at the first node that cannot run alone,
// with plan.unsupported saying why.
void read_graph(CUgraph graph, GraphPlan &plan, int depth = 0) {
    DRV(cuGraphNodeGetType);
    DRV(cuGraphKernelNodeGetParams_v2);
    DRV(cuGraphMemcpyNodeGetParams);
    DRV(cuGraphMemsetNodeGetParams);
    DRV(cuGraphChildGraphNodeGetGraph);
    DRV(cuGraphEventRecordNodeGetEvent);
    DRV(cuGraphEventWaitNodeGetEvent);
    std::vector<CUgraphNode> order;
    if (depth > 16) {
        plan.unsupported = "child graphs nested more than 16 deep";
        return;
    }
    if (!p_cuGraphNodeGetType || !topological_nodes(graph, order, plan.unsupported)) {
        if (plan.unsupported.empty()) plan.unsupported = "the driver has no cuGraphNodeGetType";
        return;
    }
    for (CUgraphNode node : order) {
        GraphStep s;
        s.node = node;
        if (p_cuGraphNodeGetType(node, &s.type) != CUDA_SUCCESS) {
            plan.unsupported = "a node's type could not be read (cuGraphNodeGetType)";
            return;
        }
        bool read = false;
        switch (s.type) {
            case CU_GRAPH_NODE_TYPE_KERNEL: {
                CUDA_KERNEL_NODE_PARAMS p = {};
                read = p_cuGraphKernelNodeGetParams_v2 && p_cuGraphKernelNodeGetParams_v2(node, &p) == CUDA_SUCCESS;
                if (read && (!fill_kernel(s, p, plan.unsupported) || !kernel_attributes(s, node, plan.unsupported)))
                    return;
                plan.any_selected |= s.selected;
                break;
            }
            case CU_GRAPH_NODE_TYPE_MEMCPY:
                read = p_cuGraphMemcpyNodeGetParams && p_cuGraphMemcpyNodeGetParams(node, &s.copy) == CUDA_SUCCESS;
                break;
            case CU_GRAPH_NODE_TYPE_MEMSET:
                read = p_cuGraphMemsetNodeGetParams && p_cuGraphMemsetNodeGetParams(node, &s.set) == CUDA_SUCCESS;
                break;
            case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
                read = p_cuGraphEventRecordNodeGetEvent &&
                       p_cuGraphEventRecordNodeGetEvent(node, &s.event) == CUDA_SUCCESS;
                break;
            case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
                read = p_cuGraphEventWaitNodeGetEvent && p_cuGraphEventWaitNodeGetEvent(node, &s.event) == CUDA_SUCCESS;
                break;
            case CU_GRAPH_NODE_TYPE_EMPTY:
                read = true;
                break;
            case CU_GRAPH_NODE_TYPE_GRAPH: {
                CUgraph child = nullptr;
                if (!p_cuGraphChildGraphNodeGetGraph || p_cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS) {
                    plan.unsupported = "a child graph node whose graph could not be read";
                    return;
                }
                size_t begin = plan.steps.size();
                read_graph(child, plan, depth + 1);
                if (!plan.unsupported.empty()) return;
                plan.children.push_back(ChildSteps{node, begin, plan.steps.size()});
                continue;  // its nodes are in the plan, not the node itself
            }
            default:  // plan_graph still notes its kernels, for the counts and the warning
                plan.unsupported = node_type_name(s.type);
                return;
        }
        if (!read) {
            plan.unsupported = "a node's parameters could not be read";
            return;
        }
        plan.steps.push_back(std::move(s));
    }
}

// The kernels a graph runs, selected ones only, also in a graph that cannot run node by node (its
// launches are counted for them).
void selected_kernel_nodes(CUgraph graph, std::vector<GraphStep> &out, int depth = 0) {
    DRV(cuGraphGetNodes);
    DRV(cuGraphNodeGetType);
    DRV(cuGraphKernelNodeGetParams_v2);
    DRV(cuGraphChildGraphNodeGetGraph);
    size_t n = 0;
    if (depth > 16 || !p_cuGraphGetNodes || !p_cuGraphNodeGetType ||
        p_cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS)
        return;
    std::vector<CUgraphNode> nodes(n);
    if (n && p_cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type;
        if (p_cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
        CUgraph child = nullptr;
        CUDA_KERNEL_NODE_PARAMS p = {};
        GraphStep s;
        std::string why;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH && p_cuGraphChildGraphNodeGetGraph &&
            p_cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) {
            selected_kernel_nodes(child, out, depth + 1);
        } else if (type == CU_GRAPH_NODE_TYPE_KERNEL && p_cuGraphKernelNodeGetParams_v2 &&
                   p_cuGraphKernelNodeGetParams_v2(node, &p) == CUDA_SUCCESS) {
            CUfunction f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
            Selection sel = f ? select_kernel(f) : Selection{"", nullptr, false};
            if (!sel.selected) continue;
            s.type = type, s.node = node, s.f = f, s.selected = true, s.name = sel.name;
            out.push_back(std::move(s));
        }
    }
}

// MNEME_RECORD_GRAPHS=0: no graph is run node by node (its kernels are counted, as before graphs were
// recorded), should running them so ever change an application's behaviour.
bool graphs_run_by_node() {
    static const bool on = [] {
        const char *v = getenv("MNEME_RECORD_GRAPHS");
        return !(v && strcmp(v, "0") == 0);
    }();
    return on;
}

// The plan of a graph instantiated with `flags` (no lock held: it asks the driver).
GraphPlan plan_graph(CUgraph graph, unsigned long long flags) {
    GraphPlan plan;
    plan.flags = flags;
    // Most graphs hold no selected kernel (a recording selects one or a few): those are not read.
    selected_kernel_nodes(graph, plan.steps);
    if (plan.steps.empty()) return plan;
    plan.steps.clear();
    if (graphs_run_by_node())
        read_graph(graph, plan);
    else
        plan.unsupported = "MNEME_RECORD_GRAPHS=0";
    if (plan.unsupported.empty() && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
        plan.unsupported = "instantiated for launches from the device (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)";
    if (!plan.unsupported.empty()) {  // never run node by node: only its selected kernels, to count
        plan.steps.clear();
        selected_kernel_nodes(graph, plan.steps);
        plan.any_selected = !plan.steps.empty();
    }
    return plan;
}

// Each selected node's counts and ordinal, so that a launch counts it without looking up its name
// (mu() held; after every change of the plan's steps).
void bind_counts(GraphPlan &plan) {
    std::map<std::string, long> before;
    for (GraphStep &s : plan.steps) {
        if (!s.selected) continue;
        s.kc = &counts()[s.name];
        s.ordinal = before[s.name]++;
    }
}

void note_graph(CUresult r, CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    if (r != CUDA_SUCCESS || !exec || !tracking()) return;
    GraphPlan plan = plan_graph(graph, flags);
    std::lock_guard<std::mutex> lock(mu());
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) device_launch_graphs = true;
    bind_counts(plan);
    if (plan.any_selected)
        graph_plans()[*exec] = std::move(plan);
    else
        graph_plans().erase(*exec);  // a handle reused from a destroyed exec
}

CUresult w_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    CUresult r = resolve_real(real_graphs().instantiate, "cuGraphInstantiateWithFlags")(exec, graph, flags);
    note_graph(r, exec, graph, flags);
    return r;
}

// cuGraphInstantiate before CUDA 12 (cuGetProcAddress below version 12000, or cuGraphInstantiate_v2 by name).
CUresult instantiate_v1(graph_instantiate_v1_t fn, CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                        char *log, size_t log_size) {
    if (!fn) return CUDA_ERROR_NOT_FOUND;
    CUresult r = fn(exec, graph, error_node, log, log_size);
    note_graph(r, exec, graph, 0);
    return r;
}

CUresult w_graph_instantiate_v1(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t size) {
    return instantiate_v1(real_graphs().instantiate_v1, exec, graph, error_node, log, size);
}

CUresult w_graph_instantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t size) {
    return instantiate_v1(resolve_real(real_graphs().instantiate_v2, "cuGraphInstantiate_v2"), exec, graph, error_node,
                          log, size);
}

CUresult w_graph_instantiate_params(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult r = resolve_real(real_graphs().instantiate_params, "cuGraphInstantiateWithParams")(exec, graph, params);
    note_graph(r, exec, graph, params ? params->flags : 0);
    return r;
}

CUresult w_graph_instantiate_params_ptsz(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    auto fn = resolve_real(real_graphs().instantiate_params_ptsz, "cuGraphInstantiateWithParams_ptsz");
    CUresult r = fn(exec, graph, params);
    note_graph(r, exec, graph, params ? params->flags : 0);
    return r;
}

CUresult w_graph_exec_destroy(CUgraphExec exec) {
    CUresult r = resolve_real(real_graphs().destroy, "cuGraphExecDestroy")(exec);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        graph_plans().erase(exec);
    }
    return r;
}
