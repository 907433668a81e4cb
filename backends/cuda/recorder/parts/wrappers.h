// ---- wrappers ---------------------------------------------------------------------------------

CUresult w_alloc(CUdeviceptr *dptr, size_t size) {
    ensure_plain();
    return placed_alloc(dptr, size);
}

void outside_remove(uint64_t start);

CUresult w_free(CUdeviceptr ptr) {
    ensure_plain();
    outside_remove(ptr);  // managed memory is freed with cuMemFree too
    return placed_free(ptr);
}

CUresult launch_with(launch_t real_fn, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                     unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
    Launch l{{gx, gy, gz}, {bx, by, bz}, shared, s};
    return record_launch(f, l, params, extra,
                         [&] { return real_fn(f, gx, gy, gz, bx, by, bz, shared, s, params, extra); });
}

CUresult w_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned shared, CUstream s, void **params, void **extra) {
    ensure_plain();
    return launch_with(real().launch, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

// Stream 0 of a per-thread-default-stream entry point is the thread's stream: named so, the
// recorder's own stream calls (events, waits, which use the legacy entry points) go to it too.
CUstream per_thread(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

CUresult w_launch_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, CUstream s, void **params, void **extra) {
    return launch_with(real().launch_ptsz, f, gx, gy, gz, bx, by, bz, shared, per_thread(s), params, extra);
}

CUresult launch_ex_with(launch_ex_t real_fn, const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    if (!cfg) return real_fn(cfg, f, params, extra);  // the driver's own error
    Launch l{{cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ}, {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ},
             cfg->sharedMemBytes, cfg->hStream};
    // The attributes a replay must repeat to run the kernel as the application did.
    for (unsigned i = 0; cfg->attrs && i < cfg->numAttrs; ++i) {
        const CUlaunchAttribute &a = cfg->attrs[i];
        if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
            l.cooperative = a.value.cooperative != 0;
        } else if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            l.cluster[0] = a.value.clusterDim.x, l.cluster[1] = a.value.clusterDim.y, l.cluster[2] = a.value.clusterDim.z;
        }
    }
    return record_launch(f, l, params, extra, [&] { return real_fn(cfg, f, params, extra); });
}

CUresult w_launch_ex(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    ensure_plain();
    return launch_ex_with(real().launch_ex, cfg, f, params, extra);
}

CUresult w_launch_ex_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    if (!cfg) return launch_ex_with(real().launch_ex_ptsz, cfg, f, params, extra);
    CUlaunchConfig named = *cfg;
    named.hStream = per_thread(cfg->hStream);
    return launch_ex_with(real().launch_ex_ptsz, &named, f, params, extra);
}

using coop_t = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void **);
coop_t real_coop = nullptr, real_coop_ptsz = nullptr;

CUresult coop_with(coop_t real_fn, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, CUstream s, void **params) {
    Launch l{{gx, gy, gz}, {bx, by, bz}, shared, s};
    l.cooperative = true;
    return record_launch(f, l, params, nullptr, [&] { return real_fn(f, gx, gy, gz, bx, by, bz, shared, s, params); });
}

CUresult w_coop(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, CUstream s, void **params) {
    if (!real_coop) real_coop = driver_fn<coop_t>("cuLaunchCooperativeKernel");
    return coop_with(real_coop, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult w_coop_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, CUstream s, void **params) {
    if (!real_coop_ptsz) real_coop_ptsz = driver_fn<coop_t>("cuLaunchCooperativeKernel_ptsz");
    return coop_with(real_coop_ptsz, f, gx, gy, gz, bx, by, bz, shared, per_thread(s), params);
}

// The per-thread-default-stream entry points called by name (a program built against libcuda with
// --default-stream per-thread, or CUDA_API_PER_THREAD_DEFAULT_STREAM, links cuLaunchKernel_ptsz...).
CUresult w_launch_ptsz_plain(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
    if (!real().launch_ptsz) real().launch_ptsz = driver_fn<launch_t>("cuLaunchKernel_ptsz");
    return w_launch_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult w_launch_ex_ptsz_plain(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    if (!real().launch_ex_ptsz) real().launch_ex_ptsz = driver_fn<launch_ex_t>("cuLaunchKernelEx_ptsz");
    return w_launch_ex_ptsz(cfg, f, params, extra);
}

// Module loading and symbol lookup: the real call, then what the recorder needs to remember.
using module_load_t = CUresult (*)(CUmodule *, const void *);
using module_load_ex_t = CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
using module_load_file_t = CUresult (*)(CUmodule *, const char *);
using library_load_t = CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                                    void **, unsigned);
using library_load_file_t = CUresult (*)(CUlibrary *, const char *, CUjit_option *, void **, unsigned,
                                         CUlibraryOption *, void **, unsigned);
using module_get_function_t = CUresult (*)(CUfunction *, CUmodule, const char *);
using library_get_kernel_t = CUresult (*)(CUkernel *, CUlibrary, const char *);
using kernel_get_function_t = CUresult (*)(CUfunction *, CUkernel);
using library_get_module_t = CUresult (*)(CUmodule *, CUlibrary);
using get_global_t = CUresult (*)(CUdeviceptr *, size_t *, void *, const char *);

struct RealModules {
    module_load_t load_data = nullptr, load_fatbin = nullptr;
    module_load_ex_t load_data_ex = nullptr;
    module_load_file_t load_file = nullptr;
    library_load_t library_load = nullptr;
    library_load_file_t library_load_file = nullptr;
    module_get_function_t get_function = nullptr;
    library_get_kernel_t get_kernel = nullptr;
    kernel_get_function_t kernel_get_function = nullptr;
    library_get_module_t library_get_module = nullptr;
    get_global_t module_get_global = nullptr, library_get_global = nullptr;
};

RealModules &real_modules() {
    static auto *r = new RealModules();
    return *r;
}

template <typename F>
F resolve_real(F &slot, const char *name) {
    if (!slot) slot = driver_fn<F>(name);
    return slot;
}

bool tracking() { return !config().dir.empty(); }

// A loading entry point: the real one, then, when it loaded while recording, its code image noted
// (`code` is the image or, `from_file`, its path; `library`: a CUlibrary).
template <typename Handle, typename Code, typename Fn, typename... Rest>
CUresult load_noted(Fn fn, bool from_file, bool library, Handle *out, Code code, Rest... rest) {
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(out, code, rest...);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*out, code, from_file, library);
    }
    return r;
}

CUresult w_module_load_data(CUmodule *mod, const void *image) {
    return load_noted(resolve_real(real_modules().load_data, "cuModuleLoadData"), false, false, mod, image);
}

CUresult w_module_load_fatbin(CUmodule *mod, const void *image) {
    return load_noted(resolve_real(real_modules().load_fatbin, "cuModuleLoadFatBinary"), false, false, mod, image);
}

CUresult w_module_load_data_ex(CUmodule *mod, const void *image, unsigned n, CUjit_option *options, void **values) {
    return load_noted(resolve_real(real_modules().load_data_ex, "cuModuleLoadDataEx"), false, false, mod, image, n,
                      options, values);
}

CUresult w_module_load(CUmodule *mod, const char *path) {
    return load_noted(resolve_real(real_modules().load_file, "cuModuleLoad"), true, false, mod, path);
}

CUresult w_library_load_data(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                             CUlibraryOption *lo, void **lv, unsigned nl) {
    return load_noted(resolve_real(real_modules().library_load, "cuLibraryLoadData"), false, true, lib, code, jo, jv,
                      nj, lo, lv, nl);
}

CUresult w_library_load_file(CUlibrary *lib, const char *path, CUjit_option *jo, void **jv, unsigned nj,
                             CUlibraryOption *lo, void **lv, unsigned nl) {
    return load_noted(resolve_real(real_modules().library_load_file, "cuLibraryLoadFromFile"), true, true, lib, path,
                      jo, jv, nj, lo, lv, nl);
}

CUresult w_module_get_function(CUfunction *f, CUmodule mod, const char *name) {
    auto fn = resolve_real(real_modules().get_function, "cuModuleGetFunction");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(f, mod, name);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        modules().owner_of[*f] = mod;
    }
    return r;
}

CUresult w_library_get_kernel(CUkernel *k, CUlibrary lib, const char *name) {
    auto fn = resolve_real(real_modules().get_kernel, "cuLibraryGetKernel");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(k, lib, name);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        modules().owner_of[*k] = lib;
    }
    return r;
}

CUresult w_kernel_get_function(CUfunction *f, CUkernel k) {
    auto fn = resolve_real(real_modules().kernel_get_function, "cuKernelGetFunction");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(f, k);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        auto it = modules().owner_of.find(k);
        if (it != modules().owner_of.end()) modules().owner_of[*f] = it->second;
    }
    return r;
}

CUresult w_library_get_module(CUmodule *mod, CUlibrary lib) {
    auto fn = resolve_real(real_modules().library_get_module, "cuLibraryGetModule");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(mod, lib);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        modules().library_of[*mod] = lib;
    }
    return r;
}

// A device global the process looked up: recorded with every launch of a kernel of its module.
CUresult get_global(get_global_t fn, CUdeviceptr *dptr, size_t *bytes, void *owner, const char *name) {
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUdeviceptr addr = 0;
    size_t size = 0;
    CUresult r = fn(&addr, &size, owner, name);
    if (r != CUDA_SUCCESS) return r;
    if (dptr) *dptr = addr;
    if (bytes) *bytes = size;
    if (tracking() && name) {
        std::lock_guard<std::mutex> lock(mu());
        modules().globals[canonical_owner(owner)][name] = {addr, size};
    }
    return r;
}

// Look up, once per module, the device variables its image defines that the process has not
// looked up itself (mu() held). Calls the driver directly: no wrapper, no lock.
void discover_globals(void *owner) {
    Modules &m = modules();
    if (!m.scanned.insert(owner).second) return;
    auto it = m.image_of.find(owner);
    if (it == m.image_of.end()) return;
    const Image *img = m.images[it->second];
    DRV(cuCtxGetDevice);
    DRV(cuDeviceGetAttribute);
    CUdevice device;
    int major = 0, minor = 0;
    if (!p_cuCtxGetDevice || !p_cuDeviceGetAttribute || p_cuCtxGetDevice(&device) != CUDA_SUCCESS ||
        p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS ||
        p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) != CUDA_SUCCESS)
        return;
    std::vector<std::string> names;
    image_globals(img->data, img->size, major * 10 + minor, names);
    get_global_t fn = m.libraries.count(owner)
                          ? resolve_real(real_modules().library_get_global, "cuLibraryGetGlobal")
                          : resolve_real(real_modules().module_get_global, "cuModuleGetGlobal_v2");
    if (!fn) return;
    auto &known = m.globals[owner];
    for (const std::string &name : names) {
        if (known.count(name)) continue;
        CUdeviceptr addr = 0;
        size_t size = 0;
        if (fn(&addr, &size, owner, name.c_str()) == CUDA_SUCCESS && addr && size) known[name] = {addr, size};
    }
}

CUresult w_module_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name) {
    return get_global(resolve_real(real_modules().module_get_global, "cuModuleGetGlobal_v2"), dptr, bytes, mod, name);
}

CUresult w_library_get_global(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name) {
    return get_global(resolve_real(real_modules().library_get_global, "cuLibraryGetGlobal"), dptr, bytes, lib, name);
}
