// ---- the real HIP runtime, and the engine's device operations over it ------------------------------

// The runtime's own entry point for `name`, or nullptr: the next definition after this library's,
// else libamdhip64's where the process opened it without RTLD_GLOBAL (hip-python, a plugin),
// which RTLD_NEXT does not search.
template <typename F>
F runtime_fn(const char *name) {
    if (void *p = dlsym(RTLD_NEXT, name)) return reinterpret_cast<F>(p);
    for (const char *lib : {"libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so.5", "libamdhip64.so"})
        if (void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD))
            if (void *p = dlsym(h, name)) return reinterpret_cast<F>(p);
    return nullptr;
}

#define HIP(name, type) static auto p_##name = runtime_fn<type>(#name)
#define MISSING hipErrorNotFound

int op_current_device(int *device) {
    HIP(hipGetDevice, hipError_t (*)(int *));
    return p_hipGetDevice ? p_hipGetDevice(device) : MISSING;
}

hipMemAllocationProp device_memory(int device) {
    hipMemAllocationProp prop = {};
    prop.type = 1;           // hipMemAllocationTypePinned
    prop.location.type = 1;  // hipMemLocationTypeDevice
    prop.location.id = device;
    return prop;
}

int op_granularity(int device, size_t *bytes) {
    HIP(hipMemGetAllocationGranularity, hipError_t (*)(size_t *, const hipMemAllocationProp *, int));
    hipMemAllocationProp prop = device_memory(device);
    return p_hipMemGetAllocationGranularity ? p_hipMemGetAllocationGranularity(bytes, &prop, 0) : MISSING;
}

int op_address_reserve(uint64_t *got, size_t size, uint64_t at) {
    HIP(hipMemAddressReserve, hipError_t (*)(void **, size_t, size_t, void *, unsigned long long));
    void *p = nullptr;
    if (!p_hipMemAddressReserve) return MISSING;
    int r = p_hipMemAddressReserve(&p, size, 0, reinterpret_cast<void *>(at), 0);
    *got = reinterpret_cast<uint64_t>(p);
    return r;
}

void op_address_free(uint64_t addr, size_t size) {
    HIP(hipMemAddressFree, hipError_t (*)(void *, size_t));
    if (p_hipMemAddressFree) p_hipMemAddressFree(reinterpret_cast<void *>(addr), size);
}

int op_mem_create(uint64_t *handle, size_t size, int device) {
    HIP(hipMemCreate, hipError_t (*)(hipMemGenericAllocationHandle_t *, size_t, const hipMemAllocationProp *,
                                     unsigned long long));
    hipMemAllocationProp prop = device_memory(device);
    hipMemGenericAllocationHandle_t h = nullptr;
    if (!p_hipMemCreate) return MISSING;
    int r = p_hipMemCreate(&h, size, &prop, 0);
    *handle = reinterpret_cast<uint64_t>(h);
    return r;
}

int op_mem_map(uint64_t addr, size_t size, uint64_t handle) {
    HIP(hipMemMap, hipError_t (*)(void *, size_t, size_t, hipMemGenericAllocationHandle_t, unsigned long long));
    return p_hipMemMap ? p_hipMemMap(reinterpret_cast<void *>(addr), size, 0,
                                     reinterpret_cast<hipMemGenericAllocationHandle_t>(handle), 0)
                       : MISSING;
}

int op_mem_set_access(uint64_t addr, size_t size, int device) {
    HIP(hipMemSetAccess, hipError_t (*)(void *, size_t, const hipMemAccessDesc *, size_t));
    hipMemAccessDesc access = {};
    access.location = device_memory(device).location;
    access.flags = 3;  // hipMemAccessFlagsProtReadWrite
    return p_hipMemSetAccess ? p_hipMemSetAccess(reinterpret_cast<void *>(addr), size, &access, 1) : MISSING;
}

void op_mem_unmap(uint64_t addr, size_t size) {
    HIP(hipMemUnmap, hipError_t (*)(void *, size_t));
    if (p_hipMemUnmap) p_hipMemUnmap(reinterpret_cast<void *>(addr), size);
}

void op_mem_release(uint64_t handle) {
    HIP(hipMemRelease, hipError_t (*)(hipMemGenericAllocationHandle_t));
    if (p_hipMemRelease) p_hipMemRelease(reinterpret_cast<hipMemGenericAllocationHandle_t>(handle));
}

int op_mem_info(size_t *free_bytes, size_t *total) {
    HIP(hipMemGetInfo, hipError_t (*)(size_t *, size_t *));
    return p_hipMemGetInfo ? p_hipMemGetInfo(free_bytes, total) : MISSING;
}

int op_synchronize() {
    HIP(hipDeviceSynchronize, hipError_t (*)());
    return p_hipDeviceSynchronize ? p_hipDeviceSynchronize() : MISSING;
}

// HIP has no contexts to carry to the writer thread: the current device stands for one (its
// number + 1, so that device 0 is not a null pointer).
void *op_current_context() {
    int device = 0;
    return op_current_device(&device) == 0 ? reinterpret_cast<void *>(static_cast<intptr_t>(device) + 1) : nullptr;
}

void op_set_context(void *context) {
    HIP(hipSetDevice, hipError_t (*)(int));
    if (context && p_hipSetDevice) p_hipSetDevice(static_cast<int>(reinterpret_cast<intptr_t>(context) - 1));
}

int op_stream_create(void **stream) {
    HIP(hipStreamCreateWithFlags, hipError_t (*)(hipStream_t *, unsigned));
    return p_hipStreamCreateWithFlags ? p_hipStreamCreateWithFlags(stream, hipStreamNonBlocking) : MISSING;
}

int op_stream_synchronize(void *stream) {
    HIP(hipStreamSynchronize, hipError_t (*)(hipStream_t));
    return p_hipStreamSynchronize ? p_hipStreamSynchronize(stream) : MISSING;
}

int op_stream_wait_event(void *stream, void *event) {
    HIP(hipStreamWaitEvent, hipError_t (*)(hipStream_t, hipEvent_t, unsigned));
    return p_hipStreamWaitEvent ? p_hipStreamWaitEvent(stream, event, 0) : MISSING;
}

int op_event_create(void **event) {
    HIP(hipEventCreateWithFlags, hipError_t (*)(hipEvent_t *, unsigned));
    return p_hipEventCreateWithFlags ? p_hipEventCreateWithFlags(event, hipEventDisableTiming) : MISSING;
}

int op_event_record(void *event, void *stream) {
    HIP(hipEventRecord, hipError_t (*)(hipEvent_t, hipStream_t));
    return p_hipEventRecord ? p_hipEventRecord(event, stream) : MISSING;
}

int op_event_query(void *event) {
    HIP(hipEventQuery, hipError_t (*)(hipEvent_t));
    return p_hipEventQuery ? p_hipEventQuery(event) : MISSING;
}

int op_event_synchronize(void *event) {
    HIP(hipEventSynchronize, hipError_t (*)(hipEvent_t));
    return p_hipEventSynchronize ? p_hipEventSynchronize(event) : MISSING;
}

void op_event_destroy(void *event) {
    HIP(hipEventDestroy, hipError_t (*)(hipEvent_t));
    if (p_hipEventDestroy) p_hipEventDestroy(event);
}

int op_host_alloc_pinned(void **host, size_t size) {
    HIP(hipHostMalloc, hipError_t (*)(void **, size_t, unsigned));
    return p_hipHostMalloc ? p_hipHostMalloc(host, size, 0) : MISSING;
}

int op_copy_to_host(void *dst, uint64_t src, size_t size) {
    HIP(hipMemcpyDtoH, hipError_t (*)(void *, hipDeviceptr_t, size_t));
    return p_hipMemcpyDtoH ? p_hipMemcpyDtoH(dst, reinterpret_cast<hipDeviceptr_t>(src), size) : MISSING;
}

int op_copy_to_host_async(void *dst, uint64_t src, size_t size, void *stream) {
    HIP(hipMemcpyDtoHAsync, hipError_t (*)(void *, hipDeviceptr_t, size_t, hipStream_t));
    return p_hipMemcpyDtoHAsync ? p_hipMemcpyDtoHAsync(dst, reinterpret_cast<hipDeviceptr_t>(src), size, stream)
                                : MISSING;
}

int op_copy_on_device_async(uint64_t dst, uint64_t src, size_t size, void *stream) {
    HIP(hipMemcpyDtoDAsync, hipError_t (*)(hipDeviceptr_t, hipDeviceptr_t, size_t, hipStream_t));
    return p_hipMemcpyDtoDAsync ? p_hipMemcpyDtoDAsync(reinterpret_cast<hipDeviceptr_t>(dst),
                                                       reinterpret_cast<hipDeviceptr_t>(src), size, stream)
                                : MISSING;
}

int op_pool_create(void **pool, int device) {
    HIP(hipMemPoolCreate, hipError_t (*)(hipMemPool_t *, const hipMemPoolProps *));
    hipMemPoolProps props = {};
    props.allocType = 1;
    props.location.type = 1;
    props.location.id = device;
    if (!p_hipMemPoolCreate) return MISSING;
    int r = p_hipMemPoolCreate(pool, &props);
    // Its memory stays mapped through synchronizations; the recorder trims it itself (capture.h, trim_when_idle).
    HIP(hipMemPoolSetAttribute, hipError_t (*)(hipMemPool_t, int, void *));
    uint64_t keep = ~(uint64_t)0;
    if (r == 0 && p_hipMemPoolSetAttribute) p_hipMemPoolSetAttribute(*pool, hipMemPoolAttrReleaseThreshold, &keep);
    return r;
}

int op_pool_alloc_async(uint64_t *ptr, size_t size, void *pool, void *stream) {
    HIP(hipMallocFromPoolAsync, hipError_t (*)(void **, size_t, hipMemPool_t, hipStream_t));
    void *p = nullptr;
    if (!p_hipMallocFromPoolAsync) return MISSING;
    int r = p_hipMallocFromPoolAsync(&p, size, pool, stream);
    *ptr = reinterpret_cast<uint64_t>(p);
    return r;
}

int op_free_async(uint64_t ptr, void *stream) {
    HIP(hipFreeAsync, hipError_t (*)(void *, hipStream_t));
    return p_hipFreeAsync ? p_hipFreeAsync(reinterpret_cast<void *>(ptr), stream) : MISSING;
}

void op_pool_trim(void *pool) {
    HIP(hipMemPoolTrimTo, hipError_t (*)(hipMemPool_t, size_t));
    if (p_hipMemPoolTrimTo) p_hipMemPoolTrimTo(pool, 0);
}

const mneme_device_ops &hip_ops() {
    static const mneme_device_ops ops =
        DEVICE_OPS_TABLE("HIP", "mneme-hip-recorder 0.1", hipErrorOutOfMemory, hipErrorNotReady);
    return ops;
}
