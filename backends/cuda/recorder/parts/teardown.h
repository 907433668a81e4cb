// ---- context teardown ----------------------------------------------------------------------------
// cudaDeviceReset (cuDevicePrimaryCtxReset), the last cuDevicePrimaryCtxRelease and cuCtxDestroy free
// every allocation of the context, the recorder's shadows and reserved range included. Benchmark
// programs call cudaDeviceReset right after their last launch, while the writer still drains that
// launch's shadows: it would find them gone and the launch would be lost. So the writer drains and the
// last timings are read first; once the context holding the placed range is gone, allocations are no
// longer placed and recording stops, with one message (launches after it cannot be replayed).

using ctx_destroy_t = CUresult (*)(CUcontext);
using primary_t = CUresult (*)(CUdevice);
ctx_destroy_t real_ctx_destroy = nullptr;
primary_t real_primary_reset = nullptr, real_primary_release = nullptr;

void before_teardown() {
    if (!tracking()) return;
    wait_for_writer();
    std::lock_guard<std::mutex> lock(mu());
    reap_timings(true);
}

void forget_flush_buffer(CUcontext ctx);
void forget_image_modules(CUcontext ctx);

// The context that held the placed range is gone (mu() not held). `how`: what the application did,
// for the message; nullptr: say nothing (cudart releases its primary contexts at exit, which is no news).
void after_teardown(CUcontext gone, const char *how) {
    std::lock_guard<std::mutex> lock(mu());
    forget_flush_buffer(gone);
    forget_image_modules(gone);
    Placement &p = placement();
    if (!p.ok || (zone_context && gone != zone_context)) return;
    p.ok = false;  // tried stays set: later allocations come from the driver, unplaced
    p.live.clear();
    deferred_frees().clear();
    if (!tracking()) return;
    if (how)
        stop_recording("the application destroyed its device context (%s); launches after it are not recorded", how);
    else
        disabled = true;
}

CUcontext primary_of(CUdevice dev) {
    DRV(cuDevicePrimaryCtxRetain);
    DRV(cuDevicePrimaryCtxRelease_v2);
    CUcontext ctx = nullptr;
    // Retain + release of a primary context that is active leaves it as it was.
    if (p_cuDevicePrimaryCtxRetain && p_cuDevicePrimaryCtxRelease_v2 &&
        p_cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS)
        p_cuDevicePrimaryCtxRelease_v2(dev);
    return ctx;
}

bool primary_active(CUdevice dev) {
    DRV(cuDevicePrimaryCtxGetState);
    unsigned flags = 0;
    int active = 0;
    return p_cuDevicePrimaryCtxGetState && p_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active;
}

CUresult w_primary_reset(CUdevice dev) {
    auto fn = resolve_real(real_primary_reset, "cuDevicePrimaryCtxReset_v2");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    if (!primary_active(dev)) return fn(dev);
    CUcontext ctx = primary_of(dev);
    before_teardown();
    CUresult r = fn(dev);
    if (r == CUDA_SUCCESS) after_teardown(ctx, "cudaDeviceReset / cuDevicePrimaryCtxReset");
    return r;
}

CUresult w_primary_release(CUdevice dev) {
    auto fn = resolve_real(real_primary_release, "cuDevicePrimaryCtxRelease_v2");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    if (!primary_active(dev)) return fn(dev);
    CUcontext ctx = primary_of(dev);
    // Only the last release destroys it, and which one is last shows only afterwards: drain before each.
    before_teardown();
    CUresult r = fn(dev);
    if (r == CUDA_SUCCESS && !primary_active(dev)) after_teardown(ctx, nullptr);
    return r;
}

CUresult w_ctx_destroy(CUcontext ctx) {
    auto fn = resolve_real(real_ctx_destroy, "cuCtxDestroy_v2");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    before_teardown();
    CUresult r = fn(ctx);
    if (r == CUDA_SUCCESS) after_teardown(ctx, "cuCtxDestroy");
    return r;
}
