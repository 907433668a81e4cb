// ---- exported symbols ---------------------------------------------------------------------------

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void *dlsym(void *handle, const char *name) {
    void *fn = real_dlsym()(handle, name);
    if (!fn || strncmp(name, "cu", 2) != 0) return fn;
    if (strcmp(name, "cuGetProcAddress_v2") == 0) {
        real().getproc_v2 = reinterpret_cast<getproc_v2_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v2);
    }
    if (strcmp(name, "cuGetProcAddress") == 0) {
        real().getproc_v1 = reinterpret_cast<getproc_v1_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v1);
    }
    return wrap(name, fn, 0);
}

// The plain driver symbols, for programs linked against libcuda (the dynamic linker binds these
// before libcuda's). cuda.h's macros give them their versioned names (cuMemAlloc_v2, ...).
EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size) { return w_alloc(dptr, size); }

EXPORT CUresult cuMemFree(CUdeviceptr ptr) { return w_free(ptr); }

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
    return w_launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    return w_launch_ex(cfg, f, params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, CUstream s, void **params) {
    return w_coop(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

// The per-thread-default-stream flavours by name (asm labels: cuda.h's macros rename the plain ones).
EXPORT CUresult mneme_export_launch_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                                         void **extra) __asm__("cuLaunchKernel_ptsz");
EXPORT CUresult mneme_export_launch_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                                         void **extra) {
    return w_launch_ptsz_plain(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult mneme_export_launch_ex_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
    __asm__("cuLaunchKernelEx_ptsz");
EXPORT CUresult mneme_export_launch_ex_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    return w_launch_ex_ptsz_plain(cfg, f, params, extra);
}

EXPORT CUresult mneme_export_coop_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shared, CUstream s, void **params)
    __asm__("cuLaunchCooperativeKernel_ptsz");
EXPORT CUresult mneme_export_coop_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shared, CUstream s, void **params) {
    return w_coop_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult mneme_export_graph_launch_ptsz(CUgraphExec exec, CUstream s) __asm__("cuGraphLaunch_ptsz");
EXPORT CUresult mneme_export_graph_launch_ptsz(CUgraphExec exec, CUstream s) { return w_graph_launch_ptsz(exec, s); }

// cuGetProcAddress called by name, by a program linked against libcuda (cuda.h names it
// cuGetProcAddress_v2; the 4-argument cuGetProcAddress is the CUDA 11 one): every entry point it
// hands out goes through wrap(), as the ones cudart gets through dlsym.
EXPORT CUresult mneme_export_getproc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status) __asm__("cuGetProcAddress_v2");
EXPORT CUresult mneme_export_getproc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status) {
    if (!real().getproc_v2) real().getproc_v2 = driver_fn<getproc_v2_t>("cuGetProcAddress_v2");
    if (!real().getproc_v2) return CUDA_ERROR_NOT_INITIALIZED;
    return w_getproc_v2(symbol, pfn, version, flags, status);
}

EXPORT CUresult mneme_export_getproc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
    __asm__("cuGetProcAddress");
EXPORT CUresult mneme_export_getproc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    if (!real().getproc_v1) real().getproc_v1 = driver_fn<getproc_v1_t>("cuGetProcAddress");
    if (!real().getproc_v1) return CUDA_ERROR_NOT_INITIALIZED;
    return w_getproc_v1(symbol, pfn, version, flags);
}

EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return w_primary_reset(dev); }

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return w_primary_release(dev); }

EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return w_ctx_destroy(ctx); }

EXPORT CUresult cuModuleLoadData(CUmodule *mod, const void *image) { return w_module_load_data(mod, image); }

EXPORT CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned n, CUjit_option *options,
                                   void **values) {
    return w_module_load_data_ex(mod, image, n, options, values);
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *image) { return w_module_load_fatbin(mod, image); }

EXPORT CUresult cuModuleLoad(CUmodule *mod, const char *path) { return w_module_load(mod, path); }

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                                  CUlibraryOption *lo, void **lv, unsigned nl) {
    return w_library_load_data(lib, code, jo, jv, nj, lo, lv, nl);
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name) {
    return w_module_get_function(f, mod, name);
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name) {
    return w_library_get_kernel(k, lib, name);
}

EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name) {
    return w_module_get_global(dptr, bytes, mod, name);
}

EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name) {
    return w_library_get_global(dptr, bytes, lib, name);
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element) {
    return w_alloc_pitch(dptr, pitch, width, height, element);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) { return w_alloc_async(dptr, size, s); }

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return w_alloc_pool(dptr, size, pool, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream s) { return w_free_async(ptr, s); }

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
    return w_va_reserve(ptr, size, alignment, addr, flags);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return w_va_free(ptr, size); }

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    return w_mem_map(ptr, size, offset, handle, flags);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { return w_mem_unmap(ptr, size); }

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    return w_set_access(ptr, size, desc, count);
}

EXPORT CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    return w_graph_instantiate(exec, graph, flags);
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return w_graph_instantiate_params(exec, graph, params);
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return w_graph_launch(exec, s); }

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) { return w_graph_exec_destroy(exec); }

EXPORT CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) { return w_begin_capture(s, mode); }

EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                            const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode) {
    return w_begin_capture_to_graph(s, g, deps, data, n, mode);
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) { return w_end_capture(s, graph); }

EXPORT CUresult mneme_export_begin_capture_ptsz(CUstream s, CUstreamCaptureMode mode)
    __asm__("cuStreamBeginCapture_v2_ptsz");
EXPORT CUresult mneme_export_begin_capture_ptsz(CUstream s, CUstreamCaptureMode mode) {
    return w_begin_capture_ptsz(s, mode);
}

EXPORT CUresult mneme_export_begin_capture_to_graph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                         const CUgraphEdgeData *data, size_t n,
                                                         CUstreamCaptureMode mode)
    __asm__("cuStreamBeginCaptureToGraph_ptsz");
EXPORT CUresult mneme_export_begin_capture_to_graph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                         const CUgraphEdgeData *data, size_t n,
                                                         CUstreamCaptureMode mode) {
    return w_begin_capture_to_graph_ptsz(s, g, deps, data, n, mode);
}

EXPORT CUresult mneme_export_end_capture_ptsz(CUstream s, CUgraph *graph) __asm__("cuStreamEndCapture_ptsz");
EXPORT CUresult mneme_export_end_capture_ptsz(CUstream s, CUgraph *graph) { return w_end_capture_ptsz(s, graph); }

// What changes an executable graph after instantiation (cuda.h's macros give the _v2 names).
EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info) {
    return w_graph_exec_update(exec, graph, info);
}

EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
    return w_graph_exec_kernel(exec, node, p);
}

EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p,
                                               CUcontext ctx) {
    return w_graph_exec_memcpy(exec, node, p, ctx);
}

EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p,
                                               CUcontext ctx) {
    return w_graph_exec_memset(exec, node, p, ctx);
}

EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
    return w_graph_exec_record_event(exec, node, event);
}

EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
    return w_graph_exec_wait_event(exec, node, event);
}

EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
    return w_graph_exec_child(exec, node, child);
}

EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p) {
    return w_graph_exec_node(exec, node, p);
}

EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned enabled) {
    return w_graph_node_enable(exec, node, enabled);
}

// The entry points of programs built against CUDA 11 headers, by their names then (asm labels).
EXPORT CUresult mneme_export_graph_instantiate_v1(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                                                  char *log, size_t size) __asm__("cuGraphInstantiate");
EXPORT CUresult mneme_export_graph_instantiate_v1(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                                                  char *log, size_t size) {
    resolve_real(real_graphs().instantiate_v1, "cuGraphInstantiate");
    return w_graph_instantiate_v1(exec, graph, error_node, log, size);
}

EXPORT CUresult mneme_export_graph_instantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                                                  char *log, size_t size) __asm__("cuGraphInstantiate_v2");
EXPORT CUresult mneme_export_graph_instantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                                                  char *log, size_t size) {
    return w_graph_instantiate_v2(exec, graph, error_node, log, size);
}

EXPORT CUresult mneme_export_graph_exec_update_v1(CUgraphExec exec, CUgraph graph, CUgraphNode *error_node,
                                                  CUgraphExecUpdateResult *result) __asm__("cuGraphExecUpdate");
EXPORT CUresult mneme_export_graph_exec_update_v1(CUgraphExec exec, CUgraph graph, CUgraphNode *error_node,
                                                  CUgraphExecUpdateResult *result) {
    return w_graph_exec_update_v1(exec, graph, error_node, result);
}

EXPORT CUresult mneme_export_graph_exec_kernel_v1(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS_v1 *p)
    __asm__("cuGraphExecKernelNodeSetParams");
EXPORT CUresult mneme_export_graph_exec_kernel_v1(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
    return w_graph_exec_kernel_v1(exec, node, p);
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) { return w_host_alloc(pp, size, flags); }

EXPORT CUresult cuMemAllocHost(void **pp, size_t size) { return w_alloc_host(pp, size); }

EXPORT CUresult cuMemHostRegister(void *p, size_t size, unsigned flags) { return w_host_register(p, size, flags); }

EXPORT CUresult cuMemFreeHost(void *p) { return w_free_host(p); }

EXPORT CUresult cuMemHostUnregister(void *p) { return w_host_unregister(p); }

EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned flags) {
    return w_host_device_ptr(dptr, p, flags);
}


// At exit: how often each recorded kernel ran with each argument set (Occurrences), also for
// the launches past --max-recordings, how often it ran inside CUDA graphs, and its in-application
// times. Written atomically; nothing when nothing was selected.
__attribute__((destructor)) static void mneme_recorder_write_counts() {
    const Config &c = config();
    if (c.dir.empty()) return;
    std::lock_guard<std::mutex> lock(mu());
    reap_timings(true);  // the launches still in flight; lost if the application already tore its context down
    if (counts().empty()) return;
    std::string text = "{\"format\": \"mneme-cuda-counts\", \"version\": 1, \"kernels\": " + kernels_json(counts());
    // How the in-application times were taken: behind the gate (no host submission in them) or not,
    // and why not; alone on the device (exclusive) or beside the rest of the application (shared).
    const TimingGate &g = timing_gate();
    text += ", \"app_timing\": {\"gated\": " + std::to_string(g.gated) + ", \"ungated\": " +
            std::to_string(g.ungated) + ", \"late\": " + std::to_string(g.late) +
            ", \"exclusive\": " + std::to_string(g.exclusive) + ", \"shared\": " + std::to_string(g.shared) +
            ", \"ungated_because\": " + json_string(g.ungated_because) + ", \"cupti\": " + std::to_string(g.cupti) +
            ", \"cupti_missed\": " + std::to_string(g.cupti_missed) + ", \"flushed\": " + std::to_string(g.flushed) +
            ", \"events_because\": " + json_string(timer_state ? timer_state->why : "") +
            ", \"timer_parks\": " + std::to_string(timer_park().parks.load()) +
            ", \"timer_resumes\": " + std::to_string(timer_park().resumes.load()) +
            ", \"timer_park_stopped\": " + (timer_park().broken.load() ? "true" : "false") + "}}\n";
    char path[4096];
    snprintf(path, sizeof path, "%s/counts-%d.json", c.dir.c_str(), (int)getpid());
    write_atomic(path, text.data(), text.size());
}

// Whether this process records (rank selection applied); for `mneme cuda info` and the tests.
EXPORT int mneme_recorder_records() { return config().dir.empty() ? 0 : 1; }

// `mneme cuda recorder-info` and the tests read this to check which recorder is loaded.
EXPORT const char *mneme_recorder_version() { return "mneme-cuda-recorder 0.2"; }

// mneme_annotate() (include/mneme_annotate.h) and mneme.annotate.annotate() land here: the
// verification policy of the placed allocation containing `ptr`, written with every launch
// recorded from now on. 1: attached; -1: `ptr` lies in no placed allocation; -2: an invalid
// argument (one message for the first of each kind).
EXPORT int mneme_recorder_annotate(const void *ptr, const char *dtype, double threshold, int relative,
                                   const char *norm, const char *tag) {
    Annotation a;
    static bool warned_invalid = false, warned_unplaced = false;
    if (!parse_annotation(dtype, threshold, relative, norm, tag, a)) {
        std::lock_guard<std::mutex> lock(mu());
        if (warned_invalid) return -2;
        warned_invalid = true;
        warn("mneme_annotate(%p, %s, %g, %d, %s): invalid policy (dtype one of u8..u64, i8..i64, f16, bf16, f32, "
             "f64; threshold finite and >= 0; norm none, L1, L2 or Linf); ignored (later ones are not reported)",
             ptr, dtype ? dtype : "(null)", threshold, relative, norm ? norm : "(null)");
        return -2;
    }
    uint64_t addr = reinterpret_cast<uint64_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto &live = placement().live;
    auto it = live.upper_bound(addr);
    if (it == live.begin() || (--it, addr - it->first >= std::max<uint64_t>(it->second.size, 1))) {
        if (!warned_unplaced)
            warn("mneme_annotate(%p, tag '%s'): not inside an allocation the recorder placed "
                 "(cuMemAlloc/cudaMalloc); ignored (later ones are not reported)",
                 ptr, a.tag.c_str());
        warned_unplaced = true;
        return -1;
    }
    annotations()[it->first] = a;
    return 1;
}

// Host-side pieces, exported for the tests that run without a GPU: the size and kind of a
// code image as a module load sees it, and the atomic writer (0 on success, else errno).
EXPORT size_t mneme_recorder_image_size(const void *code, const char **kind) {
    size_t size = 0;
    const char *k = "";
    image_extent(code, &size, &k);
    if (kind) *kind = k;
    return size;
}

EXPORT int mneme_recorder_write_atomic(const char *path, const void *data, size_t n) {
    return write_atomic(path, data, n) ? 0 : (errno ? errno : EIO);
}

// The device variables an image defines for architecture `arch` (e.g. 90), one name per line
// into `out`; returns how many (tests).
EXPORT int mneme_recorder_image_globals(const void *code, size_t size, int arch, char *out, size_t out_len) {
    std::vector<std::string> names;
    image_globals(code, size, arch, names);
    std::string text;
    for (auto &n : names) text += n + "\n";
    if (out && out_len) {
        size_t n = std::min(text.size(), out_len - 1);
        memcpy(out, text.data(), n);
        out[n] = 0;
    }
    return (int)names.size();
}

// The pitch a row of `width` bytes gets at `alignment` when the driver cannot be asked (tests).
EXPORT uint64_t mneme_recorder_pitch(uint64_t width, uint64_t alignment) { return pitch_for(width, alignment); }

// Which of a launch's parameters (`layout`: offset, size pairs; `args` the packed buffer) point
// into the ranges (start, size pairs) of memory a recording does not hold: their indexes into
// `out` (at most `out_len`); returns how many (tests).
EXPORT size_t mneme_recorder_outside_params(const uint64_t *ranges, size_t n_ranges, const void *args,
                                            size_t args_len, const uint64_t *layout, size_t n_params,
                                            uint64_t *out, size_t out_len) {
    OutsideRanges set;
    for (size_t i = 0; i < n_ranges; ++i) set[ranges[2 * i]] = OutsideRange{ranges[2 * i + 1], "test"};
    std::vector<std::pair<size_t, size_t>> params;
    for (size_t i = 0; i < n_params; ++i) params.emplace_back(layout[2 * i], layout[2 * i + 1]);
    auto hits = outside_params(set, std::string(static_cast<const char *>(args), args_len), params);
    for (size_t k = 0; k < hits.size() && k < out_len; ++k) out[k] = hits[k].first;
    return hits.size();
}

// Apply `n` interval operations (ops[3i] = 1 add / 0 remove, ops[3i+1] start, ops[3i+2] end) to an
// empty set of the application's mapped ranges and write the result as start, end pairs into
// `out` (at most `out_pairs`); returns how many intervals it holds (tests).
EXPORT size_t mneme_recorder_intervals(const uint64_t *ops, size_t n, uint64_t *out, size_t out_pairs) {
    std::map<uint64_t, uint64_t> set;
    for (size_t i = 0; i < n; ++i)
        (ops[3 * i] ? interval_add : interval_remove)(set, ops[3 * i + 1], ops[3 * i + 2]);
    size_t k = 0;
    for (auto &iv : set) {
        if (k < out_pairs) {
            out[2 * k] = iv.first;
            out[2 * k + 1] = iv.second;
        }
        ++k;
    }
    return k;
}
