// ---- the recorded launch timed a second time (MNEME_RECORD_RETIME) ---------------------------------

// The recorded launch's own time is a single first launch of the kernel in the process, right after
// the prologue capture and the L2 flush. The application corpus's 2-6 us kernels replayed 0.4-0.7 us
// slower than it (docs/design/investigations/replay-timing-2026-12-06.md). With MNEME_RECORD_RETIME=1
// the recorder runs that launch once more, as a replay would: the prologue restored from its shadow
// (the copy engine the last writer of every region, as after a replay's restore), the L2 flushed
// again, the launch timed by the same timer; then the epilogue is restored from its shadow, so the
// application finds exactly what its own launch left in every recorded region and global. The time
// goes to counts-<pid>.json's `retimed_time`, beside `recorded_time`, which it does not change.
// Everything runs alone on the device: no other launch may see the prologue put back. Memory a
// kernel writes outside the recorded regions (mapped host memory, memory the recorder did not
// place) is written twice; that is why this is not the default.
//
// MNEME_RECORD_RETIME=image also times it a third time the same way, but through the recorded code
// image loaded into a module of its own by cuModuleLoadData, launched with the packed argument buffer,
// as a replay loads and launches it: the replay's code object in the application's process. Where
// that is as slow as the replay, the code object or its loading is what the replay's process adds;
// where it is as fast as the application's launch, the replay's context is. The function attributes
// that differ between the application's function and the image's, and the application's context
// limits, go to `retime_facts`.

// One launch timed, mu() and launch_mu() held, the device otherwise idle: seconds, or 0 with `why`.
template <typename Run>
double time_once(const std::string &kernel, CUstream stream, Run run, const char **why) {
    DRV(cuStreamSynchronize);
#ifdef MNEME_CUPTI
    KernelTimer &kt = kernel_timer();
    if (kt.ready) {
        TimerWindow w = timer_window(stream, run);
        uint64_t ns = 0;
        if (!w.ran) return *why = "the second launch failed", 0;
        if (!window_record(kernel, w, ~0u, &ns)) return *why = "CUPTI gave no record of it", 0;
        return ns * 1e-9;
    }
#endif
    // By events, ungated (the gate is time_launch's): the window holds the submission too, so
    // compare it with a recorded time by events only as a bound.
    DRV(cuEventCreate);
    DRV(cuEventRecord);
    DRV(cuEventSynchronize);
    DRV(cuEventElapsedTime_v2);
    DRV(cuEventDestroy_v2);
    CUevent start = nullptr, stop = nullptr;
    if (!p_cuEventCreate || p_cuEventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return *why = "no events", 0;
    if (p_cuEventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        p_cuEventDestroy_v2(start);
        return *why = "no events", 0;
    }
    float ms = 0;
    bool started = p_cuEventRecord(start, stream) == CUDA_SUCCESS;
    CUresult r = run();
    bool timed = started && r == CUDA_SUCCESS && p_cuEventRecord(stop, stream) == CUDA_SUCCESS &&
                 p_cuEventSynchronize(stop) == CUDA_SUCCESS && p_cuEventElapsedTime_v2(&ms, start, stop) == CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) *why = "the second launch failed";
    if (p_cuStreamSynchronize) p_cuStreamSynchronize(stream);  // run() failing after its events: still drain
    p_cuEventDestroy_v2(start);
    p_cuEventDestroy_v2(stop);
    if (!timed || ms <= 0) return *why = *why ? *why : "its events gave no time", 0;
    return ms * 1e-3;
}

// MNEME_RECORD_RETIME=image: the modules loaded from recorded images, by (owner, context); nullptr: it did not load.
std::map<std::pair<void *, CUcontext>, CUmodule> &image_modules() {
    static auto *loaded = new std::map<std::pair<void *, CUcontext>, CUmodule>();
    return *loaded;
}

// A destroyed context's modules went with it; a new context may get the same handle (mu() held).
void forget_image_modules(CUcontext ctx) {
    auto &loaded = image_modules();
    for (auto it = loaded.begin(); it != loaded.end();) it = it->first.second == ctx ? loaded.erase(it) : std::next(it);
}

// The recorded image's module in this context, loaded once (mu() held).
CUmodule image_module(void *owner, const char **why) {
    auto *loaded = &image_modules();
    DRV(cuCtxGetCurrent);
    DRV(cuModuleLoadData);
    CUcontext ctx = nullptr;
    if (!p_cuCtxGetCurrent || p_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return *why = "no current context", nullptr;
    auto key = std::make_pair(owner, ctx);
    auto it = loaded->find(key);
    if (it != loaded->end()) return it->second ? it->second : (*why = "its code image did not load", nullptr);
    Modules &m = modules();
    auto img = m.image_of.find(owner);
    CUmodule mod = nullptr;
    if (img == m.image_of.end() || !m.images[img->second]->data) {
        *why = "its code image is unknown";
    } else if (!p_cuModuleLoadData || p_cuModuleLoadData(&mod, m.images[img->second]->data) != CUDA_SUCCESS) {
        *why = "its code image did not load";
        mod = nullptr;
    }
    (*loaded)[key] = mod;
    return mod;
}

// The function attributes of `app` and `image` that differ, and the context's limits, as facts.
void note_function_facts(KernelCounts &kc, CUfunction app, CUfunction image) {
    DRV(cuFuncGetAttribute);
    DRV(cuCtxGetLimit);
    DRV(cuCtxGetCacheConfig);
    DRV(cuCtxGetFlags);
    for (int a = 0; p_cuFuncGetAttribute && a < CU_FUNC_ATTRIBUTE_MAX; ++a) {
        int x = 0, y = 0;
        if (p_cuFuncGetAttribute(&x, (CUfunction_attribute)a, app) != CUDA_SUCCESS ||
            p_cuFuncGetAttribute(&y, (CUfunction_attribute)a, image) != CUDA_SUCCESS || x == y)
            continue;
        kc.retime_facts["function attribute " + std::to_string(a)] = std::to_string(x) + " / " + std::to_string(y);
    }
    const std::pair<CUlimit, const char *> limits[] = {
        {CU_LIMIT_STACK_SIZE, "stack size"},
        {CU_LIMIT_MALLOC_HEAP_SIZE, "malloc heap size"},
        {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, "persisting L2 size"},
        {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, "L2 fetch granularity"},
    };
    for (auto &limit : limits) {
        size_t v = 0;
        if (p_cuCtxGetLimit && p_cuCtxGetLimit(&v, limit.first) == CUDA_SUCCESS)
            kc.retime_facts["context " + std::string(limit.second)] = std::to_string(v);
    }
    CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE;
    if (p_cuCtxGetCacheConfig && p_cuCtxGetCacheConfig(&cache) == CUDA_SUCCESS)
        kc.retime_facts["context cache config"] = std::to_string((int)cache);
    unsigned flags = 0;
    if (p_cuCtxGetFlags && p_cuCtxGetFlags(&flags) == CUDA_SUCCESS)
        kc.retime_facts["context flags"] = std::to_string(flags);
}

// A launch of the recorded launch's kernel through its recorded image, as a replay launches it (the packed
// argument buffer); an empty function with `why` where it cannot be had (mu() held).
std::function<CUresult()> image_launch(KernelCounts &kc, void *owner, CUfunction app, const std::string &kernel,
                                       const Launch &l, const std::string &args, const char **why) {
    if (l.cooperative || l.cluster[0]) return *why = "a cooperative or clustered launch", nullptr;
    CUmodule mod = owner ? image_module(owner, why) : (*why = "its module is unknown", nullptr);
    DRV(cuModuleGetFunction);
    DRV(cuFuncSetAttribute);
    CUfunction fn = nullptr;
    if (!mod) return nullptr;
    if (!p_cuModuleGetFunction || p_cuModuleGetFunction(&fn, mod, kernel.c_str()) != CUDA_SUCCESS)
        return *why = "its image's module has no function of its name", nullptr;
    if (l.shared > 48 * 1024 &&
        (!p_cuFuncSetAttribute ||
         p_cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)l.shared) != CUDA_SUCCESS))
        return *why = "its dynamic shared memory could not be allowed", nullptr;
    note_function_facts(kc, app, fn);
    ensure_plain();
    auto buffer = std::make_shared<std::string>(args);
    auto size = std::make_shared<size_t>(args.size());
    return [fn, l, buffer, size]() {
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer->empty() ? nullptr : &(*buffer)[0],
                         CU_LAUNCH_PARAM_BUFFER_SIZE, size.get(), CU_LAUNCH_PARAM_END};
        return real().launch(fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared,
                             l.stream, nullptr, buffer->empty() ? nullptr : extra);
    };
}

// LaunchHooks::retime for the launch of `fn` on `stream` (mu() held): restore, flush, time, restore. With
// `through_image`, once more after the first, the same way, through the recorded image (`image_why`: why not).
template <typename Run>
void retime_launch(const std::string &kernel, uint64_t instance, CUstream stream, Run run, bool flush,
                   const std::function<bool(int)> &restore, const std::function<CUresult()> &through_image = nullptr,
                   const char *image_why = nullptr) {
    KernelCounts &kc = counts()[kernel];
    if (config().timed < 0) {
        kc.retime_skipped["launches are not timed (MNEME_RECORD_TIMED < 0)"]++;
        return;
    }
    // Alone, or not at all: another stream's kernel must never see the prologue put back.
    std::unique_lock<std::shared_mutex> alone = alone_on_device();
    if (!alone.owns_lock()) {
        kc.retime_skipped["not alone on the device (MNEME_RECORD_TIMING_EXCLUSIVE=0, or a failed synchronize)"]++;
        return;
    }
    bool flushed = false;
    auto once = [&](const std::function<CUresult()> &launch, const char **why) -> double {
        if (!restore(mneme_engine::PROLOGUE)) return *why = "its prologue could not be copied back", 0;
        flushed = flush && flush_l2(stream);
        DRV(cuStreamSynchronize);
        if (flushed && p_cuStreamSynchronize) p_cuStreamSynchronize(stream);  // as the first: flush, synchronize, launch
        return time_once(kernel, stream, launch, why);
    };
    const char *why = nullptr;
    double seconds = once(run, &why), image_seconds = 0;
    if (!why && through_image) image_seconds = once(through_image, &image_why);
    // Whatever happened above, the application gets its launch's results back.
    if (!restore(mneme_engine::EPILOGUE)) {
        stop_recording("restoring what launch %s left after timing it again failed: the application's memory may "
                       "hold the kernel's inputs; run without MNEME_RECORD_RETIME", kernel.c_str());
        why = "its epilogue could not be copied back";
    }
    alone.unlock();
    if (why) {
        kc.retime_skipped[why]++;
        return;
    }
    kc.retimed_time[instance] = {seconds, flushed ? "flushed" : "warm"};
    if (image_seconds > 0)
        kc.retimed_image_time[instance] = {image_seconds, flushed ? "flushed" : "warm"};
    else if (image_why)
        kc.retime_skipped[std::string("through its recorded image: ") + image_why]++;
}
