// ---- the interposed entry points of libamdhip64 ------------------------------------------------------

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

template <typename F>
F real(const char *name) {
    return runtime_fn<F>(name);
}

// An allocation placed in the zone, or the runtime's own when the zone cannot be had.
template <typename Fallback>
hipError_t placed_alloc(void **ptr, size_t size, Fallback fallback) {
    if (!ptr) return hipErrorInvalidValue;
    std::lock_guard<std::mutex> lock(mu());
    reap_deferred_frees();
    if (!reserve_range()) return fallback();
    uint64_t addr = 0;
    int r = zone_alloc(&addr, size);
    if (r == 0) *ptr = reinterpret_cast<void *>(addr);
    return r;
}

template <typename Fallback>
hipError_t placed_free(void *ptr, Fallback fallback) {
    std::unique_lock<std::mutex> lock(mu());
    reap_deferred_frees();
    auto it = placement().live.find(reinterpret_cast<uint64_t>(ptr));
    if (it == placement().live.end()) {
        lock.unlock();
        return fallback();
    }
    zone_free(it);  // synchronizes first: hipFree's contract
    return hipSuccess;
}

// A loaded module's image: `size` bytes, or as many as its header says (0: unknown, not kept).
void remember_module(hipModule_t module, const void *image, size_t size = 0) {
    if (!image) return;
    const auto *p = static_cast<const uint8_t *>(image);
    if (!size) size = image_size(p);
    if (!size) return;
    Image *img = add_image(p, size);
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().modules[module] = img;
}

const Kernel *kernel_of(const void *handle) {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().kernels.find(handle);
    return it == registry().kernels.end() ? nullptr : &it->second;
}

}  // namespace

EXPORT hipError_t hipMalloc(void **ptr, size_t size) {
    static auto fn = real<hipError_t (*)(void **, size_t)>("hipMalloc");
    return placed_alloc(ptr, size, [&] { return fn(ptr, size); });
}

EXPORT hipError_t hipExtMallocWithFlags(void **ptr, size_t size, unsigned flags) {
    static auto fn = real<hipError_t (*)(void **, size_t, unsigned)>("hipExtMallocWithFlags");
    return placed_alloc(ptr, size, [&] { return fn(ptr, size, flags); });
}

// Stream-ordered allocations are placed like hipMalloc: the memory exists at once, which satisfies
// "usable by work ordered after the call" (as on CUDA: docs/design/recording.md).
EXPORT hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t stream) {
    static auto fn = real<hipError_t (*)(void **, size_t, hipStream_t)>("hipMallocAsync");
    return placed_alloc(ptr, size, [&] { return fn(ptr, size, stream); });
}

EXPORT hipError_t hipMallocFromPoolAsync(void **ptr, size_t size, hipMemPool_t pool, hipStream_t stream) {
    static auto fn = real<hipError_t (*)(void **, size_t, hipMemPool_t, hipStream_t)>("hipMallocFromPoolAsync");
    return placed_alloc(ptr, size, [&] { return fn(ptr, size, pool, stream); });
}

EXPORT hipError_t hipFree(void *ptr) {
    static auto fn = real<hipError_t (*)(void *)>("hipFree");
    return placed_free(ptr, [&] { return fn(ptr); });
}

// hipFreeAsync of a placed allocation: out of the live set now, unmapped once the stream has passed it.
EXPORT hipError_t hipFreeAsync(void *ptr, hipStream_t stream) {
    static auto fn = real<hipError_t (*)(void *, hipStream_t)>("hipFreeAsync");
    std::unique_lock<std::mutex> lock(mu());
    auto it = placement().live.find(reinterpret_cast<uint64_t>(ptr));
    if (it == placement().live.end()) {
        lock.unlock();
        return fn(ptr, stream);
    }
    const mneme_device_ops &d = device_ops();
    void *done = nullptr;
    int r = d.event_create(&done);
    if (r == 0 && (r = d.event_record(done, stream)) != 0) d.event_destroy(done);
    if (r != 0) return r;
    zone_free_after(it, done);
    return hipSuccess;
}

// Code loading: each registered or loaded image is kept, with its kernels' arguments.
EXPORT void **__hipRegisterFatBinary(const void *data) {
    static auto fn = real<void **(*)(const void *)>("__hipRegisterFatBinary");
    void **modules = fn(data);
    const auto *wrapper = static_cast<const hip_fatbin_wrapper *>(data);
    if (modules && wrapper && wrapper->magic == HIP_FATBIN_WRAPPER_MAGIC && wrapper->binary) {
        const auto *p = static_cast<const uint8_t *>(wrapper->binary);
        if (size_t n = image_size(p)) {
            Image *img = add_image(p, n);
            std::lock_guard<std::mutex> lock(registry().mu);
            registry().modules[modules] = img;
        }
    }
    return modules;
}

EXPORT void __hipRegisterFunction(void **modules, const void *stub, char *device_fn, const char *device_name,
                                  unsigned thread_limit, void *tid, void *bid, void *block, void *grid, int *wsize) {
    static auto fn = real<void (*)(void **, const void *, char *, const char *, unsigned, void *, void *, void *,
                                   void *, int *)>("__hipRegisterFunction");
    fn(modules, stub, device_fn, device_name, thread_limit, tid, bid, block, grid, wsize);
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().modules.find(modules);
    registry().kernels[stub] = Kernel{device_fn ? device_fn : "", it == registry().modules.end() ? nullptr : it->second};
}

EXPORT void __hipRegisterVar(void **modules, void *var, char *host_var, char *device_var, int ext, size_t size,
                             int constant, int global) {
    static auto fn = real<void (*)(void **, void *, char *, char *, int, size_t, int, int)>("__hipRegisterVar");
    fn(modules, var, host_var, device_var, ext, size, constant, global);
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().modules.find(modules);
    if (it != registry().modules.end() && device_var && !ext) it->second->globals[device_var] = Global{var, 0, size};
}

// Managed device variables (__managed__): migrated memory the recorder neither places nor captures.
EXPORT void __hipRegisterManagedVar(void *module, void **pointer, void *init_value, const char *name, size_t size,
                                    unsigned align) {
    static auto fn = real<void (*)(void *, void **, void *, const char *, size_t, unsigned)>("__hipRegisterManagedVar");
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true) && !config().dir.empty())
        warn("__managed__ variable %s: managed memory is not placed nor captured; kernels that use it do not replay "
             "(later ones are not reported)", name ? name : "?");
    fn(module, pointer, init_value, name, size, align);
}

// A module's global the application looks up: captured with that module's launches.
EXPORT hipError_t hipModuleGetGlobal(hipDeviceptr_t *dptr, size_t *bytes, hipModule_t module, const char *name) {
    static auto fn = real<hipError_t (*)(hipDeviceptr_t *, size_t *, hipModule_t, const char *)>("hipModuleGetGlobal");
    size_t size = 0;
    hipError_t r = fn(dptr, bytes ? bytes : &size, module, name);
    if (r == hipSuccess && dptr && name) {
        std::lock_guard<std::mutex> lock(registry().mu);
        auto it = registry().modules.find(module);
        if (it != registry().modules.end())
            it->second->globals[name] = Global{nullptr, reinterpret_cast<uint64_t>(*dptr), bytes ? *bytes : size};
    }
    return r;
}

EXPORT hipError_t hipLaunchKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args, size_t shared,
                                  hipStream_t stream) {
    static auto fn = real<hipError_t (*)(const void *, hip_dim3, hip_dim3, void **, size_t, hipStream_t)>(
        "hipLaunchKernel");
    Launch l{grid, block, (unsigned)shared, stream};
    return record_launch(kernel_of(stub), l, args, nullptr,
                         [&] { return fn(stub, grid, block, args, shared, stream); });
}

EXPORT hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
    static auto fn = real<hipError_t (*)(hipModule_t *, const void *)>("hipModuleLoadData");
    hipError_t r = fn(module, image);
    if (r == hipSuccess) remember_module(*module, image);
    return r;
}

EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *name) {
    static auto fn = real<hipError_t (*)(hipFunction_t *, hipModule_t, const char *)>("hipModuleGetFunction");
    hipError_t r = fn(function, module, name);
    if (r == hipSuccess) {
        std::lock_guard<std::mutex> lock(registry().mu);
        auto it = registry().modules.find(module);
        registry().kernels[*function] = Kernel{name, it == registry().modules.end() ? nullptr : it->second};
    }
    return r;
}

EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared, hipStream_t stream, void **params,
                                        void **extra) {
    static auto fn = real<hipError_t (*)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                         unsigned, hipStream_t, void **, void **)>("hipModuleLaunchKernel");
    Launch l{{gx, gy, gz}, {bx, by, bz}, shared, stream};
    return record_launch(kernel_of(f), l, params, extra,
                         [&] { return fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

// HIP's extension: sizes in work-items (the grid times the block), and optional events around the launch.
EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
                                           uint32_t by, uint32_t bz, size_t shared, hipStream_t stream,
                                           void **params, void **extra, hipEvent_t start, hipEvent_t stop,
                                           uint32_t flags) {
    static auto fn = real<hipError_t (*)(hipFunction_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                                         size_t, hipStream_t, void **, void **, hipEvent_t, hipEvent_t, uint32_t)>(
        "hipExtModuleLaunchKernel");
    auto blocks = [](uint32_t global, uint32_t local) { return local ? (global + local - 1) / local : 0; };
    Launch l{{blocks(gx, bx), blocks(gy, by), blocks(gz, bz)}, {bx, by, bz}, (unsigned)shared, stream};
    return record_launch(kernel_of(f), l, params, extra, [&] {
        return fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, start, stop, flags);
    });
}

EXPORT hipError_t hipExtLaunchKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args, size_t shared,
                                     hipStream_t stream, hipEvent_t start, hipEvent_t stop, int flags) {
    static auto fn = real<hipError_t (*)(const void *, hip_dim3, hip_dim3, void **, size_t, hipStream_t, hipEvent_t,
                                         hipEvent_t, int)>("hipExtLaunchKernel");
    Launch l{grid, block, (unsigned)shared, stream};
    return record_launch(kernel_of(stub), l, args, nullptr,
                         [&] { return fn(stub, grid, block, args, shared, stream, start, stop, flags); });
}

EXPORT hipError_t hipLaunchCooperativeKernel(const void *stub, hip_dim3 grid, hip_dim3 block, void **args,
                                             unsigned shared, hipStream_t stream) {
    static auto fn = real<hipError_t (*)(const void *, hip_dim3, hip_dim3, void **, unsigned, hipStream_t)>(
        "hipLaunchCooperativeKernel");
    Launch l{grid, block, shared, stream};
    l.cooperative = true;
    return record_launch(kernel_of(stub), l, args, nullptr,
                         [&] { return fn(stub, grid, block, args, shared, stream); });
}

EXPORT hipError_t hipModuleLoadDataEx(hipModule_t *module, const void *image, unsigned n_options, int *options,
                                      void **values) {
    static auto fn = real<hipError_t (*)(hipModule_t *, const void *, unsigned, int *, void **)>("hipModuleLoadDataEx");
    hipError_t r = fn(module, image, n_options, options, values);
    if (r == hipSuccess) remember_module(*module, image);
    return r;
}

// hipModuleLoad: the file's bytes, read after the runtime has loaded it.
EXPORT hipError_t hipModuleLoad(hipModule_t *module, const char *path) {
    static auto fn = real<hipError_t (*)(hipModule_t *, const char *)>("hipModuleLoad");
    hipError_t r = fn(module, path);
    if (r != hipSuccess || !path) return r;
    FILE *f = fopen(path, "rb");
    if (!f) return r;
    std::string bytes;
    char chunk[65536];
    for (size_t got; (got = fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.append(chunk, got);
    fclose(f);
    if (bytes.size() >= 64) remember_module(*module, bytes.data(), bytes.size());
    return r;
}

// Memory the recorder does not place: said once each, the application runs on (as on CUDA).
EXPORT hipError_t hipMallocManaged(void **ptr, size_t size, unsigned flags) {
    static auto fn = real<hipError_t (*)(void **, size_t, unsigned)>("hipMallocManaged");
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true) && !config().dir.empty())
        warn("hipMallocManaged: managed memory is not placed nor captured; kernels that use it do not replay "
             "(later ones are not reported)");
    return fn(ptr, size, flags);
}

EXPORT hipError_t hipGraphLaunch(void *graph_exec, hipStream_t stream) {
    static auto fn = real<hipError_t (*)(void *, hipStream_t)>("hipGraphLaunch");
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true) && !config().dir.empty())
        warn("hipGraphLaunch: launches inside HIP graphs are not recorded (later ones are not reported)");
    return fn(graph_exec, stream);
}

// Pitched allocations, placed: the pitch the runtime itself would choose (asked once per row width
// with a one-row allocation freed at once), so the rows are laid out as without the recorder.
size_t runtime_pitch(size_t width) {
    static auto pitch_fn = real<hipError_t (*)(void **, size_t *, size_t, size_t)>("hipMallocPitch");
    static auto free_fn = real<hipError_t (*)(void *)>("hipFree");
    static std::mutex *m = new std::mutex();
    static auto *known = new std::map<size_t, size_t>();
    std::lock_guard<std::mutex> lock(*m);
    auto it = known->find(width);
    if (it != known->end()) return it->second;
    void *probe = nullptr;
    size_t pitch = 0;
    if (pitch_fn && pitch_fn(&probe, &pitch, width, 1) == hipSuccess) free_fn(probe);
    else pitch = (width + 255) / 256 * 256;
    return (*known)[width] = pitch;
}

EXPORT hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
    static auto fn = real<hipError_t (*)(void **, size_t *, size_t, size_t)>("hipMallocPitch");
    if (!config().place || !ptr || !pitch) return fn(ptr, pitch, width, height);
    size_t p = runtime_pitch(width);
    hipError_t r = placed_alloc(ptr, p * height, [&] { return fn(ptr, pitch, width, height); });
    if (r == hipSuccess) *pitch = p;
    return r;
}

struct hip_pitched_ptr {
    void *ptr;
    size_t pitch, xsize, ysize;
};
struct hip_extent {
    size_t width, height, depth;
};

EXPORT hipError_t hipMalloc3D(hip_pitched_ptr *out, hip_extent extent) {
    static auto fn = real<hipError_t (*)(hip_pitched_ptr *, hip_extent)>("hipMalloc3D");
    if (!config().place || !out) return fn(out, extent);
    size_t p = runtime_pitch(extent.width);
    void *ptr = nullptr;
    hipError_t r = placed_alloc(&ptr, p * extent.height * extent.depth, [&] { return fn(out, extent); });
    if (r == hipSuccess && ptr) *out = hip_pitched_ptr{ptr, p, extent.width, extent.height};
    return r;
}

// mneme_annotate (include/mneme_annotate.h, shared with CUDA): a placed allocation's verification policy.
EXPORT int mneme_recorder_annotate(const void *ptr, const char *dtype, double threshold, int relative,
                                   const char *norm, const char *tag) {
    Annotation a;
    if (!parse_annotation(dtype, threshold, relative, norm, tag, a)) return -2;
    uint64_t addr = reinterpret_cast<uint64_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto &live = placement().live;
    auto it = live.upper_bound(addr);
    if (it == live.begin() || (--it, addr - it->first >= std::max<uint64_t>(it->second.size, 1))) return -1;
    annotations()[it->first] = a;
    return 1;
}

// At exit: how often each recorded kernel ran with each argument set (Occurrences).
__attribute__((destructor)) static void mneme_hip_recorder_write_counts() {
    const Config &c = config();
    if (c.dir.empty()) return;
    std::lock_guard<std::mutex> lock(mu());
    if (counts().empty()) return;
    std::string text = "{\"format\": \"mneme-hip-counts\", \"version\": 1, \"kernels\": " + kernels_json(counts()) + "}\n";
    char path[4096];
    snprintf(path, sizeof path, "%s/counts-%d.json", c.dir.c_str(), (int)getpid());
    write_atomic(path, text.data(), text.size());
}
