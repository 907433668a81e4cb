// Mneme's CUDA recorder (v0): injected with LD_PRELOAD into an unmodified application.
//
// How it gets in (docs: backends/cuda/recorder/README.md):
//  * cudart (static or shared) finds the driver through dlopen("libcuda.so.1") and
//    dlsym(h, "cuGetProcAddress_v2"), then asks cuGetProcAddress for every entry point. We
//    interpose dlsym and hand out a cuGetProcAddress wrapper, which in turn hands out
//    wrappers for allocation, free and launch entry points.
//  * Programs that link libcuda directly (cuda-python, Triton's launcher) call the plain
//    symbols, which this library also defines (cuMemAlloc_v2, cuMemFree_v2, cuLaunchKernel).
// What it does:
//  * Places every cuMemAlloc allocation inside one virtual range it reserves at a fixed base
//    (MNEME_RECORD_VA_BASE, default 0x153940000000; 1 TiB), backed lazily with cuMemCreate +
//    cuMemMap, so replay can rebuild the same addresses.
//  * For each selected launch (MNEME_RECORD_KERNEL regex, MNEME_RECORD_SKIP,
//    MNEME_RECORD_MAX distinct instances per kernel): copies the argument bytes, synchronizes,
//    dumps every live allocation (prologue), launches, synchronizes, dumps them again
//    (epilogue), and writes launch-<pid>-<n>/ {manifest.json, prologue.bin, epilogue.bin}
//    atomically (temp folder, rename). `mneme record` turns these into snapshots and databases.
// It never changes the application's results: any failure of its own disables recording with
// one message on stderr and lets the application run on.

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

// ---- configuration and logging ---------------------------------------------------------------

struct Config {
    std::string dir;  // empty: place allocations only, record nothing
    std::regex kernel{".*"};
    long skip = 0;
    long max_per_kernel = 4;
    uint64_t va_base = 0x153940000000ull;
    uint64_t va_size = 1ull << 40;
    bool place = true;
};

// The MPI rank of this process as a launcher announces it; -1 without a launcher.
long launcher_rank() {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                                 "SLURM_PROCID", "FLUX_TASK_RANK"};
    for (const char *var : vars)
        if (const char *v = getenv(var)) return atol(v);
    return -1;
}

// Whether this rank records: `spec` is "all", a comma-separated list of ranks, or unset (rank 0,
// or the only process when no launcher is involved), as the original Mneme does.
bool rank_selected(const char *spec, long rank) {
    if (!spec || !*spec) return rank <= 0;
    if (strcmp(spec, "all") == 0) return true;
    long me = rank < 0 ? 0 : rank;
    const char *p = spec;
    while (*p) {
        char *end = nullptr;
        long r = strtol(p, &end, 10);
        if (end == p) return false;
        if (r == me) return true;
        p = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return false;
}

Config &config() {
    static Config *c = [] {
        auto *cfg = new Config();
        if (const char *v = getenv("MNEME_RECORD_DIR")) cfg->dir = v;
        if (const char *v = getenv("MNEME_RECORD_KERNEL")) {
            try {
                cfg->kernel = std::regex(v);
            } catch (const std::regex_error &) {
                fprintf(stderr, "mneme-recorder: invalid MNEME_RECORD_KERNEL regex '%s'; recording nothing\n", v);
                cfg->dir.clear();
            }
        }
        if (const char *v = getenv("MNEME_RECORD_SKIP")) cfg->skip = atol(v);
        if (const char *v = getenv("MNEME_RECORD_MAX")) cfg->max_per_kernel = atol(v);
        if (const char *v = getenv("MNEME_RECORD_VA_BASE")) cfg->va_base = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_VA_SIZE")) cfg->va_size = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_PLACE")) cfg->place = strcmp(v, "0") != 0;
        if (!rank_selected(getenv("MNEME_RECORD_RANKS"), launcher_rank())) cfg->dir.clear();
        return cfg;
    }();
    return *c;
}

void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

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

// ---- placement of allocations -----------------------------------------------------------------

struct Allocation {
    size_t size;    // as asked
    size_t mapped;  // rounded to the granularity
    CUmemGenericAllocationHandle handle;
};

// Process-lifetime objects are never destroyed: the exit-time writer and late frees from other
// threads may still use them after static destructors have run.
std::mutex &mu() {
    static auto *m = new std::mutex();
    return *m;
}

struct Placement {
    bool tried = false, ok = false;
    CUdevice device = 0;
    size_t granularity = 0;
    uint64_t cursor = 0;
    std::map<uint64_t, Allocation> live;
};

Placement &placement() {
    static auto *p = new Placement();
    return *p;
}

bool reserve_range() {
    Placement &p = placement();
    if (p.tried) return p.ok;
    p.tried = true;
    const Config &c = config();
    if (!c.place) return false;
    DRV(cuCtxGetDevice);
    DRV(cuMemGetAllocationGranularity);
    DRV(cuMemAddressReserve);
    DRV(cuMemAddressFree);
    if (!p_cuCtxGetDevice || !p_cuMemAddressReserve || p_cuCtxGetDevice(&p.device) != CUDA_SUCCESS) {
        warn("no current CUDA context at the first allocation; allocations are not placed");
        return false;
    }
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = p.device;
    if (p_cuMemGetAllocationGranularity(&p.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return false;
    CUdeviceptr got = 0;
    if (p_cuMemAddressReserve(&got, c.va_size, 0, c.va_base, 0) != CUDA_SUCCESS || got != c.va_base) {
        if (got) p_cuMemAddressFree(got, c.va_size);
        warn("could not reserve 0x%llx bytes at 0x%llx (got 0x%llx); allocations are not placed, replay may fail",
             (unsigned long long)c.va_size, (unsigned long long)c.va_base, (unsigned long long)got);
        return false;
    }
    p.cursor = c.va_base;
    p.ok = true;
    return true;
}

CUresult placed_alloc(CUdeviceptr *dptr, size_t size) {
    std::lock_guard<std::mutex> lock(mu());
    Placement &p = placement();
    if (!reserve_range()) return real().mem_alloc(dptr, size);
    DRV(cuMemCreate);
    DRV(cuMemMap);
    DRV(cuMemSetAccess);
    DRV(cuMemRelease);
    size_t mapped = (size + p.granularity - 1) / p.granularity * p.granularity;
    if (mapped == 0) mapped = p.granularity;
    const Config &c = config();
    if (p.cursor + mapped > c.va_base + c.va_size) return CUDA_ERROR_OUT_OF_MEMORY;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = p.device;
    CUmemGenericAllocationHandle handle;
    CUresult r = p_cuMemCreate(&handle, mapped, &prop, 0);
    if (r != CUDA_SUCCESS) return r;
    r = p_cuMemMap(p.cursor, mapped, 0, handle, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access = {};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = p_cuMemSetAccess(p.cursor, mapped, &access, 1);
    }
    if (r != CUDA_SUCCESS) {
        p_cuMemRelease(handle);
        return r;
    }
    *dptr = p.cursor;
    p.live[p.cursor] = Allocation{size, mapped, handle};
    p.cursor += mapped;  // never reused: a recorded address names one allocation
    return CUDA_SUCCESS;
}

CUresult placed_free(CUdeviceptr ptr) {
    std::unique_lock<std::mutex> lock(mu());
    Placement &p = placement();
    auto it = p.live.find(ptr);
    if (it == p.live.end()) {
        lock.unlock();
        return real().mem_free(ptr);
    }
    DRV(cuCtxSynchronize);
    DRV(cuMemUnmap);
    DRV(cuMemRelease);
    p_cuCtxSynchronize();  // cudaFree's contract: work using the memory has finished
    p_cuMemUnmap(it->first, it->second.mapped);
    p_cuMemRelease(it->second.handle);
    p.live.erase(it);
    return CUDA_SUCCESS;
}

// ---- recording launches ---------------------------------------------------------------------

thread_local bool in_recorder = false;

struct KernelCounts {
    long seen = 0;
    std::set<uint64_t> instances;        // recorded argument sets
    std::map<uint64_t, long> occurrences;  // launches per argument set, recorded or not
};

std::map<std::string, KernelCounts> &counts() {
    static auto *m = new std::map<std::string, KernelCounts>();
    return *m;
}

bool disabled = false;
long launch_seq = 0;

uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
    const unsigned char *b = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
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

bool dump(const std::string &path, std::vector<std::pair<uint64_t, uint64_t>> &regions) {
    DRV(cuMemcpyDtoH_v2);
    FILE *out = fopen(path.c_str(), "wb");
    if (!out) return false;
    const size_t chunk = 64u << 20;
    std::vector<char> host(chunk);
    bool ok = true;
    for (auto &region : regions) {
        for (uint64_t off = 0; ok && off < region.second; off += chunk) {
            size_t n = std::min<uint64_t>(chunk, region.second - off);
            ok = p_cuMemcpyDtoH_v2(host.data(), region.first + off, n) == CUDA_SUCCESS &&
                 fwrite(host.data(), 1, n, out) == n;
        }
    }
    ok = (fflush(out) == 0) && ok;
    if (ok) fsync(fileno(out));
    return (fclose(out) == 0) && ok;
}

std::string hex(const std::string &bytes) {
    static const char *digits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

std::string json_string(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out.push_back('\\');
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out.push_back(c);
    }
    return out + "\"";
}

struct Launch {
    unsigned grid[3], block[3], shared;
    CUstream stream;
};

// Decide whether to record this launch; when yes, run it between prologue and epilogue dumps.
template <typename Run>
CUresult record_launch(CUfunction f, const Launch &l, void **params, void **extra, Run run) {
    const Config &c = config();
    if (disabled || in_recorder || c.dir.empty()) return run();
    in_recorder = true;
    struct Reset {
        ~Reset() { in_recorder = false; }
    } reset;
    CUfunction fn;
    std::string name = kernel_name(f, &fn);
    if (name.empty() || !std::regex_search(name, c.kernel)) return run();
    std::string args;
    std::vector<std::pair<size_t, size_t>> layout;
    if (!pack_args(fn, params, extra, args, layout)) return run();
    std::unique_lock<std::mutex> lock(mu());
    KernelCounts &kc = counts()[name];
    long index = kc.seen++;
    uint64_t h = fnv1a(l.grid, sizeof l.grid, fnv1a(l.block, sizeof l.block, fnv1a(&l.shared, sizeof l.shared)));
    h = fnv1a(args.data(), args.size(), h);
    if (index >= c.skip) kc.occurrences[h]++;
    if (index < c.skip || kc.instances.count(h) || (long)kc.instances.size() >= c.max_per_kernel) {
        lock.unlock();
        return run();
    }
    kc.instances.insert(h);
    long seq = launch_seq++;
    std::vector<std::pair<uint64_t, uint64_t>> regions;
    for (auto &a : placement().live) regions.emplace_back(a.first, a.second.size);
    lock.unlock();

    DRV(cuCtxSynchronize);
    char final_dir[4096], tmp_dir[4200];
    snprintf(final_dir, sizeof final_dir, "%s/launch-%d-%06ld", c.dir.c_str(), (int)getpid(), seq);
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp", final_dir);
    mkdir(c.dir.c_str(), 0755);
    if (mkdir(tmp_dir, 0755) != 0 && errno != EEXIST) {
        warn("cannot create %s (%s); recording stops", tmp_dir, strerror(errno));
        disabled = true;
        return run();
    }
    p_cuCtxSynchronize();
    bool ok = dump(std::string(tmp_dir) + "/prologue.bin", regions);
    CUresult result = run();
    CUresult synced = p_cuCtxSynchronize();
    ok = ok && result == CUDA_SUCCESS && synced == CUDA_SUCCESS &&
         dump(std::string(tmp_dir) + "/epilogue.bin", regions);
    if (!ok) {
        warn("recording launch %ld of %s failed (disk full or launch error); recording stops", index, name.c_str());
        disabled = true;
        return result;
    }
    std::string m = "{\"format\": \"mneme-cuda-raw\", \"version\": 1, \"kernel\": " + json_string(name);
    char buf[512];
    snprintf(buf, sizeof buf,
             ", \"pid\": %d, \"sequence\": %ld, \"occurrence\": %ld, \"instance_key\": \"%016llx\""
             ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_mem\": %u, \"va_base\": %llu"
             ", \"va_size\": %llu",
             (int)getpid(), seq, index, (unsigned long long)h, l.grid[0], l.grid[1], l.grid[2], l.block[0],
             l.block[1], l.block[2], l.shared, (unsigned long long)c.va_base, (unsigned long long)c.va_size);
    m += buf;
    m += ", \"args\": \"" + hex(args) + "\", \"params\": [";
    for (size_t i = 0; i < layout.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(layout[i].first) + ", " + std::to_string(layout[i].second) + "]";
    m += "], \"regions\": [";
    for (size_t i = 0; i < regions.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(regions[i].first) + ", " + std::to_string(regions[i].second) + "]";
    m += "]}\n";
    std::string manifest = std::string(tmp_dir) + "/manifest.json";
    FILE *out = fopen(manifest.c_str(), "w");
    ok = out && fwrite(m.data(), 1, m.size(), out) == m.size();
    if (out) ok = (fclose(out) == 0) && ok;
    if (!ok || rename(tmp_dir, final_dir) != 0) {
        warn("cannot write %s (%s); recording stops", final_dir, strerror(errno));
        disabled = true;
    }
    return result;
}

// ---- wrappers ---------------------------------------------------------------------------------

CUresult w_alloc(CUdeviceptr *dptr, size_t size) {
    ensure_plain();
    return placed_alloc(dptr, size);
}

CUresult w_free(CUdeviceptr ptr) {
    ensure_plain();
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

CUresult w_launch_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, CUstream s, void **params, void **extra) {
    return launch_with(real().launch_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult launch_ex_with(launch_ex_t real_fn, const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    Launch l{{cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ}, {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ},
             cfg->sharedMemBytes, cfg->hStream};
    return record_launch(f, l, params, extra, [&] { return real_fn(cfg, f, params, extra); });
}

CUresult w_launch_ex(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    ensure_plain();
    return launch_ex_with(real().launch_ex, cfg, f, params, extra);
}

CUresult w_launch_ex_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    return launch_ex_with(real().launch_ex_ptsz, cfg, f, params, extra);
}

CUresult w_getproc_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult w_getproc_v1(const char *, void **, int, cuuint64_t);

// Swap a driver entry point the application asked for by name for our wrapper.
void *wrap(const char *symbol, void *fn, cuuint64_t flags) {
    if (!symbol || !fn) return fn;
    Real &r = real();
    bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    std::string s(symbol);
    if (s == "cuGetProcAddress") {
        // Versions >= 12.0 answer with the 5-argument entry point.
        if (!r.getproc_v2) r.getproc_v2 = reinterpret_cast<getproc_v2_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v2);
    }
    if (s == "cuMemAlloc" || s == "cuMemAlloc_v2") {
        r.mem_alloc = reinterpret_cast<alloc_t>(fn);
        return reinterpret_cast<void *>(&w_alloc);
    }
    if (s == "cuMemFree" || s == "cuMemFree_v2") {
        r.mem_free = reinterpret_cast<free_t>(fn);
        return reinterpret_cast<void *>(&w_free);
    }
    if (s == "cuLaunchKernel" || s == "cuLaunchKernel_ptsz") {
        if (ptsz || s == "cuLaunchKernel_ptsz") {
            r.launch_ptsz = reinterpret_cast<launch_t>(fn);
            return reinterpret_cast<void *>(&w_launch_ptsz);
        }
        r.launch = reinterpret_cast<launch_t>(fn);
        return reinterpret_cast<void *>(&w_launch);
    }
    if (s == "cuLaunchKernelEx" || s == "cuLaunchKernelEx_ptsz") {
        if (ptsz || s == "cuLaunchKernelEx_ptsz") {
            r.launch_ex_ptsz = reinterpret_cast<launch_ex_t>(fn);
            return reinterpret_cast<void *>(&w_launch_ex_ptsz);
        }
        r.launch_ex = reinterpret_cast<launch_ex_t>(fn);
        return reinterpret_cast<void *>(&w_launch_ex);
    }
    static bool warned_managed = false, warned_async = false;
    if (s == "cuMemAllocManaged" && !warned_managed) {
        warned_managed = true;
        warn("the application may use managed memory; it is not placed or recorded");
    }
    if ((s == "cuMemAllocAsync" || s == "cuMemAllocFromPoolAsync") && !warned_async) {
        warned_async = true;
        warn("the application may use stream-ordered allocations; they are not placed or recorded yet");
    }
    return fn;
}

CUresult w_getproc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult *status) {
    CUresult r = real().getproc_v2(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    return r;
}

CUresult w_getproc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    CUresult r = real().getproc_v1(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    return r;
}

}  // namespace

// ---- exported symbols ---------------------------------------------------------------------------

extern "C" {

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name) {
    void *fn = real_dlsym()(handle, name);
    if (!fn || strncmp(name, "cu", 2) != 0) return fn;
    if (strcmp(name, "cuGetProcAddress_v2") == 0) {
        real().getproc_v2 = reinterpret_cast<getproc_v2_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v2);
    }
    if (strcmp(name, "cuGetProcAddress") == 0) {
        real().getproc_v1 = reinterpret_cast<getproc_v1_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v1);
    }
    return wrap(name, fn, 0);
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    return w_alloc(dptr, size);
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr ptr) { return w_free(ptr); }

__attribute__((visibility("default"))) CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                               unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                                               CUstream s, void **params, void **extra) {
    return w_launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

// At exit: how often each recorded kernel ran with each argument set (Occurrences), also for
// the launches past --max-recordings. Written atomically; nothing when nothing was selected.
__attribute__((destructor)) static void mneme_recorder_write_counts() {
    const Config &c = config();
    if (c.dir.empty()) return;
    std::lock_guard<std::mutex> lock(mu());
    if (counts().empty()) return;
    std::string text = "{\"format\": \"mneme-cuda-counts\", \"version\": 1, \"kernels\": {";
    bool first_kernel = true;
    for (auto &entry : counts()) {
        text += (first_kernel ? "" : ", ") + json_string(entry.first) + ": {\"seen\": " +
                std::to_string(entry.second.seen) + ", \"instances\": {";
        first_kernel = false;
        bool first = true;
        for (auto &occ : entry.second.occurrences) {
            char key[32];
            snprintf(key, sizeof key, "%016llx", (unsigned long long)occ.first);
            text += std::string(first ? "" : ", ") + "\"" + key + "\": " + std::to_string(occ.second);
            first = false;
        }
        text += "}}";
    }
    text += "}}\n";
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/counts-%d.json", c.dir.c_str(), (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (FILE *out = fopen(tmp, "w")) {
        bool ok = fwrite(text.data(), 1, text.size(), out) == text.size();
        ok = (fclose(out) == 0) && ok;
        if (ok) rename(tmp, path);
    }
}

// Whether this process records (rank selection applied); for `mneme cuda info` and the tests.
__attribute__((visibility("default"))) int mneme_recorder_records() { return config().dir.empty() ? 0 : 1; }

// `mneme cuda recorder-info` and the tests read this to check which recorder is loaded.
__attribute__((visibility("default"))) const char *mneme_recorder_version() { return "mneme-cuda-recorder 0.1"; }
}
