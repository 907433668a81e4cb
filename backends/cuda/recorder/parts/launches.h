// ---- recording launches ---------------------------------------------------------------------
// (in_recorder, launch_seq: the engine's record.h)

// In-application timing: the recorded launch of an instance and the next MNEME_RECORD_TIMED
// launches with the same dynamic hash run between two events on the application's stream. The
// application is never synchronized for it: elapsed times are collected with cuEventQuery at
// later launches, allocations and frees, and at exit, into counts-<pid>.json ("app_times").
struct PendingTiming {
    std::string kernel;
    uint64_t instance;
    CUevent start, stop;
    const char *recorded_cache;  // the recorded launch's: the cache it started from; nullptr for a repeat
};

std::vector<PendingTiming> &pending_timings() {  // mu() held
    static auto *v = new std::vector<PendingTiming>();
    return *v;
}

void reap_timings(bool wait) {
    auto &pending = pending_timings();
    if (pending.empty()) return;
    DRV(cuEventQuery);
    DRV(cuEventSynchronize);
    DRV(cuEventElapsedTime_v2);
    DRV(cuEventDestroy_v2);
    size_t kept = 0;
    for (PendingTiming &t : pending) {
        CUresult q = wait ? p_cuEventSynchronize(t.stop) : p_cuEventQuery(t.stop);
        if (q == CUDA_ERROR_NOT_READY) {
            pending[kept++] = t;
            continue;
        }
        float ms = 0;
        bool timed = q == CUDA_SUCCESS && p_cuEventElapsedTime_v2 &&
                     p_cuEventElapsedTime_v2(&ms, t.start, t.stop) == CUDA_SUCCESS;
        if (timed && ms > 0) {
            counts()[t.kernel].app_times[t.instance].push_back(ms * 1e-3);
            if (t.recorded_cache) counts()[t.kernel].recorded_time[t.instance] = {ms * 1e-3, t.recorded_cache};
        }
        p_cuEventDestroy_v2(t.start);
        p_cuEventDestroy_v2(t.stop);
    }
    pending.resize(kept);
}

// The gate of the timed launches. On an idle stream a start event recorded before the launch
// fires at once and the kernel only once the host has submitted it, so the events would time the
// submission too. So the stream first waits (cuStreamWaitValue32, GEQ) for a counter in
// page-locked, device-mapped host memory that the recorder raises with a plain store right after
// queuing start event, launch and stop event: the GPU runs the three back to back. The counter
// only grows (the wait compares cyclically) and the store cannot fail, so no release is missed.
// Everything queued before the wait drains, so the launch always finds room in the queue; but a
// driver call that itself waits for the held stream (a lazily loaded kernel, a growing local
// memory pool: both may synchronize the context) would wait for good, so a backstop thread
// releases a ticket still held after GATE_BACKSTOP_MS and that launch's time is dropped. The page
// is this library's own, never freed: a store into it stays safe even after the application
// destroyed the context that registered it.
alignas(4096) uint32_t gate_page[1024];
constexpr int GATE_BACKSTOP_MS = 20;

struct TimingGate {
    uint32_t ticket = 0;  // the last value a gated stream waits for; stored into gate_page[0]
    long gated = 0, ungated = 0, late = 0;  // late: released by the backstop, time dropped
    std::string ungated_because;  // the first reason a launch was timed without the gate
    long exclusive = 0, shared = 0;  // timed alone on the device, or beside whatever else ran
    long cupti = 0, cupti_missed = 0;  // timed by kernel timestamps; launches whose record did not come
    long flushed = 0;                  // recorded launches timed after an L2 flush (flush_l2)
    bool backstop = false;        // its thread runs (in this process: not after a fork)
    std::mutex mu;                // the backstop's own (it never takes mu())
    std::condition_variable cv;
    uint32_t held = 0;           // the ticket a stream waits for now; 0: none
    bool released_late = false;  // the backstop released `held`
};

TimingGate &timing_gate() {  // mu() held
    static auto *g = new TimingGate();
    return *g;
}

void *gate_backstop(void *) {
    TimingGate &g = timing_gate();
    std::unique_lock<std::mutex> lock(g.mu);
    for (;;) {
        g.cv.wait(lock, [&] { return g.held != 0; });
        uint32_t t = g.held;
        if (g.cv.wait_for(lock, std::chrono::milliseconds(GATE_BACKSTOP_MS), [&] { return g.held != t; })) continue;
        __atomic_store_n(&gate_page[0], t, __ATOMIC_RELEASE);
        g.held = 0;
        g.released_late = true;
    }
    return nullptr;
}

// The backstop thread, started once per process (signals blocked: they stay the application's).
bool start_backstop(TimingGate &g) {
    if (g.backstop) return true;
    static bool forks_reset = false;
    if (!forks_reset) {
        forks_reset = true;
        pthread_atfork(nullptr, nullptr, [] {  // a forked child has no backstop thread
            TimingGate &child = timing_gate();
            new (&child.mu) std::mutex();
            new (&child.cv) std::condition_variable();
            child.held = 0;
            child.backstop = false;
        });
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    g.backstop = pthread_create(&thread, nullptr, gate_backstop, nullptr) == 0;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (g.backstop) pthread_detach(thread);
    return g.backstop;
}

void time_ungated(TimingGate &g, const char *what, CUresult r) {
    if (!g.ungated_because.empty()) return;
    DRV(cuGetErrorName);
    const char *name = nullptr;
    if (r != CUDA_SUCCESS && p_cuGetErrorName) p_cuGetErrorName(r, &name);
    g.ungated_because = std::string(what) + (name ? std::string(" (") + name + ")" : "");
    fprintf(stderr, "mneme-recorder: timing launches without the gate: %s; in-application times include the "
                    "host's submission on an idle stream\n", g.ungated_because.c_str());
}

// The device address of the gate's counter in the current context, registering the page once
// (portable: every context sees it); 0 when this context cannot map it.
CUdeviceptr gate_address(TimingGate &g) {
    DRV(cuMemHostGetDevicePointer_v2);
    DRV(cuMemHostRegister_v2);
    if (!p_cuMemHostGetDevicePointer_v2 || !p_cuMemHostRegister_v2) {
        time_ungated(g, "the driver has no cuMemHostRegister/cuMemHostGetDevicePointer", CUDA_SUCCESS);
        return 0;
    }
    CUdeviceptr dev = 0;
    if (p_cuMemHostGetDevicePointer_v2(&dev, gate_page, 0) == CUDA_SUCCESS) return dev;
    CUresult r = p_cuMemHostRegister_v2(gate_page, sizeof gate_page,
                                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r == CUDA_SUCCESS && (r = p_cuMemHostGetDevicePointer_v2(&dev, gate_page, 0)) == CUDA_SUCCESS) return dev;
    time_ungated(g, "no device-mapped host memory for the gate", r);
    return 0;
}

// Registered after cudart's own handler, so it runs while the context still exists: the last
// launches' events (an instance launched once at the end) are still readable (mu() held).
void reap_timings_at_exit() {
    static bool registered = false;
    if (registered) return;
    registered = true;
    atexit([] {
        std::lock_guard<std::mutex> lock(mu());
        reap_timings(true);
    });
}

// Exclusive timing. In an application that runs kernels on several streams at once, a timed
// kernel shares the device with whatever else runs then, and its time is that of the mix, which a
// replay of the kernel alone cannot reproduce (streams_app's saxpy ran 2-5% slower beside the
// other thread's: docs/design/recording.md, "Timing inside the application"). So each timed launch runs alone:
// the context drains first, and launches of other threads wait until its stop event has passed.
// Launches of selected kernels already queue on mu(); every other launch (and cuGraphLaunch)
// holds launch_mu() shared while it is submitted, and a timed launch holds it exclusively, as does
// each chunk of the snapshot writer's drain of recorded shadows (stream_sides). Copies and memsets
// an application queues on other streams meanwhile are not held. Until the first
// timed launch no launch takes the lock (a process that records nothing pays nothing); a launch
// submitted while that first one starts may still run beside it.
// launch_mu() and timing_started: the engine's exclusive.h.

// Submit a launch that is not timed: beside an exclusive timing, after it.
template <typename Run>
CUresult run_shared(Run run) {
    if (!timing_started.load(std::memory_order_acquire) || !config().exclusive) return run();
    std::shared_lock<std::shared_mutex> beside(launch_mu());
    return run();
}

// The kernel timer (mneme_cuda/native/cupti_timer.h). An event window around a ~1 us kernel is
// 3.5 us, two thirds of it the front end's work between the start event, the launch and the stop
// event, and that part varies from process to process by several percent
// (docs/design/recording.md, "The kernel timer"); the GPU's own start and end
// timestamps of the kernel do not. Set up once, outside mu() (CUPTI's set-up may call the
// driver, whose entry points here take mu()), and left on: records turned off and on again did
// not come for later launches (H200, CUPTI 13.0). Each application launch then costs CUPTI's
// record of it (bench_recorder's overhead figure holds it).
// Where it cannot be had the launches are timed with events, and counts-<pid>.json says why.
struct KernelTimer {
    bool ready = false;
    std::string why;  // why not, when not ready
};

KernelTimer *timer_state = nullptr;  // set once kernel_timer() has run

KernelTimer &kernel_timer() {
    static KernelTimer *timer = [] {
        auto *t = new KernelTimer();
        const std::string &choice = config().timer;
#ifdef MNEME_CUPTI
        if (choice == "events")
            t->why = "MNEME_RECORD_TIMER=events";
        else if (choice == "auto" && getenv("CUDA_INJECTION64_PATH"))
            t->why = "a CUDA injection library (CUDA_INJECTION64_PATH) may own CUPTI's activity buffers";
        else if (mct_open(getenv("MNEME_CUPTI_LIB")) != 0 || mct_enable(MCT_WINDOWS) != 0)
            t->why = mct_why();
        else
            t->ready = true;
#else
        t->why = "the recorder was built without CUPTI's headers (cupti.h)";
#endif
        timer_park().active = t->ready && config().timer_park > 0;
        if (!t->ready && choice == "cupti")
            fprintf(stderr, "mneme-recorder: MNEME_RECORD_TIMER=cupti, but %s; timing with CUDA events\n",
                    t->why.c_str());
        timer_state = t;
        return t;
    }();
    return *timer;
}

// Alone on the device (MNEME_RECORD_TIMING_EXCLUSIVE, the default): no other launch is submitted
// while the returned lock is held, and what was queued has drained. An earlier error of the
// application's fails the synchronize: it is the application's to see at its launch, and this
// launch is timed beside whatever still runs (the lock is not held then).
std::unique_lock<std::shared_mutex> alone_on_device() {
    DRV(cuCtxSynchronize);
    std::unique_lock<std::shared_mutex> alone(launch_mu(), std::defer_lock);
    if (config().exclusive) {
        timing_started.store(true, std::memory_order_release);
        alone.lock();
        if (!p_cuCtxSynchronize || p_cuCtxSynchronize() != CUDA_SUCCESS) alone.unlock();
    }
    return alone;
}

// A lazily loaded kernel loads at its first launch, which may synchronize: load it before timing.
void load_before_timing(CUfunction fn) {
    DRV(cuFuncIsLoaded);
    DRV(cuFuncLoad);
    CUfunctionLoadingState loading = CU_FUNCTION_LOADING_STATE_LOADED;
    if (fn && p_cuFuncIsLoaded && p_cuFuncLoad && p_cuFuncIsLoaded(&loading, fn) == CUDA_SUCCESS &&
        loading != CU_FUNCTION_LOADING_STATE_LOADED)
        p_cuFuncLoad(fn);
}

#ifdef MNEME_CUPTI
// One launch inside the kernel timer's window: run, wait for its stream. `ran`: it was submitted and its
// stream synchronized; `result`: the launch's own status.
struct TimerWindow {
    uint64_t from = 0, to = 0;
    CUresult result = CUDA_SUCCESS;
    bool ran = false;
};

template <typename Run>
TimerWindow timer_window(CUstream stream, Run run) {
    DRV(cuStreamSynchronize);
    TimerWindow w;
    w.from = mct_now();
    mct_arm(w.from);  // older records a flush still delivers cannot push this one out of the ring
    w.result = run();
    w.ran = w.result == CUDA_SUCCESS && p_cuStreamSynchronize && p_cuStreamSynchronize(stream) == CUDA_SUCCESS;
    w.to = mct_now();
    return w;
}

// The one record of `kernel` in the window (on CUPTI's stream `stream_id`, ~0u for any): its duration in ns.
bool window_record(const std::string &kernel, const TimerWindow &w, uint32_t stream_id, uint64_t *ns) {
    mct_flush();
    return mct_take_window(kernel.c_str(), w.from, w.to, stream_id, ns) == 1;
}

// Time one launch by its kernel timestamps (mu() held). The application's thread waits for its
// stream here, so the record can be read at once; no gate is needed, the timestamps hold no submission.
template <typename Run>
CUresult time_kernel(KernelTimer &kt, const std::string &kernel, uint64_t instance, CUfunction fn, CUstream stream,
                     long &timed, const char *recorded_cache, Run run) {
    TimerPark &park = timer_park();
    if (park.parked.load()) return run();  // no claim was taken for it (timer_park.h): left for a later launch
    load_before_timing(fn);
    DRV(cuStreamSynchronize);
    std::unique_lock<std::shared_mutex> alone = alone_on_device();
    // Alone on the device the only record of this kernel between the two timestamps is this
    // launch's; beside other threads, only the one on its stream (CUPTI's id of it).
    uint32_t stream_id = ~0u;
    DRV(cuCtxGetCurrent);
    CUcontext ctx = nullptr;
    if (!alone.owns_lock() && p_cuCtxGetCurrent && p_cuCtxGetCurrent(&ctx) == CUDA_SUCCESS &&
        mct_stream(ctx, stream == CU_STREAM_PER_THREAD ? nullptr : stream, stream == CU_STREAM_PER_THREAD,
                   &stream_id) != 0)
        stream_id = ~0u;
    TimerWindow w = timer_window(stream, run);
    bool was_alone = alone.owns_lock() && w.ran;
    if (alone.owns_lock()) alone.unlock();
    if (w.result != CUDA_SUCCESS) return w.result;
    timed++;
    TimingGate &g = timing_gate();
    uint64_t ns = 0;
    bool ran = w.ran;
    if (ran && window_record(kernel, w, stream_id, &ns)) {
        counts()[kernel].kernel_times[instance].push_back(ns * 1e-9);
        if (recorded_cache) counts()[kernel].recorded_time[instance] = {ns * 1e-9, recorded_cache};
        g.cupti++;
        (was_alone ? g.exclusive : g.shared)++;
    } else if (ran) {
        ++g.cupti_missed;
        if (park.resumes.load() > 0 && !park.broken.exchange(true)) {  // the records stay on from now on
            fprintf(stderr, "mneme-recorder: a timed launch of %s got no kernel record after the kernel timer was "
                    "resumed; the timer is no longer parked between timings\n", kernel.c_str());
        } else if (g.cupti_missed >= 2 && !g.cupti) {  // never a record: events from here on
            kt.ready = false;
            park.active = false;
            uint64_t kernels = 0, ids = 0;
            mct_seen(&kernels, &ids);
            char why[160];
            snprintf(why, sizeof why, "CUPTI delivered no record of the timed launches (%llu kernel records in all)",
                     (unsigned long long)kernels);
            kt.why = why;
            mct_enable(MCT_OFF);  // never on again: the application's launches stop paying for the records
            fprintf(stderr, "mneme-recorder: %s; timing with CUDA events\n", kt.why.c_str());
        }
    }
    return w.result;
}
#endif

// The L2 flush before a recorded launch is timed (mu() held). The prologue capture has just read
// every live allocation, so the L2 holds whatever part of the kernel's data that copy left: a
// state no replay reproduces (saxpy_app's recorded launch took 9.0 us, its replay 7.8 us warm and
// 17.3 us flushed; H200, docs/design/recording.md, "The L2 before a recorded launch"). Evicted, it is the state
// `mneme replay --cache flushed` times from, so an instance the application launches once compares
// like for like. A buffer twice the L2's size per context, from the driver's own cuMemAlloc
// (outside the recorded range, in no snapshot), filled as the replay's flush does;
// MNEME_RECORD_TIMING_FLUSH=0 leaves the L2 alone. (Writing it 8 or 32 times instead of once, or
// a busy kernel first, changed nothing: the SM clock was at its 1980 MHz maximum even after 300 ms
// idle; benchmarks/gpu/probes/clock_probe.cu.)
// flush_buffer: the current context's buffer ({0, 0} where none could be had), allocated on first use.
std::map<CUcontext, std::pair<CUdeviceptr, size_t>> &flush_buffers() {
    static auto *buffers = new std::map<CUcontext, std::pair<CUdeviceptr, size_t>>();
    return *buffers;
}

// A destroyed context's buffer went with it; a new context may get the same handle (mu() held).
void forget_flush_buffer(CUcontext ctx) { flush_buffers().erase(ctx); }

std::pair<CUdeviceptr, size_t> flush_buffer() {
    auto *buffers = &flush_buffers();
    DRV(cuCtxGetCurrent);
    DRV(cuCtxGetDevice);
    DRV(cuDeviceGetAttribute);
    DRV(cuMemAlloc_v2);
    CUcontext ctx = nullptr;
    if (!p_cuCtxGetCurrent || p_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return {0, 0};
    auto it = buffers->find(ctx);
    if (it == buffers->end()) {
        CUdevice device = 0;
        int l2 = 0;
        CUdeviceptr buffer = 0;
        size_t size = 0;
        if (p_cuCtxGetDevice && p_cuDeviceGetAttribute && p_cuMemAlloc_v2 && p_cuCtxGetDevice(&device) == CUDA_SUCCESS &&
            p_cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device) == CUDA_SUCCESS && l2 > 0) {
            size = 2 * (size_t)l2;
            if (p_cuMemAlloc_v2(&buffer, size) != CUDA_SUCCESS) buffer = 0;  // a full device: no flush
        }
        it = buffers->emplace(ctx, std::make_pair(buffer, size)).first;
    }
    return it->second;
}

// flush_l2: the flush, on `stream` (False when it could not be done).
bool flush_l2(CUstream stream) {
    DRV(cuMemsetD8Async);
    auto buffer = flush_buffer();
    return buffer.first && p_cuMemsetD8Async && p_cuMemsetD8Async(buffer.first, 0, buffer.second, stream) == CUDA_SUCCESS;
}

// Run a launch of a recorded instance, timed when that instance still has timings to take (mu() held).
// `recorded_cache`: for the recorded launch itself, the cache state it starts from ("flushed",
// "warm"), kept apart from the repeats' times (the replay's reference); nullptr for a repeat.
template <typename Run>
CUresult time_launch(const std::string &kernel, uint64_t instance, CUfunction fn, CUstream stream, Run run,
                     const char *recorded_cache = nullptr) {
    reap_timings(false);
    long &timed = counts()[kernel].timed[instance];
    if (timed > config().timed) return run();
#ifdef MNEME_CUPTI
    KernelTimer &kt = kernel_timer();
    if (kt.ready) return time_kernel(kt, kernel, instance, fn, stream, timed, recorded_cache, run);
#endif
    reap_timings_at_exit();
    DRV(cuEventCreate);
    DRV(cuEventRecord);
    DRV(cuEventDestroy_v2);
    DRV(cuStreamWaitValue32_v2);
    CUevent start = nullptr, stop = nullptr;
    if (!p_cuEventCreate || p_cuEventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return run();
    if (p_cuEventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        p_cuEventDestroy_v2(start);
        return run();
    }
    TimingGate &g = timing_gate();
    bool held = false;  // the stream waits for gate_page[0] >= ticket
    uint32_t ticket = g.ticket + 1;
    load_before_timing(fn);  // before the gate
    DRV(cuEventSynchronize);
    std::unique_lock<std::shared_mutex> alone = alone_on_device();
    static const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    if (!config().gate) {
        time_ungated(g, "MNEME_RECORD_TIMING_GATE=0", CUDA_SUCCESS);
    } else if (blocking && strcmp(blocking, "1") == 0) {  // each launch would wait for its own held stream
        time_ungated(g, "CUDA_LAUNCH_BLOCKING=1", CUDA_SUCCESS);
    } else if (g.late >= 2) {  // once may be a first launch's load; twice, the launches wait for their stream
        time_ungated(g, "launches waited for their own held stream (the backstop released them)", CUDA_SUCCESS);
    } else if (!start_backstop(g)) {
        time_ungated(g, "no thread for the gate's backstop", CUDA_SUCCESS);
    } else if (CUdeviceptr flag = gate_address(g)) {
        CUresult w = p_cuStreamWaitValue32_v2 ? p_cuStreamWaitValue32_v2(stream, flag, ticket, CU_STREAM_WAIT_VALUE_GEQ)
                                             : CUDA_ERROR_NOT_SUPPORTED;
        held = w == CUDA_SUCCESS;
        if (held) {
            g.ticket = ticket;
            std::lock_guard<std::mutex> backstop(g.mu);
            g.held = ticket;
            g.released_late = false;
        } else {
            time_ungated(g, "cuStreamWaitValue32 on the application's stream failed", w);
        }
        if (held) g.cv.notify_one();
    }
    bool started = p_cuEventRecord(start, stream) == CUDA_SUCCESS;
    CUresult r = run();
    bool stopped = started && r == CUDA_SUCCESS && p_cuEventRecord(stop, stream) == CUDA_SUCCESS;
    bool late = false;
    if (held) {
        __atomic_store_n(&gate_page[0], ticket, __ATOMIC_RELEASE);  // on every path: the stream goes on
        {
            std::lock_guard<std::mutex> backstop(g.mu);
            late = g.released_late;
            g.held = 0;
        }
        g.cv.notify_one();
    }
    if (late) g.late++;
    if (stopped) timed++;  // a late one too: at most MNEME_RECORD_TIMED + 1 stalls per instance
    // The others' launches wait until this one has run (a failed wait: they go on, its time is kept
    // only as shared).
    bool was_alone = alone.owns_lock() && stopped && p_cuEventSynchronize && p_cuEventSynchronize(stop) == CUDA_SUCCESS;
    if (alone.owns_lock()) alone.unlock();
    if (stopped && !late) {
        (held ? g.gated : g.ungated)++;
        (was_alone ? g.exclusive : g.shared)++;
        pending_timings().push_back(PendingTiming{kernel, instance, start, stop, recorded_cache});
    } else {
        p_cuEventDestroy_v2(start);
        p_cuEventDestroy_v2(stop);
    }
    return r;
}

std::string kernel_name(CUfunction f, CUfunction *resolved) {
    DRV(cuFuncGetName);
    DRV(cuFuncGetParamInfo);
    DRV(cuKernelGetFunction);
    const char *name = nullptr;
    *resolved = f;
    // Kernels loaded through the library API (cudart 12+) arrive as CUkernel handles, on which the
    // function queries fail (seen on the H200, driver 580): resolve them to their CUfunction.
    size_t off = 0, size = 0;
    if (!p_cuFuncGetParamInfo || p_cuFuncGetParamInfo(f, 0, &off, &size) != CUDA_SUCCESS) {
        CUfunction fn = nullptr;
        if (p_cuKernelGetFunction && p_cuKernelGetFunction(&fn, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS && fn)
            *resolved = fn;
    }
    if (p_cuFuncGetName && p_cuFuncGetName(&name, *resolved) == CUDA_SUCCESS && name) return name;
    if (p_cuFuncGetName && p_cuFuncGetName(&name, f) == CUDA_SUCCESS && name) return name;
    return "";
}

// Whether a kernel handle is selected, decided once per handle (the regex is too slow per launch).
// One launch's shape and stream, as the launch call gave them.
struct Launch {
    unsigned grid[3], block[3], shared;
    CUstream stream;
    bool cooperative = false;         // cuLaunchCooperativeKernel, or cuLaunchKernelEx's cooperative attribute
    unsigned cluster[3] = {0, 0, 0};  // cuLaunchKernelEx's cluster dimension attribute; zeros: none
};

struct Selection {
    std::string name;
    CUfunction resolved;
    bool selected;
};

std::mutex &selection_mu() {
    static auto *m = new std::mutex();
    return *m;
}

Selection select_kernel(CUfunction f) {
    static auto *cache = new std::unordered_map<void *, Selection>();
    {
        std::lock_guard<std::mutex> lock(selection_mu());
        auto it = cache->find(f);
        if (it != cache->end()) return it->second;
    }
    Selection s;
    s.name = kernel_name(f, &s.resolved);
    s.selected = !s.name.empty() && std::regex_search(s.name, config().kernel);
    std::lock_guard<std::mutex> lock(selection_mu());
    (*cache)[f] = s;
    return s;
}

// The module or library that defines a launched handle (mu() held); nullptr when unknown.
void *owner_of_launch(CUfunction f, CUfunction resolved) {
    Modules &m = modules();
    for (void *h : {static_cast<void *>(f), static_cast<void *>(resolved)}) {
        auto it = m.owner_of.find(h);
        if (it != m.owner_of.end()) return canonical_owner(it->second);
    }
    DRV(cuKernelGetLibrary);
    DRV(cuFuncGetModule);
    CUlibrary lib = nullptr;
    if (f != resolved && p_cuKernelGetLibrary &&
        p_cuKernelGetLibrary(&lib, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS && lib)
        return lib;
    CUmodule mod = nullptr;
    if (!p_cuFuncGetModule || p_cuFuncGetModule(&mod, resolved) != CUDA_SUCCESS || !mod) return nullptr;
    // A CUfunction of a library's kernel that reached the launch without the recorder seeing it taken
    // (a kernel node's function, read back from a graph): its module is the library's in this context.
    DRV(cuLibraryGetModule);
    if (!m.library_of.count(mod) && !m.image_of.count(mod) && p_cuLibraryGetModule) {
        for (void *library : m.libraries) {
            CUmodule of = nullptr;
            if (p_cuLibraryGetModule(&of, static_cast<CUlibrary>(library)) == CUDA_SUCCESS && of == mod) {
                m.library_of[mod] = library;
                break;
            }
        }
    }
    return canonical_owner(mod);
}

// The packed parameter buffer and each parameter's (offset, size).
bool pack_args(CUfunction fn, void **params, void **extra, std::string &buffer,
               std::vector<std::pair<size_t, size_t>> &layout) {
    DRV(cuFuncGetParamInfo);
    for (size_t i = 0; p_cuFuncGetParamInfo; ++i) {
        size_t off = 0, size = 0;
        if (p_cuFuncGetParamInfo(fn, i, &off, &size) != CUDA_SUCCESS) break;
        layout.emplace_back(off, size);
    }
    size_t total = 0;
    for (auto &p : layout) total = std::max(total, p.first + p.second);
    if (params) {
        buffer.assign(total, '\0');
        for (size_t i = 0; i < layout.size(); ++i)
            memcpy(&buffer[layout[i].first], params[i], layout[i].second);
        return true;
    }
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            size_t size = total;
            for (size_t j = 0; extra[j] != CU_LAUNCH_PARAM_END; j += 2)
                if (extra[j] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t *>(extra[j + 1]);
            buffer.assign(static_cast<const char *>(extra[i + 1]), size);
            return true;
        }
    }
    return layout.empty();
}
