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

// One launch timed, mu() and launch_mu() held, the device otherwise idle: seconds, or 0 with `why`.
template <typename Run>
double time_once(const std::string &kernel, CUstream stream, Run run, const char **why) {
    DRV(cuStreamSynchronize);
#ifdef MNEME_CUPTI
    KernelTimer &kt = kernel_timer();
    if (kt.ready) {
        uint64_t from = mct_now();
        mct_arm(from);
        CUresult r = run();
        bool ran = r == CUDA_SUCCESS && p_cuStreamSynchronize && p_cuStreamSynchronize(stream) == CUDA_SUCCESS;
        uint64_t to = mct_now();
        if (!ran) return *why = "the second launch failed", 0;
        mct_flush();
        uint64_t ns = 0;
        if (mct_take_window(kernel.c_str(), from, to, ~0u, &ns) != 1) return *why = "CUPTI gave no record of it", 0;
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

// LaunchHooks::retime for the launch of `fn` on `stream` (mu() held): restore, flush, time, restore.
template <typename Run>
void retime_launch(const std::string &kernel, uint64_t instance, CUstream stream, Run run, bool flush,
                   const std::function<bool(int)> &restore) {
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
    const char *why = nullptr;
    double seconds = 0;
    bool flushed = false;
    if (!restore(mneme_engine::PROLOGUE)) {
        why = "its prologue could not be copied back";
    } else {
        flushed = flush && flush_l2(stream);
        DRV(cuStreamSynchronize);
        if (flushed && p_cuStreamSynchronize) p_cuStreamSynchronize(stream);  // as the first: flush, synchronize, launch
        seconds = time_once(kernel, stream, run, &why);
    }
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
}
