// ---- placement of allocations -----------------------------------------------------------------
//
// The zone itself (the reserved range, mapping at the cursor, deferred frees) is the engine's
// zone.h; here the driver's allocation entry points enter it, or pass through when it cannot be had.

void reap_timings(bool wait);
CUcontext zone_context = nullptr;  // current when the range was reserved (mu() held)

CUresult placed_alloc(CUdeviceptr *dptr, size_t size) {
    std::lock_guard<std::mutex> lock(mu());
    reap_deferred_frees();
    reap_timings(false);
    bool first = !placement().tried;
    if (!reserve_range()) return real().mem_alloc(dptr, size);
    if (first) zone_context = static_cast<CUcontext>(device_ops().current_context());
    uint64_t addr = 0;
    CUresult r = static_cast<CUresult>(zone_alloc(&addr, size));
    if (r == CUDA_SUCCESS) *dptr = addr;
    return r;
}

CUresult placed_free(CUdeviceptr ptr) {
    std::unique_lock<std::mutex> lock(mu());
    reap_deferred_frees();
    reap_timings(false);
    auto it = placement().live.find(ptr);
    if (it == placement().live.end()) {
        lock.unlock();
        return real().mem_free(ptr);
    }
    zone_free(it);  // synchronizes first: cudaFree's contract
    return CUDA_SUCCESS;
}
