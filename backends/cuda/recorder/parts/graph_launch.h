// ---- CUDA graphs: a launch ------------------------------------------------------------------------
// cuGraphLaunch of a graph whose plan (graphs.h) holds a kernel node the recorder still wants to
// record runs the plan instead: node by node, in its order, on the launch's stream, the kernel nodes
// through record_launch (so they are selected, counted, recorded and timed as direct launches are),
// the other nodes as the equivalent stream calls. The order is one the graph allows, the stream
// keeps it, and everything queued on the stream before the launch runs first and everything after
// it later, as around the graph. Once no node wants recording, the launch is the driver's
// cuGraphLaunch again, its selected kernel nodes counted as occurrences of their argument sets.

// Whether a launch of `plan` has a kernel node that admit() would take to record (mu() held). Nodes
// of the same launch before it may take an argument set first, which this does not foresee: it may
// say yes where admit() then says no, never the other way.
bool graph_wants_recording(const GraphPlan &plan) {
    if (disabled) return false;
    const Config &c = config();
    for (const GraphStep &s : plan.steps) {
        if (!s.selected || !s.enabled) continue;
        const KernelCounts &kc = *s.kc;
        if (kc.seen + s.ordinal >= c.skip && !kc.instances.count(s.key) &&
            (long)kc.instances.size() < c.max_per_kernel)
            return true;
    }
    return false;
}

// A launch through the driver's cuGraphLaunch of a plan with nothing left to record: each selected
// kernel node is an occurrence of its argument set, as a direct launch of it would be (mu() held).
void count_graph_launch(const GraphPlan &plan) {
    for (const GraphStep &s : plan.steps) {
        if (!s.selected || !s.enabled) continue;
        long index = 0;
        if (admit(*s.kc, s.key, index) == Admission::Record) s.kc->instances.erase(s.key);  // wants said no
    }
}

// A launch of a graph that cannot run node by node: its selected kernels' nodes are counted as
// launches inside graphs, with why, and the first of each kernel and reason warns (mu() held).
void count_unrecordable(const GraphPlan &plan, const std::string &why) {
    std::string reason = "inside a CUDA graph the recorder cannot run node by node: " + why;
    for (const GraphStep &s : plan.steps) {
        if (!s.selected) continue;
        s.kc->graph_launches++;
        s.kc->unrecorded[reason]++;
        warn_once("graph " + s.name + " " + why,
                  "kernel %s runs inside a CUDA graph (cuGraphLaunch) that the recorder cannot run node by node: "
                  "%s. Its launches there are counted, not recorded; record it where the application launches it "
                  "directly, or without CUDA graphs (PyTorch without torch.cuda.graphs or "
                  "mode=\"reduce-overhead\")",
                  s.name.c_str(), why.c_str());
    }
}

// A kernel node, launched alone on `stream` through the recorder's launch path.
CUresult run_kernel_step(const GraphStep &s, CUstream stream) {
    ensure_plain();
    std::string args = s.args;  // the launch reads its parameters from this copy
    std::vector<void *> params;
    for (auto &p : s.layout) params.push_back(&args[p.first]);
    void **kernel_params = params.empty() ? nullptr : params.data();
    // A node whose arguments came as one buffer, of a kernel whose layout was not listed: as that buffer.
    size_t size = args.size();
    void *buffer[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args[0], CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                      CU_LAUNCH_PARAM_END};
    void **extra = params.empty() && !args.empty() ? buffer : nullptr;
    Launch l{{s.grid[0], s.grid[1], s.grid[2]}, {s.block[0], s.block[1], s.block[2]}, s.shared, stream};
    l.cooperative = s.cooperative;
    for (int i = 0; i < 3; ++i) l.cluster[i] = s.cluster[i];
    auto run = [&]() -> CUresult {
        if (!s.cooperative && !s.cluster[0]) {
            if (!real().launch) return CUDA_ERROR_NOT_FOUND;
            return real().launch(s.f, s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2], s.shared,
                                 stream, kernel_params, extra);
        }
        // The node's attributes, as cuLaunchKernelEx takes them.
        CUlaunchAttribute attrs[2];
        memset(attrs, 0, sizeof attrs);
        unsigned n = 0;
        if (s.cooperative) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            attrs[n++].value.cooperative = 1;
        }
        if (s.cluster[0]) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = s.cluster[0], attrs[n].value.clusterDim.y = s.cluster[1];
            attrs[n++].value.clusterDim.z = s.cluster[2];
        }
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = s.grid[0], cfg.gridDimY = s.grid[1], cfg.gridDimZ = s.grid[2];
        cfg.blockDimX = s.block[0], cfg.blockDimY = s.block[1], cfg.blockDimZ = s.block[2];
        cfg.sharedMemBytes = s.shared;
        cfg.hStream = stream;
        cfg.attrs = attrs;
        cfg.numAttrs = n;
        if (!real().launch_ex) return CUDA_ERROR_NOT_FOUND;
        return real().launch_ex(&cfg, s.f, kernel_params, extra);
    };
    return record_launch(s.f, l, kernel_params, extra, run);
}

// A memset node as the stream call that sets the same elements.
CUresult run_memset_step(const CUDA_MEMSET_NODE_PARAMS &m, CUstream stream) {
    DRV(cuMemsetD8Async);
    DRV(cuMemsetD16Async);
    DRV(cuMemsetD32Async);
    DRV(cuMemsetD2D8Async);
    DRV(cuMemsetD2D16Async);
    DRV(cuMemsetD2D32Async);
    bool rows = m.height > 1;  // the pitch is unused for one row
    switch (m.elementSize) {
        case 1:
            return rows ? p_cuMemsetD2D8Async(m.dst, m.pitch, (unsigned char)m.value, m.width, m.height, stream)
                        : p_cuMemsetD8Async(m.dst, (unsigned char)m.value, m.width, stream);
        case 2:
            return rows ? p_cuMemsetD2D16Async(m.dst, m.pitch, (unsigned short)m.value, m.width, m.height, stream)
                        : p_cuMemsetD16Async(m.dst, (unsigned short)m.value, m.width, stream);
        case 4:
            return rows ? p_cuMemsetD2D32Async(m.dst, m.pitch, m.value, m.width, m.height, stream)
                        : p_cuMemsetD32Async(m.dst, m.value, m.width, stream);
        default: return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult run_step(const GraphStep &s, CUstream stream) {
    DRV(cuMemcpy3DAsync_v2);
    DRV(cuEventRecord);
    DRV(cuStreamWaitEvent);
    switch (s.type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: return run_kernel_step(s, stream);
        case CU_GRAPH_NODE_TYPE_MEMCPY: {
            CUDA_MEMCPY3D copy = s.copy;
            return p_cuMemcpy3DAsync_v2 ? p_cuMemcpy3DAsync_v2(&copy, stream) : CUDA_ERROR_NOT_FOUND;
        }
        case CU_GRAPH_NODE_TYPE_MEMSET: return run_memset_step(s.set, stream);
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return p_cuEventRecord(s.event, stream);
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return p_cuStreamWaitEvent(stream, s.event, 0);
        default: return CUDA_SUCCESS;  // an empty node: an ordering point, which the stream is already
    }
}

// Run a launch of `exec` as its plan's steps. A step that fails ends the launch with its error (the
// graph's launch fails), and the graph is never run so again.
CUresult run_plan(CUgraphExec exec, const std::vector<GraphStep> &steps, CUstream stream) {
    for (size_t i = 0; i < steps.size(); ++i) {
        if (!steps[i].enabled) continue;
        CUresult r = run_step(steps[i], stream);
        if (r == CUDA_SUCCESS) continue;
        std::lock_guard<std::mutex> lock(mu());
        auto it = graph_plans().find(exec);
        if (it != graph_plans().end()) {
            std::string why = std::string("one of its nodes failed when run alone (") + error_name(r) + ")";
            warn("a launch of a CUDA graph run node by node failed at node %zu of %zu (%s); the graph is launched "
                 "by the driver from now on", i + 1, steps.size(), error_name(r));
            it->second.unsupported = why;
        }
        return r;
    }
    return CUDA_SUCCESS;
}

// Whether this launch of `exec` runs node by node (its steps into `steps`), else it is the driver's,
// counted here (takes mu(); the launch itself is made without it).
bool graph_steps_to_run(CUgraphExec exec, CUstream stream, std::vector<GraphStep> &steps) {
    std::lock_guard<std::mutex> lock(mu());
    auto it = graph_plans().find(exec);
    if (it == graph_plans().end()) return false;
    // A launch into a stream being captured adds the graph to that capture: it runs, and is counted,
    // when the captured graph is launched.
    DRV(cuStreamIsCapturing);
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!p_cuStreamIsCapturing || p_cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
        capture != CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    const GraphPlan &plan = it->second;
    if (!plan.unsupported.empty() || device_launch_graphs) {
        count_unrecordable(plan, !plan.unsupported.empty()
                                     ? plan.unsupported
                                     : "the process has a graph instantiated for launches from the device, which "
                                       "only a kernel running in a graph may launch");
        return false;
    }
    if (!graph_wants_recording(plan) || capture_in_progress()) {  // a capture: recorded at a later launch
        count_graph_launch(plan);
        return false;
    }
    steps = plan.steps;
    return true;
}

// `s` is the stream the driver's entry point takes; `stream` the one the recorder's calls go to (the
// per-thread default stream named, for cuGraphLaunch_ptsz).
CUresult graph_launch(graph_launch_t real_fn, CUgraphExec exec, CUstream s, CUstream stream) {
    auto driver_launch = [&] { return run_shared([&] { return real_fn(exec, s); }); };
    if (!tracking() || in_recorder || disabled) return driver_launch();
    park_tick();
    std::vector<GraphStep> steps;
    if (!graph_steps_to_run(exec, stream, steps)) return driver_launch();
    return run_plan(exec, steps, stream);
}

CUresult w_graph_launch(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch, "cuGraphLaunch"), exec, s, s);
}

CUresult w_graph_launch_ptsz(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch_ptsz, "cuGraphLaunch_ptsz"), exec, s, per_thread(s));
}
