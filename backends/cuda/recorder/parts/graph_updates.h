// ---- CUDA graphs: updates of an executable graph -------------------------------------------------
// What changes an executable graph's nodes after instantiation, followed in its plan (graphs.h). The
// driver cannot give a node's parameters back from an executable graph, so each setter is followed
// as it passes; an update the plan cannot follow makes the graph run as a graph from then on.

// An update the plan cannot follow: the graph is not run node by node from now on (mu() held).
void plan_lost(GraphPlan &plan, const std::string &why) {
    if (!plan.unsupported.empty()) return;
    plan.unsupported = why;
    std::vector<GraphStep> kernels;
    for (GraphStep &s : plan.steps)
        if (s.selected) kernels.push_back(std::move(s));
    plan.steps = std::move(kernels);
    plan.children.clear();
    bind_counts(plan);
}

// The step of `node` in `exec`'s plan, for an update that succeeded; nullptr when the exec is not
// followed (no selected kernel) or its plan is lost (a node it does not know: the plan is lost then).
GraphStep *updated_step(CUgraphExec exec, CUgraphNode node, GraphPlan **plan_out) {
    auto it = graph_plans().find(exec);
    if (it == graph_plans().end() || !it->second.unsupported.empty()) return nullptr;
    *plan_out = &it->second;
    for (GraphStep &s : it->second.steps)
        if (s.node == node) return &s;
    plan_lost(it->second, "an update of the executable graph named a node the recorder does not know");
    return nullptr;
}

// A kernel node's new parameters (no lock held while reading them: select_kernel asks the driver).
void update_kernel_step(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS &p) {
    GraphStep fresh;
    std::string why;
    bool ok = fill_kernel(fresh, p, why);
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    GraphStep *s = updated_step(exec, node, &plan);
    if (!s) return;
    if (!ok) return plan_lost(*plan, "an update gave a kernel node parameters the recorder cannot read");
    if (s->type != CU_GRAPH_NODE_TYPE_KERNEL) return plan_lost(*plan, "an update changed a node's type");
    // Its attributes stay those of the node (an update of the parameters does not change them).
    fresh.type = s->type, fresh.node = s->node, fresh.enabled = s->enabled, fresh.cooperative = s->cooperative;
    for (int i = 0; i < 3; ++i) fresh.cluster[i] = s->cluster[i];
    *s = std::move(fresh);
    plan->any_selected = false;
    for (const GraphStep &step : plan->steps) plan->any_selected |= step.selected;
    bind_counts(*plan);
}

CUresult w_graph_exec_kernel(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
    CUresult r = resolve_real(real_graphs().kernel, "cuGraphExecKernelNodeSetParams_v2")(exec, node, p);
    if (r == CUDA_SUCCESS && p && tracking()) update_kernel_step(exec, node, *p);
    return r;
}

CUresult w_graph_exec_kernel_v1(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
    CUresult r = resolve_real(real_graphs().kernel_v1, "cuGraphExecKernelNodeSetParams")(exec, node, p);
    if (r != CUDA_SUCCESS || !p || !tracking()) return r;
    CUDA_KERNEL_NODE_PARAMS k = {};
    memcpy(&k, p, sizeof *p);  // the v1 struct is the v2 one's beginning
    update_kernel_step(exec, node, k);
    return r;
}

CUresult w_graph_exec_memcpy(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p, CUcontext ctx) {
    CUresult r = resolve_real(real_graphs().memcpy, "cuGraphExecMemcpyNodeSetParams")(exec, node, p, ctx);
    if (r != CUDA_SUCCESS || !p || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    if (GraphStep *s = updated_step(exec, node, &plan)) s->copy = *p;
    return r;
}

CUresult w_graph_exec_memset(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
    CUresult r = resolve_real(real_graphs().memset, "cuGraphExecMemsetNodeSetParams")(exec, node, p, ctx);
    if (r != CUDA_SUCCESS || !p || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    if (GraphStep *s = updated_step(exec, node, &plan)) s->set = *p;
    return r;
}

CUresult set_event(graph_exec_event_t fn, CUgraphExec exec, CUgraphNode node, CUevent event) {
    if (!fn) return CUDA_ERROR_NOT_FOUND;
    CUresult r = fn(exec, node, event);
    if (r != CUDA_SUCCESS || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    if (GraphStep *s = updated_step(exec, node, &plan)) s->event = event;
    return r;
}

CUresult w_graph_exec_record_event(CUgraphExec exec, CUgraphNode node, CUevent event) {
    return set_event(resolve_real(real_graphs().record_event, "cuGraphExecEventRecordNodeSetEvent"), exec, node, event);
}

CUresult w_graph_exec_wait_event(CUgraphExec exec, CUgraphNode node, CUevent event) {
    return set_event(resolve_real(real_graphs().wait_event, "cuGraphExecEventWaitNodeSetEvent"), exec, node, event);
}

CUresult w_graph_node_enable(CUgraphExec exec, CUgraphNode node, unsigned enabled) {
    CUresult r = resolve_real(real_graphs().enable, "cuGraphNodeSetEnabled")(exec, node, enabled);
    if (r != CUDA_SUCCESS || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    if (GraphStep *s = updated_step(exec, node, &plan)) s->enabled = enabled != 0;
    return r;
}

// A child graph node's new graph (same shape, other parameters): its steps are read again.
CUresult w_graph_exec_child(CUgraphExec exec, CUgraphNode node, CUgraph child) {
    CUresult r = resolve_real(real_graphs().child, "cuGraphExecChildGraphNodeSetParams")(exec, node, child);
    if (r != CUDA_SUCCESS || !tracking()) return r;
    {
        std::lock_guard<std::mutex> lock(mu());
        auto it = graph_plans().find(exec);
        if (it == graph_plans().end() || !it->second.unsupported.empty()) return r;
    }
    GraphPlan sub;
    read_graph(child, sub);  // no lock held: it asks the driver
    std::lock_guard<std::mutex> lock(mu());
    auto it = graph_plans().find(exec);
    if (it == graph_plans().end() || !it->second.unsupported.empty()) return r;
    GraphPlan &plan = it->second;
    const ChildSteps *range = nullptr;
    for (const ChildSteps &c : plan.children)
        if (c.node == node) range = &c;
    if (!range) {
        plan_lost(plan, "cuGraphExecChildGraphNodeSetParams named a node the recorder does not know");
        return r;
    }
    if (!sub.unsupported.empty()) {
        plan_lost(plan, sub.unsupported);
        return r;
    }
    bool same = sub.steps.size() == range->end - range->begin;
    for (size_t i = 0; same && i < sub.steps.size(); ++i) same = sub.steps[i].type == plan.steps[range->begin + i].type;
    if (!same) {
        plan_lost(plan, "cuGraphExecChildGraphNodeSetParams gave a child graph of another shape");
        return r;
    }
    for (size_t i = 0; i < sub.steps.size(); ++i) {
        GraphStep &old = plan.steps[range->begin + i];
        sub.steps[i].node = old.node;
        sub.steps[i].enabled = old.enabled;
        old = std::move(sub.steps[i]);
    }
    plan.any_selected = false;
    for (const GraphStep &step : plan.steps) plan.any_selected |= step.selected;
    bind_counts(plan);
    return r;
}

// cuGraphExecNodeSetParams (CUDA 12.2): the kinds the specific entry points above update.
CUresult w_graph_exec_node(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p) {
    CUresult r = resolve_real(real_graphs().node, "cuGraphExecNodeSetParams")(exec, node, p);
    if (r != CUDA_SUCCESS || !p || !tracking()) return r;
    if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        CUDA_KERNEL_NODE_PARAMS k = {};
        const CUDA_KERNEL_NODE_PARAMS_v3 &v = p->kernel;
        k.func = v.func, k.kern = v.kern, k.ctx = v.ctx, k.kernelParams = v.kernelParams, k.extra = v.extra;
        k.gridDimX = v.gridDimX, k.gridDimY = v.gridDimY, k.gridDimZ = v.gridDimZ;
        k.blockDimX = v.blockDimX, k.blockDimY = v.blockDimY, k.blockDimZ = v.blockDimZ;
        k.sharedMemBytes = v.sharedMemBytes;
        update_kernel_step(exec, node, k);
        return r;
    }
    std::lock_guard<std::mutex> lock(mu());
    GraphPlan *plan = nullptr;
    GraphStep *s = updated_step(exec, node, &plan);
    if (!s) return r;
    switch (p->type) {
        case CU_GRAPH_NODE_TYPE_MEMCPY: s->copy = p->memcpy.copyParams; break;
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            const CUDA_MEMSET_NODE_PARAMS_v2 &m = p->memset;
            s->set.dst = m.dst, s->set.pitch = m.pitch, s->set.value = m.value;
            s->set.elementSize = m.elementSize, s->set.width = m.width, s->set.height = m.height;
            break;
        }
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD: s->event = p->eventRecord.event; break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: s->event = p->eventWait.event; break;
        default: plan_lost(*plan, "cuGraphExecNodeSetParams updated a node the recorder does not follow"); break;
    }
    return r;
}

// cuGraphExecUpdate: the exec now runs `graph`'s parameters with its own topology. The new plan is
// read from `graph`; its nodes pair with the old plan's by position (both in the same order), and
// keep the old handles, by which later updates of the exec name them.
void follow_exec_update(CUgraphExec exec, CUgraph graph) {
    unsigned long long flags = 0;
    {
        std::lock_guard<std::mutex> lock(mu());
        auto it = graph_plans().find(exec);
        if (it != graph_plans().end()) flags = it->second.flags;
    }
    GraphPlan plan = plan_graph(graph, flags);
    std::lock_guard<std::mutex> lock(mu());
    auto it = graph_plans().find(exec);
    if (it != graph_plans().end() && plan.unsupported.empty()) {
        const GraphPlan &old = it->second;
        bool paired = old.unsupported.empty() && old.steps.size() == plan.steps.size() &&
                      old.children.size() == plan.children.size();
        for (size_t i = 0; paired && i < plan.steps.size(); ++i) paired = old.steps[i].type == plan.steps[i].type;
        for (size_t i = 0; paired && i < plan.children.size(); ++i)
            paired = old.children[i].begin == plan.children[i].begin && old.children[i].end == plan.children[i].end;
        if (!paired) {
            plan_lost(plan, "cuGraphExecUpdate paired nodes in a way the recorder could not follow");
        } else {
            for (size_t i = 0; i < plan.steps.size(); ++i) {
                plan.steps[i].node = old.steps[i].node;
                plan.steps[i].enabled = old.steps[i].enabled;
            }
            for (size_t i = 0; i < plan.children.size(); ++i) plan.children[i].node = old.children[i].node;
        }
    }
    bind_counts(plan);
    if (plan.any_selected)
        graph_plans()[exec] = std::move(plan);
    else
        graph_plans().erase(exec);
}

CUresult w_graph_exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info) {
    CUresult r = resolve_real(real_graphs().update, "cuGraphExecUpdate_v2")(exec, graph, info);
    if (r == CUDA_SUCCESS && tracking()) follow_exec_update(exec, graph);
    return r;
}

CUresult w_graph_exec_update_v1(CUgraphExec exec, CUgraph graph, CUgraphNode *error_node,
                                CUgraphExecUpdateResult *result) {
    CUresult r = resolve_real(real_graphs().update_v1, "cuGraphExecUpdate")(exec, graph, error_node, result);
    if (r == CUDA_SUCCESS && tracking()) follow_exec_update(exec, graph);
    return r;
}
