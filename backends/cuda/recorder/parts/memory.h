// ---- pitched, stream-ordered and application-mapped memory ----------------------------------------

using managed_t = CUresult (*)(CUdeviceptr *, size_t, unsigned);
using pitch_t = CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
using async_t = CUresult (*)(CUdeviceptr *, size_t, CUstream);
using pool_t = CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
using free_async_t = CUresult (*)(CUdeviceptr, CUstream);
using va_reserve_t = CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
using va_free_t = CUresult (*)(CUdeviceptr, size_t);
using mem_map_t = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
using mem_unmap_t = CUresult (*)(CUdeviceptr, size_t);
using set_access_t = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

struct RealMemory {
    managed_t managed = nullptr;
    pitch_t pitch = nullptr;
    async_t async = nullptr, async_ptsz = nullptr;
    pool_t pool = nullptr, pool_ptsz = nullptr;
    free_async_t free_async = nullptr, free_async_ptsz = nullptr;
    va_reserve_t va_reserve = nullptr;
    va_free_t va_free = nullptr;
    mem_map_t map = nullptr;
    mem_unmap_t unmap = nullptr;
    set_access_t set_access = nullptr;
};

RealMemory &real_memory() {
    static auto *r = new RealMemory();
    return *r;
}

// ---- memory kernels may read that recordings do not hold --------------------------------------
//
// Managed memory and pinned host memory (which kernels reach through unified addressing, or
// through the alias cuMemHostGetDevicePointer gives) are not placed in the recorded range and
// not captured: a replay has nothing at those addresses. Their ranges are kept here, and a
// recorded launch that passes a pointer into one of them as an argument is warned about once
// per allocation, naming it. Pointers the kernel finds inside device memory are not followed.

struct OutsideRange {
    uint64_t size;
    std::string how;        // e.g. "pinned host memory (cuMemHostAlloc)"
    uint64_t alias_of = 0;  // a device alias: the start of the host range it aliases
};

using OutsideRanges = std::map<uint64_t, OutsideRange>;

std::mutex &outside_mu() {
    static auto *m = new std::mutex();
    return *m;
}

OutsideRanges &outside() {
    static auto *r = new OutsideRanges();
    return *r;
}

void outside_add(uint64_t start, uint64_t size, const std::string &how, uint64_t alias_of = 0) {
    if (!start || !size) return;
    std::lock_guard<std::mutex> lock(outside_mu());
    outside()[start] = OutsideRange{size, how, alias_of};
}

// Forget the range starting at `start`, and the device aliases made of it.
void outside_remove(uint64_t start) {
    std::lock_guard<std::mutex> lock(outside_mu());
    if (outside().empty() || !outside().erase(start)) return;
    for (auto a = outside().begin(); a != outside().end();)
        a = a->second.alias_of == start ? outside().erase(a) : std::next(a);
}

// The range of `ranges` holding `addr`, or ranges.end().
OutsideRanges::const_iterator outside_find(const OutsideRanges &ranges, uint64_t addr) {
    auto it = ranges.upper_bound(addr);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return addr - it->first < it->second.size ? it : ranges.end();
}

// The pointer-sized parameters of a launch that point into `ranges`: (parameter index, range start).
std::vector<std::pair<size_t, uint64_t>> outside_params(const OutsideRanges &ranges, const std::string &args,
                                                        const std::vector<std::pair<size_t, size_t>> &layout) {
    std::vector<std::pair<size_t, uint64_t>> hits;
    for (size_t i = 0; i < layout.size() && !ranges.empty(); ++i) {
        if (layout[i].second != sizeof(uint64_t) || layout[i].first + sizeof(uint64_t) > args.size()) continue;
        uint64_t value;
        memcpy(&value, args.data() + layout[i].first, sizeof value);
        auto it = outside_find(ranges, value);
        if (it != ranges.end()) hits.emplace_back(i, it->first);
    }
    return hits;
}

// Whether any argument points outside the recorded memory (each such allocation warned about once).
bool warn_outside_args(const std::string &kernel, const std::string &args,
                       const std::vector<std::pair<size_t, size_t>> &layout) {
    std::vector<std::pair<size_t, uint64_t>> hits;
    OutsideRanges named;  // copies of the ranges hit, so the warning needs no lock
    {
        std::lock_guard<std::mutex> lock(outside_mu());
        hits = outside_params(outside(), args, layout);
        for (auto &h : hits) named.insert(*outside().find(h.second));
    }
    for (auto &h : hits) {
        const OutsideRange &r = named.at(h.second);
        char key[48];
        snprintf(key, sizeof key, "outside:%llx", (unsigned long long)h.second);
        warn_once(key, "kernel %s, argument %zu points into %s of %llu bytes at 0x%llx: recordings hold device "
                  "memory only, so a replay has nothing there and will fault or read other data (this warning is "
                  "given once per allocation)",
                  kernel.c_str(), h.first, r.how.c_str(), (unsigned long long)r.size, (unsigned long long)h.second);
    }
    return !hits.empty();
}

CUresult w_alloc_managed(CUdeviceptr *dptr, size_t size, unsigned flags) {
    warn_once("managed", "managed memory (cuMemAllocManaged) of %zu bytes (and any later ones) is not placed in the "
              "recorded range: kernels using it are recorded without it and will not replay correctly", size);
    CUresult r = resolve_real(real_memory().managed, "cuMemAllocManaged")(dptr, size, flags);
    if (r == CUDA_SUCCESS && dptr) outside_add(*dptr, size, "managed memory (cuMemAllocManaged)");
    return r;
}

using host_alloc_t = CUresult (*)(void **, size_t, unsigned);
using alloc_host_t = CUresult (*)(void **, size_t);
using host_register_t = CUresult (*)(void *, size_t, unsigned);
using host_release_t = CUresult (*)(void *);
using host_device_ptr_t = CUresult (*)(CUdeviceptr *, void *, unsigned);

struct RealHost {
    host_alloc_t host_alloc = nullptr;
    alloc_host_t alloc_host = nullptr;
    host_register_t host_register = nullptr;
    host_release_t free_host = nullptr, unregister = nullptr;
    host_device_ptr_t device_ptr = nullptr;
};

RealHost &real_host() {
    static auto *r = new RealHost();
    return *r;
}

uint64_t host_addr(const void *p) { return reinterpret_cast<uint64_t>(p); }

CUresult w_host_alloc(void **pp, size_t size, unsigned flags) {
    CUresult r = resolve_real(real_host().host_alloc, "cuMemHostAlloc")(pp, size, flags);
    if (r == CUDA_SUCCESS && pp) outside_add(host_addr(*pp), size, "pinned host memory (cuMemHostAlloc)");
    return r;
}

CUresult w_alloc_host(void **pp, size_t size) {
    CUresult r = resolve_real(real_host().alloc_host, "cuMemAllocHost_v2")(pp, size);
    if (r == CUDA_SUCCESS && pp) outside_add(host_addr(*pp), size, "pinned host memory (cuMemAllocHost)");
    return r;
}

CUresult w_host_register(void *p, size_t size, unsigned flags) {
    CUresult r = resolve_real(real_host().host_register, "cuMemHostRegister_v2")(p, size, flags);
    if (r == CUDA_SUCCESS) outside_add(host_addr(p), size, "registered host memory (cuMemHostRegister)");
    return r;
}

CUresult w_free_host(void *p) {
    outside_remove(host_addr(p));
    return resolve_real(real_host().free_host, "cuMemFreeHost")(p);
}

CUresult w_host_unregister(void *p) {
    outside_remove(host_addr(p));
    return resolve_real(real_host().unregister, "cuMemHostUnregister")(p);
}

// Where the device address of pinned host memory is not the host address, that alias is kept too.
CUresult w_host_device_ptr(CUdeviceptr *dptr, void *p, unsigned flags) {
    CUresult r = resolve_real(real_host().device_ptr, "cuMemHostGetDevicePointer_v2")(dptr, p, flags);
    if (r != CUDA_SUCCESS || !dptr || *dptr == host_addr(p)) return r;
    std::string how;
    uint64_t start = 0, size = 0, host = 0;
    {
        std::lock_guard<std::mutex> lock(outside_mu());
        auto it = outside_find(outside(), host_addr(p));
        if (it == outside().end()) return r;
        char at[40];
        snprintf(at, sizeof at, " at 0x%llx", (unsigned long long)it->first);
        how = "the device alias of " + it->second.how + at;
        host = it->first;
        start = *dptr - (host_addr(p) - host);
        size = it->second.size;
    }
    outside_add(start, size, how, host);
    return r;
}

// The pitch of a row of `width` bytes: `width` rounded up to `alignment` (a power of two or not).
uint64_t pitch_for(uint64_t width, uint64_t alignment) {
    if (alignment == 0) return width;
    return (width + alignment - 1) / alignment * alignment;
}

// cuMemAllocPitch, placed: the pitch the driver itself would choose (asked once per row width and
// element size with a one-row allocation that is freed at once), so the application lays its rows
// out as it does without the recorder; the device's texture pitch alignment when that fails.
CUresult w_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element) {
    ensure_plain();  // placed_alloc falls back to the driver's cuMemAlloc when the range cannot be had
    auto real_pitch = resolve_real(real_memory().pitch, "cuMemAllocPitch_v2");
    if (!config().place || !dptr || !pitch) return real_pitch(dptr, pitch, width, height, element);
    static std::mutex *m = new std::mutex();
    static auto *known = new std::map<std::pair<size_t, unsigned>, size_t>();
    size_t p = 0;
    {
        std::lock_guard<std::mutex> lock(*m);
        auto it = known->find({width, element});
        if (it != known->end()) p = it->second;
    }
    if (!p) {
        CUdeviceptr probe = 0;
        size_t probe_pitch = 0;
        CUresult r = real_pitch(&probe, &probe_pitch, width, 1, element);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) return r;  // invalid width or element size
        if (r == CUDA_SUCCESS) {
            DRV(cuMemFree_v2);
            p_cuMemFree_v2(probe);
            p = probe_pitch;
        } else {
            DRV(cuCtxGetDevice);
            DRV(cuDeviceGetAttribute);
            CUdevice device = 0;
            int alignment = 0;
            if (p_cuCtxGetDevice(&device) == CUDA_SUCCESS)
                p_cuDeviceGetAttribute(&alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, device);
            p = pitch_for(width, alignment > 0 ? alignment : 512);
        }
        std::lock_guard<std::mutex> lock(*m);
        (*known)[{width, element}] = p;
    }
    CUresult r = placed_alloc(dptr, p * height);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}

bool stream_capturing(CUstream s) {
    DRV(cuStreamIsCapturing);
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    return !p_cuStreamIsCapturing || p_cuStreamIsCapturing(s, &capture) != CUDA_SUCCESS ||
           capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Stream-ordered allocations are placed like cuMemAlloc: the memory exists at once, which
// satisfies "usable by work ordered after the call". Pools' attributes (release threshold, IPC,
// access from peers) do not apply to placed memory. Inside a stream capture the allocation
// becomes a graph node, which only the driver can make: those pass through.
CUresult alloc_async(async_t real_fn, CUdeviceptr *dptr, size_t size, CUstream s) {
    if (!config().place || stream_capturing(s)) return real_fn(dptr, size, s);
    ensure_plain();
    return placed_alloc(dptr, size);
}

CUresult w_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_async(resolve_real(real_memory().async, "cuMemAllocAsync"), dptr, size, s);
}

CUresult w_alloc_async_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_async(resolve_real(real_memory().async_ptsz, "cuMemAllocAsync_ptsz"), dptr, size, s);
}

CUresult w_alloc_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    auto fn = resolve_real(real_memory().pool, "cuMemAllocFromPoolAsync");
    if (!config().place || stream_capturing(s)) return fn(dptr, size, pool, s);
    ensure_plain();
    return placed_alloc(dptr, size);
}

CUresult w_alloc_pool_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    auto fn = resolve_real(real_memory().pool_ptsz, "cuMemAllocFromPoolAsync_ptsz");
    if (!config().place || stream_capturing(s)) return fn(dptr, size, pool, s);
    ensure_plain();
    return placed_alloc(dptr, size);
}

// cuMemFreeAsync of a placed allocation: it leaves the live set now (later recordings do not
// see it), and its memory is released once an event recorded on the stream has completed, so
// work queued before the free still finds it mapped. Never blocks the application.
CUresult free_async(free_async_t real_fn, CUdeviceptr ptr, CUstream s) {
    std::unique_lock<std::mutex> lock(mu());
    Placement &p = placement();
    auto it = p.live.find(ptr);
    if (it == p.live.end() || stream_capturing(s)) {
        lock.unlock();
        return real_fn(ptr, s);
    }
    DRV(cuEventCreate);
    DRV(cuEventRecord);
    DRV(cuEventDestroy_v2);
    CUevent done = nullptr;
    CUresult r = p_cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS && (r = p_cuEventRecord(done, s)) != CUDA_SUCCESS) p_cuEventDestroy_v2(done);
    if (r != CUDA_SUCCESS) return r;  // an invalid stream: the application's error, nothing freed
    zone_free_after(it, done);
    reap_timings(false);
    return CUDA_SUCCESS;
}

CUresult w_free_async(CUdeviceptr ptr, CUstream s) {
    return free_async(resolve_real(real_memory().free_async, "cuMemFreeAsync"), ptr, s);
}

CUresult w_free_async_ptsz(CUdeviceptr ptr, CUstream s) {
    return free_async(resolve_real(real_memory().free_async_ptsz, "cuMemFreeAsync_ptsz"), ptr, s);
}

// Virtual-memory mappings the application makes itself (PyTorch's expandable segments): its
// address reservations without an address of its own get a hint in the recorder's zone right
// above the placed range (MNEME_RECORD_VMM_SIZE bytes), so they land at the same addresses in
// every run; the driver honours hints for reservations of 64 MiB and more. What it maps there
// and makes accessible (cuMemSetAccess) is live memory for snapshots; cuMemUnmap and
// cuMemAddressFree take it out again.
struct AppMappings {
    uint64_t cursor = 0;                         // next hint in the zone
    std::map<uint64_t, uint64_t> reservations;  // the application's reservations: base -> end
    std::map<uint64_t, uint64_t> accessible;    // mapped and accessible bytes: start -> end, disjoint
};

AppMappings &app_mappings() {
    static auto *m = new AppMappings();
    return *m;
}

CUresult w_va_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    auto fn = resolve_real(real_memory().va_reserve, "cuMemAddressReserve");
    const Config &c = config();
    if (!ptr) return fn(ptr, size, alignment, addr, flags);
    std::lock_guard<std::mutex> lock(mu());
    AppMappings &m = app_mappings();
    uint64_t zone = c.va_base + c.va_size, zone_end = zone + c.vmm_size;
    if (!m.cursor) m.cursor = zone;
    uint64_t align = std::max<uint64_t>(alignment, 2u << 20);
    uint64_t hint = (m.cursor + align - 1) / align * align;
    bool zoned = c.place && addr == 0 && hint + size <= zone_end;
    CUresult r = fn(ptr, size, alignment, zoned ? hint : addr, flags);
    if (r != CUDA_SUCCESS) return r;
    if (zoned && *ptr == hint)
        m.cursor = hint + (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);  // never reused
    else if (c.place)
        warn_once("reserve", "the application reserved %zu bytes of device addresses at 0x%llx (%s); what it maps "
                  "there is recorded, but replay may not be able to reserve that range again", size,
                  (unsigned long long)*ptr,
                  addr ? "an address of its own" : zoned ? "the driver did not honour the recorder's hint"
                                                         : "the recorder's zone is full (MNEME_RECORD_VMM_SIZE)");
    m.reservations[*ptr] = *ptr + size;
    return r;
}

CUresult w_va_free(CUdeviceptr ptr, size_t size) {
    {
        std::lock_guard<std::mutex> lock(mu());
        AppMappings &m = app_mappings();
        interval_remove(m.accessible, ptr, ptr + size);
        m.reservations.erase(ptr);
    }
    return resolve_real(real_memory().va_free, "cuMemAddressFree")(ptr, size);
}

CUresult w_mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                   unsigned long long flags) {
    return resolve_real(real_memory().map, "cuMemMap")(ptr, size, offset, handle, flags);
}

CUresult w_mem_unmap(CUdeviceptr ptr, size_t size) {
    {
        std::lock_guard<std::mutex> lock(mu());
        interval_remove(app_mappings().accessible, ptr, ptr + size);
    }
    return resolve_real(real_memory().unmap, "cuMemUnmap")(ptr, size);
}

CUresult w_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    CUresult r = resolve_real(real_memory().set_access, "cuMemSetAccess")(ptr, size, desc, count);
    if (r != CUDA_SUCCESS || !desc) return r;
    std::lock_guard<std::mutex> lock(mu());
    AppMappings &m = app_mappings();
    auto it = m.reservations.upper_bound(ptr);
    if (it == m.reservations.begin() || (--it, ptr + size > it->second)) return r;  // not the application's range
    bool readable = false;
    for (size_t i = 0; i < count; ++i)
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            readable = true;
    if (readable)
        interval_add(m.accessible, ptr, ptr + size);
    else
        interval_remove(m.accessible, ptr, ptr + size);
    return r;
}

// The application's mapped bytes, as snapshot regions after the placed allocations (mu() held).
void append_mapped_regions(std::vector<std::pair<uint64_t, uint64_t>> &regions) {
    for (auto &a : app_mappings().accessible) regions.emplace_back(a.first, a.second - a.first);
}
