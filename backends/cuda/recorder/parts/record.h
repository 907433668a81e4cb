// ---- the record of one launch: its code image, its prologue, the launch, its epilogue --------------

// The image file of a module, written on first use (mu() held); "" when unknown or unwritable.
std::string image_file(void *owner) {
    Modules &m = modules();
    auto it = m.image_of.find(owner);
    if (it == m.image_of.end()) return "";
    Image *img = m.images[it->second];
    return write_image_once(*img, it->second, img->data, img->size);
}

void discover_globals(void *owner);
bool capture_in_progress();
void append_mapped_regions(std::vector<std::pair<uint64_t, uint64_t>> &regions);
bool warn_outside_args(const std::string &kernel, const std::string &args,
                       const std::vector<std::pair<size_t, size_t>> &layout);

const char *error_name(CUresult r) {
    DRV(cuGetErrorName);
    const char *name = nullptr;
    if (!p_cuGetErrorName || p_cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return "an unknown CUDA error";
    return name;
}

// Decide whether to record this launch; when yes, the engine runs it between prologue and epilogue
// captures (record.h). Selection, argument packing and timing are the driver API's.
template <typename Run>
CUresult record_launch(CUfunction f, const Launch &l, void **params, void **extra, Run run) {
    const Config &c = config();
    if (disabled || in_recorder || c.dir.empty()) return run();
    park_tick();
    RecordingScope scope;
    Selection sel = select_kernel(f);
    if (!sel.selected) return run_shared(run);
    // A launch into a stream being captured into a CUDA graph does not run now (it adds a kernel node
    // to the graph), and synchronizing would break the capture: it goes to the driver as it is, and is
    // counted and recorded when the graph is launched (graphs.h).
    DRV(cuStreamIsCapturing);
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    const std::string &name = sel.name;
    if (!p_cuStreamIsCapturing || p_cuStreamIsCapturing(l.stream, &capture) != CUDA_SUCCESS) {
        count_unrecorded(name, "cuStreamIsCapturing failed on its stream");
        return run();
    }
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return run();
    if (capture_in_progress()) {  // its synchronize would invalidate that capture (stream_capture.h)
        count_unrecorded(name, "launched while a stream was being captured into a CUDA graph (the recorder's "
                               "synchronize would have broken the capture)");
        return run();
    }
    CUfunction fn = sel.resolved;
    LaunchRecord r;
    if (!pack_args(fn, params, extra, r.args, r.layout)) {
        count_unrecorded(name, "its parameter buffer could not be read (cuFuncGetParamInfo)");
        return run();
    }
    kernel_timer();  // set up before mu() is taken
    uint64_t h = instance_key(l.grid, l.block, l.shared, r.args);
    TimingClaim claim(timer_wants(name, h));  // the kernel timer's records on for it, if it will be timed
    // One recording at a time, and no allocation or free while its regions are copied.
    std::lock_guard<std::mutex> lock(mu());
    if (disabled) return run();
    KernelCounts &kc = counts()[name];
    switch (admit(kc, h, r.index)) {
        case Admission::Recorded: return time_launch(name, h, fn, l.stream, run);
        case Admission::Skipped:
        case Admission::Full: return run();
        case Admission::Record: break;
    }
    bool outside = warn_outside_args(name, r.args, r.layout);
    r.format = "mneme-cuda-raw";
    r.kernel = name;
    r.key = h;
    for (int i = 0; i < 3; ++i) r.grid[i] = l.grid[i], r.block[i] = l.block[i], r.cluster[i] = l.cluster[i];
    r.shared = l.shared;
    r.cooperative = l.cooperative;
    r.stream = l.stream;
    r.regions = live_regions();
    append_mapped_regions(r.regions);  // the application's own VMM mappings
    // The flush buffer is allocated before the prologue capture, not just before the timed launch:
    // a new mapping right before a short kernel's first launch made it take one of two levels,
    // about 20% apart from process to process (benchmarks/gpu/probes/once_probe.py).
    const bool flush = c.flush && c.timed >= 0;  // the recorded launch is timed from an evicted L2
    LaunchHooks<CUresult> hooks;
    hooks.run = run;
    hooks.error_name = [](int status) { return error_name((CUresult)status); };
    hooks.describe = [&](LaunchRecord &rec) {
        void *owner = owner_of_launch(f, fn);
        if (!owner) return;
        discover_globals(owner);
        auto it = modules().globals.find(owner);
        if (it != modules().globals.end())
            for (auto &g : it->second) rec.globals.push_back(GlobalVar{g.first, g.second.first, g.second.second});
        rec.image = image_file(owner);
        if (!rec.image.empty()) rec.image_kind = modules().images[modules().image_of[owner]]->kind;
    };
    if (flush) hooks.before_prologue = [] { flush_buffer(); };
    hooks.launch = [&] {
        bool flushed = flush && flush_l2(l.stream);
        if (flushed) timing_gate().flushed++;
        return time_launch(name, h, fn, l.stream, run, flushed ? "flushed" : "warm");
    };
    // The same launch timed again from its restored prologue (retime.h); not when an argument points
    // where no shadow reaches (host-mapped or managed memory): the second run would write it twice.
    if (c.retime && outside)
        kc.retime_skipped["an argument points outside the recorded memory, which a second run would write again"]++;
    else if (c.retime)
        hooks.retime = [&](const std::function<bool(int)> &restore) {
            std::function<CUresult()> through_image;
            const char *image_why = nullptr;
            if (c.retime_image)
                through_image = image_launch(kc, owner_of_launch(f, fn), fn, name, l, r.args, &image_why);
            retime_launch(name, h, l.stream, run, flush, restore, through_image, image_why);
        };
    return record_admitted(kc, r, hooks);
}
