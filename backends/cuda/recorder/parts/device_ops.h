// ---- the engine's device operations, with the driver ----------------------------------------------
//
// The placement zone and the capture writer (the engine's zone.h, capture.h) call the device
// through mneme_device_ops (device_ops.h); these are the driver calls they made before the engine
// moved to the core, one for one. A missing entry point reads as a failed call.

int op_current_device(int *device) {
    DRV(cuCtxGetDevice);
    CUdevice d = 0;
    if (!p_cuCtxGetDevice) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuCtxGetDevice(&d);
    *device = (int)d;
    return r;
}

CUmemAllocationProp device_memory(int device) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

int op_granularity(int device, size_t *bytes) {
    DRV(cuMemGetAllocationGranularity);
    CUmemAllocationProp prop = device_memory(device);
    if (!p_cuMemGetAllocationGranularity) return CUDA_ERROR_NOT_FOUND;
    return p_cuMemGetAllocationGranularity(bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

int op_address_reserve(uint64_t *got, size_t size, uint64_t at) {
    DRV(cuMemAddressReserve);
    CUdeviceptr p = 0;
    if (!p_cuMemAddressReserve) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuMemAddressReserve(&p, size, 0, at, 0);
    *got = p;
    return r;
}

void op_address_free(uint64_t addr, size_t size) {
    DRV(cuMemAddressFree);
    if (p_cuMemAddressFree) p_cuMemAddressFree(addr, size);
}

int op_mem_create(uint64_t *handle, size_t size, int device) {
    DRV(cuMemCreate);
    CUmemAllocationProp prop = device_memory(device);
    CUmemGenericAllocationHandle h = 0;
    if (!p_cuMemCreate) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuMemCreate(&h, size, &prop, 0);
    *handle = h;
    return r;
}

int op_mem_map(uint64_t addr, size_t size, uint64_t handle) {
    DRV(cuMemMap);
    return p_cuMemMap ? p_cuMemMap(addr, size, 0, handle, 0) : CUDA_ERROR_NOT_FOUND;
}

int op_mem_set_access(uint64_t addr, size_t size, int device) {
    DRV(cuMemSetAccess);
    CUmemAccessDesc access = {};
    access.location = device_memory(device).location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return p_cuMemSetAccess ? p_cuMemSetAccess(addr, size, &access, 1) : CUDA_ERROR_NOT_FOUND;
}

void op_mem_unmap(uint64_t addr, size_t size) {
    DRV(cuMemUnmap);
    if (p_cuMemUnmap) p_cuMemUnmap(addr, size);
}

void op_mem_release(uint64_t handle) {
    DRV(cuMemRelease);
    if (p_cuMemRelease) p_cuMemRelease(handle);
}

int op_mem_info(size_t *free_bytes, size_t *total) {
    DRV(cuMemGetInfo_v2);
    return p_cuMemGetInfo_v2 ? p_cuMemGetInfo_v2(free_bytes, total) : CUDA_ERROR_NOT_FOUND;
}

int op_synchronize() {
    DRV(cuCtxSynchronize);
    return p_cuCtxSynchronize ? p_cuCtxSynchronize() : CUDA_ERROR_NOT_FOUND;
}

void *op_current_context() {
    DRV(cuCtxGetCurrent);
    CUcontext c = nullptr;
    if (p_cuCtxGetCurrent) p_cuCtxGetCurrent(&c);
    return c;
}

void op_set_context(void *context) {
    DRV(cuCtxSetCurrent);
    if (p_cuCtxSetCurrent) p_cuCtxSetCurrent(static_cast<CUcontext>(context));
}

int op_stream_create(void **stream) {
    DRV(cuStreamCreate);
    CUstream s = nullptr;
    if (!p_cuStreamCreate) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    *stream = s;
    return r;
}

int op_stream_synchronize(void *stream) {
    DRV(cuStreamSynchronize);
    return p_cuStreamSynchronize ? p_cuStreamSynchronize(static_cast<CUstream>(stream)) : CUDA_ERROR_NOT_FOUND;
}

int op_stream_wait_event(void *stream, void *event) {
    DRV(cuStreamWaitEvent);
    return p_cuStreamWaitEvent ? p_cuStreamWaitEvent(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0)
                               : CUDA_ERROR_NOT_FOUND;
}

int op_event_create(void **event) {
    DRV(cuEventCreate);
    CUevent e = nullptr;
    if (!p_cuEventCreate) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    *event = e;
    return r;
}

int op_event_record(void *event, void *stream) {
    DRV(cuEventRecord);
    return p_cuEventRecord ? p_cuEventRecord(static_cast<CUevent>(event), static_cast<CUstream>(stream))
                           : CUDA_ERROR_NOT_FOUND;
}

int op_event_query(void *event) {
    DRV(cuEventQuery);
    return p_cuEventQuery ? p_cuEventQuery(static_cast<CUevent>(event)) : CUDA_ERROR_NOT_FOUND;
}

int op_event_synchronize(void *event) {
    DRV(cuEventSynchronize);
    return p_cuEventSynchronize ? p_cuEventSynchronize(static_cast<CUevent>(event)) : CUDA_ERROR_NOT_FOUND;
}

void op_event_destroy(void *event) {
    DRV(cuEventDestroy_v2);
    if (p_cuEventDestroy_v2) p_cuEventDestroy_v2(static_cast<CUevent>(event));
}

int op_host_alloc_pinned(void **host, size_t size) {
    DRV(cuMemAllocHost_v2);
    return p_cuMemAllocHost_v2 ? p_cuMemAllocHost_v2(host, size) : CUDA_ERROR_NOT_FOUND;
}

int op_copy_to_host(void *dst, uint64_t src, size_t size) {
    DRV(cuMemcpyDtoH_v2);
    return p_cuMemcpyDtoH_v2 ? p_cuMemcpyDtoH_v2(dst, src, size) : CUDA_ERROR_NOT_FOUND;
}

int op_copy_to_host_async(void *dst, uint64_t src, size_t size, void *stream) {
    DRV(cuMemcpyDtoHAsync_v2);
    return p_cuMemcpyDtoHAsync_v2 ? p_cuMemcpyDtoHAsync_v2(dst, src, size, static_cast<CUstream>(stream))
                                  : CUDA_ERROR_NOT_FOUND;
}

int op_copy_on_device_async(uint64_t dst, uint64_t src, size_t size, void *stream) {
    DRV(cuMemcpyDtoDAsync_v2);
    return p_cuMemcpyDtoDAsync_v2 ? p_cuMemcpyDtoDAsync_v2(dst, src, size, static_cast<CUstream>(stream))
                                  : CUDA_ERROR_NOT_FOUND;
}

int op_pool_create(void **pool, int device) {
    DRV(cuMemPoolCreate);
    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    CUmemoryPool p = nullptr;
    if (!p_cuMemPoolCreate) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuMemPoolCreate(&p, &props);
    // Its memory stays mapped through synchronizations (the default threshold, 0, unmaps what is free at
    // every one): the recorder gives it back itself, when no recording runs (capture.h, trim_when_idle).
    DRV(cuMemPoolSetAttribute);
    cuuint64_t keep = ~(cuuint64_t)0;
    if (r == CUDA_SUCCESS && p_cuMemPoolSetAttribute) p_cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    *pool = p;
    return r;
}

int op_pool_alloc_async(uint64_t *ptr, size_t size, void *pool, void *stream) {
    DRV(cuMemAllocFromPoolAsync);
    CUdeviceptr p = 0;
    if (!p_cuMemAllocFromPoolAsync) return CUDA_ERROR_NOT_FOUND;
    CUresult r = p_cuMemAllocFromPoolAsync(&p, size, static_cast<CUmemoryPool>(pool), static_cast<CUstream>(stream));
    *ptr = p;
    return r;
}

int op_free_async(uint64_t ptr, void *stream) {
    DRV(cuMemFreeAsync);
    return p_cuMemFreeAsync ? p_cuMemFreeAsync(ptr, static_cast<CUstream>(stream)) : CUDA_ERROR_NOT_FOUND;
}

void op_pool_trim(void *pool) {
    DRV(cuMemPoolTrimTo);
    if (p_cuMemPoolTrimTo) p_cuMemPoolTrimTo(static_cast<CUmemoryPool>(pool), 0);
}

const mneme_device_ops &cuda_ops() {
    static const mneme_device_ops ops =
        DEVICE_OPS_TABLE("CUDA", "mneme-cuda-recorder 0.3", CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_READY);
    return ops;
}
