// ---- cuGetProcAddress: the wrappers handed out for the driver's entry points ---------------------

CUresult w_getproc_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult w_getproc_v1(const char *, void **, int, cuuint64_t);

// The CUDA version a cuGetProcAddress call asked for (0 for dlsym): some names changed signature.
thread_local int getproc_version = 0;

// Keep a real entry point in `slot` (a typed function pointer), from a captureless lambda.
#define KEEP(slot) [](void *fn) { auto &kept = slot; kept = reinterpret_cast<std::decay_t<decltype(kept)>>(fn); }

// One interposed driver entry point: the names it goes by, where its real address is kept, and
// our wrapper. An entry point with a per-thread-default-stream flavour has two hooks, one for
// each; a name ending in _ptsz, or the per-thread flag of cuGetProcAddress, asks for that one.
struct Hook {
    const char *names[2];  // the second: another version's name (cuMemAlloc_v2), or nullptr
    enum Stream : uint8_t { ONE, LEGACY, PER_THREAD } stream;
    bool recording_only;   // module, host-memory and graph bookkeeping: only while recording
    int min_version;       // the CUDA version from which cuGetProcAddress gives this name this signature
    void (*keep)(void *fn);
    void *wrapper;
};

const std::vector<Hook> &hooks() {
    using S = Hook::Stream;
    auto w = [](auto fn) { return reinterpret_cast<void *>(fn); };
    static const std::vector<Hook> *table = new std::vector<Hook>{
        {{"cuMemAlloc", "cuMemAlloc_v2"}, S::ONE, false, 0, KEEP(real().mem_alloc), w(&w_alloc)},
        {{"cuMemFree", "cuMemFree_v2"}, S::ONE, false, 0, KEEP(real().mem_free), w(&w_free)},
        {{"cuLaunchKernel"}, S::LEGACY, false, 0, KEEP(real().launch), w(&w_launch)},
        {{"cuLaunchKernel"}, S::PER_THREAD, false, 0, KEEP(real().launch_ptsz), w(&w_launch_ptsz)},
        {{"cuLaunchKernelEx"}, S::LEGACY, false, 0, KEEP(real().launch_ex), w(&w_launch_ex)},
        {{"cuLaunchKernelEx"}, S::PER_THREAD, false, 0, KEEP(real().launch_ex_ptsz), w(&w_launch_ex_ptsz)},
        {{"cuLaunchCooperativeKernel"}, S::LEGACY, false, 0, KEEP(real_coop), w(&w_coop)},
        {{"cuLaunchCooperativeKernel"}, S::PER_THREAD, false, 0, KEEP(real_coop_ptsz), w(&w_coop_ptsz)},
        // Context teardown: the writer drains first (wrappers.h, "context teardown").
        {{"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2"}, S::ONE, true, 0, KEEP(real_primary_reset),
         w(&w_primary_reset)},
        {{"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"}, S::ONE, true, 0, KEEP(real_primary_release),
         w(&w_primary_release)},
        {{"cuCtxDestroy", "cuCtxDestroy_v2"}, S::ONE, true, 0, KEEP(real_ctx_destroy), w(&w_ctx_destroy)},
        // Pitched, stream-ordered and managed allocations, and the application's own VMM
        // mappings: placed or tracked whether or not anything is recorded, like cuMemAlloc.
        {{"cuMemAllocManaged"}, S::ONE, false, 0, KEEP(real_memory().managed), w(&w_alloc_managed)},
        {{"cuMemAllocPitch", "cuMemAllocPitch_v2"}, S::ONE, false, 0, KEEP(real_memory().pitch), w(&w_alloc_pitch)},
        {{"cuMemAllocAsync"}, S::LEGACY, false, 0, KEEP(real_memory().async), w(&w_alloc_async)},
        {{"cuMemAllocAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().async_ptsz), w(&w_alloc_async_ptsz)},
        {{"cuMemAllocFromPoolAsync"}, S::LEGACY, false, 0, KEEP(real_memory().pool), w(&w_alloc_pool)},
        {{"cuMemAllocFromPoolAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().pool_ptsz), w(&w_alloc_pool_ptsz)},
        {{"cuMemFreeAsync"}, S::LEGACY, false, 0, KEEP(real_memory().free_async), w(&w_free_async)},
        {{"cuMemFreeAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().free_async_ptsz), w(&w_free_async_ptsz)},
        {{"cuMemAddressReserve"}, S::ONE, false, 0, KEEP(real_memory().va_reserve), w(&w_va_reserve)},
        {{"cuMemAddressFree"}, S::ONE, false, 0, KEEP(real_memory().va_free), w(&w_va_free)},
        {{"cuMemMap"}, S::ONE, false, 0, KEEP(real_memory().map), w(&w_mem_map)},
        {{"cuMemUnmap"}, S::ONE, false, 0, KEEP(real_memory().unmap), w(&w_mem_unmap)},
        {{"cuMemSetAccess"}, S::ONE, false, 0, KEEP(real_memory().set_access), w(&w_set_access)},
        {{"cuMemHostAlloc"}, S::ONE, true, 0, KEEP(real_host().host_alloc), w(&w_host_alloc)},
        {{"cuMemAllocHost", "cuMemAllocHost_v2"}, S::ONE, true, 0, KEEP(real_host().alloc_host), w(&w_alloc_host)},
        {{"cuMemHostRegister", "cuMemHostRegister_v2"}, S::ONE, true, 0, KEEP(real_host().host_register),
         w(&w_host_register)},
        {{"cuMemFreeHost"}, S::ONE, true, 0, KEEP(real_host().free_host), w(&w_free_host)},
        {{"cuMemHostUnregister"}, S::ONE, true, 0, KEEP(real_host().unregister), w(&w_host_unregister)},
        {{"cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2"}, S::ONE, true, 0,
         KEEP(real_host().device_ptr), w(&w_host_device_ptr)},
        {{"cuModuleLoadData"}, S::ONE, true, 0, KEEP(real_modules().load_data), w(&w_module_load_data)},
        {{"cuModuleLoadDataEx"}, S::ONE, true, 0, KEEP(real_modules().load_data_ex), w(&w_module_load_data_ex)},
        {{"cuModuleLoadFatBinary"}, S::ONE, true, 0, KEEP(real_modules().load_fatbin), w(&w_module_load_fatbin)},
        {{"cuModuleLoad"}, S::ONE, true, 0, KEEP(real_modules().load_file), w(&w_module_load)},
        {{"cuLibraryLoadData"}, S::ONE, true, 0, KEEP(real_modules().library_load), w(&w_library_load_data)},
        {{"cuLibraryLoadFromFile"}, S::ONE, true, 0, KEEP(real_modules().library_load_file),
         w(&w_library_load_file)},
        {{"cuModuleGetFunction"}, S::ONE, true, 0, KEEP(real_modules().get_function), w(&w_module_get_function)},
        {{"cuLibraryGetKernel"}, S::ONE, true, 0, KEEP(real_modules().get_kernel), w(&w_library_get_kernel)},
        {{"cuKernelGetFunction"}, S::ONE, true, 0, KEEP(real_modules().kernel_get_function),
         w(&w_kernel_get_function)},
        {{"cuLibraryGetModule"}, S::ONE, true, 0, KEEP(real_modules().library_get_module), w(&w_library_get_module)},
        {{"cuModuleGetGlobal", "cuModuleGetGlobal_v2"}, S::ONE, true, 0, KEEP(real_modules().module_get_global),
         w(&w_module_get_global)},
        {{"cuLibraryGetGlobal"}, S::ONE, true, 0, KEEP(real_modules().library_get_global), w(&w_library_get_global)},
        // cuGraphInstantiate at 12.0 and later is cuGraphInstantiateWithFlags.
        {{"cuGraphInstantiateWithFlags"}, S::ONE, true, 0, KEEP(real_graphs().instantiate), w(&w_graph_instantiate)},
        {{"cuGraphInstantiate"}, S::ONE, true, 12000, KEEP(real_graphs().instantiate), w(&w_graph_instantiate)},
        {{"cuGraphInstantiateWithParams"}, S::LEGACY, true, 0, KEEP(real_graphs().instantiate_params),
         w(&w_graph_instantiate_params)},
        {{"cuGraphInstantiateWithParams"}, S::PER_THREAD, true, 0, KEEP(real_graphs().instantiate_params_ptsz),
         w(&w_graph_instantiate_params_ptsz)},
        // Stream capture in progress (stream_capture.h); before 10.1 cuStreamBeginCapture took no mode.
        {{"cuStreamBeginCapture"}, S::LEGACY, true, 10010, KEEP(real_capture().begin), w(&w_begin_capture)},
        {{"cuStreamBeginCapture"}, S::PER_THREAD, true, 10010, KEEP(real_capture().begin_ptsz),
         w(&w_begin_capture_ptsz)},
        {{"cuStreamBeginCapture_v2"}, S::LEGACY, true, 0, KEEP(real_capture().begin), w(&w_begin_capture)},
        {{"cuStreamBeginCapture_v2"}, S::PER_THREAD, true, 0, KEEP(real_capture().begin_ptsz),
         w(&w_begin_capture_ptsz)},
        {{"cuStreamBeginCaptureToGraph"}, S::LEGACY, true, 0, KEEP(real_capture().to_graph),
         w(&w_begin_capture_to_graph)},
        {{"cuStreamBeginCaptureToGraph"}, S::PER_THREAD, true, 0, KEEP(real_capture().to_graph_ptsz),
         w(&w_begin_capture_to_graph_ptsz)},
        {{"cuStreamEndCapture"}, S::LEGACY, true, 0, KEEP(real_capture().end), w(&w_end_capture)},
        {{"cuStreamEndCapture"}, S::PER_THREAD, true, 0, KEEP(real_capture().end_ptsz), w(&w_end_capture_ptsz)},
        // Before 12.0, cuGraphInstantiate took an error node and a log (cuGraphInstantiate_v2 by name).
        {{"cuGraphInstantiate"}, S::ONE, true, 0, KEEP(real_graphs().instantiate_v1), w(&w_graph_instantiate_v1)},
        {{"cuGraphInstantiate_v2"}, S::ONE, true, 0, KEEP(real_graphs().instantiate_v2), w(&w_graph_instantiate_v2)},
        {{"cuGraphLaunch"}, S::LEGACY, true, 0, KEEP(real_graphs().launch), w(&w_graph_launch)},
        {{"cuGraphLaunch"}, S::PER_THREAD, true, 0, KEEP(real_graphs().launch_ptsz), w(&w_graph_launch_ptsz)},
        {{"cuGraphExecDestroy"}, S::ONE, true, 0, KEEP(real_graphs().destroy), w(&w_graph_exec_destroy)},
        // What changes an executable graph's nodes after instantiation (graphs.h follows it). The
        // plain names have these signatures from 12.0 on (before: the _v1 parameter structs).
        {{"cuGraphExecUpdate_v2"}, S::ONE, true, 0, KEEP(real_graphs().update), w(&w_graph_exec_update)},
        {{"cuGraphExecUpdate"}, S::ONE, true, 12000, KEEP(real_graphs().update), w(&w_graph_exec_update)},
        {{"cuGraphExecKernelNodeSetParams_v2"}, S::ONE, true, 0, KEEP(real_graphs().kernel), w(&w_graph_exec_kernel)},
        {{"cuGraphExecKernelNodeSetParams"}, S::ONE, true, 12000, KEEP(real_graphs().kernel), w(&w_graph_exec_kernel)},
        {{"cuGraphExecUpdate"}, S::ONE, true, 0, KEEP(real_graphs().update_v1), w(&w_graph_exec_update_v1)},
        {{"cuGraphExecKernelNodeSetParams"}, S::ONE, true, 0, KEEP(real_graphs().kernel_v1),
         w(&w_graph_exec_kernel_v1)},
        {{"cuGraphExecMemcpyNodeSetParams"}, S::ONE, true, 0, KEEP(real_graphs().memcpy), w(&w_graph_exec_memcpy)},
        {{"cuGraphExecMemsetNodeSetParams"}, S::ONE, true, 0, KEEP(real_graphs().memset), w(&w_graph_exec_memset)},
        {{"cuGraphExecEventRecordNodeSetEvent"}, S::ONE, true, 0, KEEP(real_graphs().record_event),
         w(&w_graph_exec_record_event)},
        {{"cuGraphExecEventWaitNodeSetEvent"}, S::ONE, true, 0, KEEP(real_graphs().wait_event),
         w(&w_graph_exec_wait_event)},
        {{"cuGraphExecChildGraphNodeSetParams"}, S::ONE, true, 0, KEEP(real_graphs().child), w(&w_graph_exec_child)},
        {{"cuGraphExecNodeSetParams"}, S::ONE, true, 0, KEEP(real_graphs().node), w(&w_graph_exec_node)},
        {{"cuGraphNodeSetEnabled"}, S::ONE, true, 0, KEEP(real_graphs().enable), w(&w_graph_node_enable)},
    };
    return *table;
}

#undef KEEP

// Swap a driver entry point the application asked for by name for our wrapper.
void *wrap(const char *symbol, void *fn, cuuint64_t flags) {
    if (!symbol || !fn) return fn;
    std::string s(symbol);
    if (s == "cuGetProcAddress") {
        // Versions >= 12.0 answer with the 5-argument entry point.
        if (!real().getproc_v2) real().getproc_v2 = reinterpret_cast<getproc_v2_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v2);
    }
    const std::string suffix = "_ptsz";
    bool named_ptsz = s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    std::string base = named_ptsz ? s.substr(0, s.size() - suffix.size()) : s;
    bool per_thread = named_ptsz || (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    for (const Hook &h : hooks()) {
        bool named = h.stream == Hook::ONE
                         ? s == h.names[0] || (h.names[1] && s == h.names[1])
                         : base == h.names[0] && per_thread == (h.stream == Hook::PER_THREAD);
        if (!named || getproc_version < h.min_version) continue;
        if (h.recording_only && !tracking()) return fn;
        h.keep(fn);
        return h.wrapper;
    }
    return fn;
}

CUresult w_getproc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult *status) {
    CUresult r = real().getproc_v2(symbol, pfn, version, flags, status);
    getproc_version = version;
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    getproc_version = 0;
    return r;
}

CUresult w_getproc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    CUresult r = real().getproc_v1(symbol, pfn, version, flags);
    getproc_version = version;
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    getproc_version = 0;
    return r;
}
