// ---- CUDA graphs ----------------------------------------------------------------------------------
// Kernel nodes are not recorded. At instantiation the recorder notes which selected kernels a
// graph holds (child graphs included); each cuGraphLaunch of it counts one launch per node
// (counts-<pid>.json "graph_launches"), and the first one warns, naming the kernel.

using graph_instantiate_t = CUresult (*)(CUgraphExec *, CUgraph, unsigned long long);
using graph_instantiate_params_t = CUresult (*)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
using graph_launch_t = CUresult (*)(CUgraphExec, CUstream);

struct RealGraphs {
    graph_instantiate_t instantiate = nullptr;
    graph_instantiate_params_t instantiate_params = nullptr, instantiate_params_ptsz = nullptr;
    graph_launch_t launch = nullptr, launch_ptsz = nullptr;
};

RealGraphs &real_graphs() {
    static auto *r = new RealGraphs();
    return *r;
}

std::unordered_map<void *, std::vector<std::string>> &graph_kernels() {  // CUgraphExec -> selected kernel nodes
    static auto *m = new std::unordered_map<void *, std::vector<std::string>>();
    return *m;
}

void selected_nodes(CUgraph graph, std::vector<std::string> &names, int depth = 0) {
    DRV(cuGraphGetNodes);
    DRV(cuGraphNodeGetType);
    DRV(cuGraphKernelNodeGetParams_v2);
    DRV(cuGraphChildGraphNodeGetGraph);
    size_t n = 0;
    if (depth > 8 || !p_cuGraphGetNodes || p_cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || !n) return;
    std::vector<CUgraphNode> nodes(n);
    if (p_cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type;
        if (p_cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH && p_cuGraphChildGraphNodeGetGraph) {
            CUgraph child = nullptr;
            if (p_cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) selected_nodes(child, names, depth + 1);
        } else if (type == CU_GRAPH_NODE_TYPE_KERNEL && p_cuGraphKernelNodeGetParams_v2) {
            CUDA_KERNEL_NODE_PARAMS params = {};
            if (p_cuGraphKernelNodeGetParams_v2(node, &params) != CUDA_SUCCESS) continue;
            CUfunction f = params.func ? params.func : reinterpret_cast<CUfunction>(params.kern);
            if (!f) continue;
            Selection sel = select_kernel(f);
            if (sel.selected) names.push_back(sel.name);
        }
    }
}

void note_graph(CUresult r, CUgraphExec *exec, CUgraph graph) {
    if (r != CUDA_SUCCESS || !exec || !tracking()) return;
    std::vector<std::string> names;
    selected_nodes(graph, names);
    std::lock_guard<std::mutex> lock(mu());
    if (names.empty())
        graph_kernels().erase(*exec);
    else
        graph_kernels()[*exec] = names;
}

CUresult w_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    CUresult r = resolve_real(real_graphs().instantiate, "cuGraphInstantiateWithFlags")(exec, graph, flags);
    note_graph(r, exec, graph);
    return r;
}

CUresult w_graph_instantiate_params(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult r = resolve_real(real_graphs().instantiate_params, "cuGraphInstantiateWithParams")(exec, graph, params);
    note_graph(r, exec, graph);
    return r;
}

CUresult w_graph_instantiate_params_ptsz(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    auto fn = resolve_real(real_graphs().instantiate_params_ptsz, "cuGraphInstantiateWithParams_ptsz");
    CUresult r = fn(exec, graph, params);
    note_graph(r, exec, graph);
    return r;
}

CUresult graph_launch(graph_launch_t real_fn, CUgraphExec exec, CUstream s) {
    CUresult r = run_shared([&] { return real_fn(exec, s); });
    if (r != CUDA_SUCCESS || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    auto it = graph_kernels().find(exec);
    if (it == graph_kernels().end()) return r;
    for (const std::string &name : it->second) {
        counts()[name].graph_launches++;
        warn_once("graph " + name, "kernel %s runs inside a CUDA graph (cuGraphLaunch); launches in graphs are not "
                  "recorded, only counted. Record it where the application launches it directly (e.g. run without "
                  "CUDA graphs: PyTorch without torch.cuda.graphs or mode=\"reduce-overhead\")", name.c_str());
    }
    return r;
}

CUresult w_graph_launch(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch, "cuGraphLaunch"), exec, s);
}

CUresult w_graph_launch_ptsz(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch_ptsz, "cuGraphLaunch_ptsz"), exec, s);
}

CUresult w_getproc_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult w_getproc_v1(const char *, void **, int, cuuint64_t);

// The CUDA version a cuGetProcAddress call asked for (0 for dlsym): some names changed signature.
thread_local int getproc_version = 0;
