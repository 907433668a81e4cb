// ---- the real driver ------------------------------------------------------------------------

using dlsym_t = void *(*)(void *, const char *);
using getproc_v2_t = CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
using getproc_v1_t = CUresult (*)(const char *, void **, int, cuuint64_t);
using alloc_t = CUresult (*)(CUdeviceptr *, size_t);
using free_t = CUresult (*)(CUdeviceptr);
using launch_t = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
using launch_ex_t = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);

dlsym_t real_dlsym() {
    static dlsym_t fn = [] {
        void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        return reinterpret_cast<dlsym_t>(p);
    }();
    return fn;
}

void *libcuda() {
    static void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    return handle;
}

// The driver's own entry point for `name`, bypassing every wrapper of this library.
template <typename F>
F driver_fn(const char *name) {
    void *h = libcuda();
    return h ? reinterpret_cast<F>(real_dlsym()(h, name)) : nullptr;
}

struct Real {
    getproc_v2_t getproc_v2 = nullptr;
    getproc_v1_t getproc_v1 = nullptr;
    alloc_t mem_alloc = nullptr;
    free_t mem_free = nullptr;
    launch_t launch = nullptr, launch_ptsz = nullptr;
    launch_ex_t launch_ex = nullptr, launch_ex_ptsz = nullptr;
};

Real &real() {
    static auto *r = new Real();
    return *r;
}

void ensure_plain() {
    Real &r = real();
    if (!r.mem_alloc) r.mem_alloc = driver_fn<alloc_t>("cuMemAlloc_v2");
    if (!r.mem_free) r.mem_free = driver_fn<free_t>("cuMemFree_v2");
    if (!r.launch) r.launch = driver_fn<launch_t>("cuLaunchKernel");
    if (!r.launch_ex) r.launch_ex = driver_fn<launch_ex_t>("cuLaunchKernelEx");
}

#define DRV(name) static auto p_##name = driver_fn<decltype(&::name)>(#name)
