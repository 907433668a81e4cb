// Mneme's CUDA recorder: injected with LD_PRELOAD into an unmodified application.
//
// How it gets in (docs/design/recording.md, backends/cuda/recorder/README.md):
//  * cudart (static or shared) finds the driver through dlopen("libcuda.so.1") and
//    dlsym(h, "cuGetProcAddress_v2"), then asks cuGetProcAddress for every entry point. We
//    interpose dlsym and hand out a cuGetProcAddress wrapper, which in turn hands out
//    wrappers for allocation, free, module loading, symbol lookup and launch entry points.
//  * Programs that link libcuda directly (cuda-python, Triton's launcher) call the plain
//    symbols, which this library also defines.
// What it does:
//  * Places every cuMemAlloc allocation inside one virtual range it reserves at a fixed base
//    (MNEME_RECORD_VA_BASE, default 0x153940000000; 1 TiB), backed lazily with cuMemCreate +
//    cuMemMap, so replay can rebuild the same addresses; pitched and stream-ordered allocations
//    too (cuMemFreeAsync releases once its stream has passed it), and the application's own VMM
//    reservations get hints in a zone above that range, their accessible mappings recorded.
//  * Times each recorded launch and the next MNEME_RECORD_TIMED launches of the same instance,
//    each alone on the device (the work already queued drains first; other threads' launches wait
//    until it ends; MNEME_RECORD_TIMING_EXCLUSIVE=0: not): by the GPU's own kernel timestamps
//    (CUPTI activity records, libcupti opened at run time: MNEME_RECORD_TIMER=auto|cupti|events,
//    MNEME_CUPTI_LIB), else with events on the application's stream, behind a gate that holds the
//    stream until both events and the kernel are queued; counts kernel nodes run through cuGraphLaunch.
//  * Remembers each loaded code image (fatbin, cubin, PTX) and the device globals the process
//    looked up (cuModuleGetGlobal / cuLibraryGetGlobal), per module.
//  * For each selected launch (MNEME_RECORD_KERNEL regex, MNEME_RECORD_SKIP,
//    MNEME_RECORD_MAX distinct instances per kernel): copies the argument bytes, synchronizes,
//    dumps every live allocation and the module's globals (prologue), launches, synchronizes,
//    dumps them again (epilogue), and writes launch-<pid>-<n>/ {manifest.json, prologue.bin,
//    epilogue.bin} atomically (temp folder, rename); the module's image goes to images/ once,
//    /proc/self/maps to maps-<pid>.txt once. `mneme record` turns these into snapshots and
//    databases.
//  * Keeps the verification policies the application declared with mneme_annotate()
//    (include/mneme_annotate.h, mneme.annotate) per allocation and writes them into each
//    manifest ("policies"), which finalize turns into the regions' RegionPolicy.
// It never changes the application's results: any failure of its own disables recording with
// one message on stderr and lets the application run on.

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <new>
#include <regex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "snapshot_writer.h"
#ifdef MNEME_CUPTI
#include "cupti_timer.h"  // mneme_cuda/native/: the replay's kernel timer is the same code
#endif

namespace {

// ---- configuration and logging ---------------------------------------------------------------

struct Config {
    std::string dir;  // empty: place allocations only, record nothing
    std::regex kernel{".*"};
    long skip = 0;
    long max_per_kernel = 4;
    uint64_t va_base = 0x153940000000ull;
    uint64_t va_size = 1ull << 40;
    uint64_t vmm_size = 1ull << 41;  // the zone above the placed range for the application's own reservations
    long timed = 16;                 // launches timed in the application per recorded instance, after the recorded one
    bool gate = true;                // hold each timed launch's stream until its events and kernel are queued
    bool exclusive = true;           // run each timed launch alone on the device (see time_launch)
    std::string timer = "auto";      // MNEME_RECORD_TIMER: cupti (kernel timestamps), events, or auto (cupti if it opens)
    bool flush = true;               // evict the L2 before timing a recorded launch (see flush_l2)
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
        if (const char *v = getenv("MNEME_RECORD_VMM_SIZE")) cfg->vmm_size = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_TIMED")) cfg->timed = atol(v);
        if (const char *v = getenv("MNEME_RECORD_TIMING_GATE")) cfg->gate = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_TIMING_EXCLUSIVE")) cfg->exclusive = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_TIMING_FLUSH")) cfg->flush = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_TIMER")) {
            cfg->timer = v;
            if (cfg->timer != "auto" && cfg->timer != "cupti" && cfg->timer != "events") {
                fprintf(stderr, "mneme-recorder: MNEME_RECORD_TIMER=%s is none of auto, cupti, events; using auto\n", v);
                cfg->timer = "auto";
            }
        }
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

// A verification policy the application declared for one allocation (mneme_annotate).
struct Annotation {
    std::string dtype, norm, tag;
    double threshold = 0;
    bool relative = false;
};

// Allocation base -> its policy (mu() held); dropped when the allocation is freed.
std::map<uint64_t, Annotation> &annotations() {
    static auto *a = new std::map<uint64_t, Annotation>();
    return *a;
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

bool wait_for_shadows();

// A cuMemFreeAsync'd placed allocation, released once `done` (recorded on its stream) completes.
struct DeferredFree {
    uint64_t addr;
    size_t mapped;
    CUmemGenericAllocationHandle handle;
    CUevent done;
};

std::vector<DeferredFree> &deferred_frees() {  // mu() held
    static auto *v = new std::vector<DeferredFree>();
    return *v;
}

// Release the deferred frees whose stream has passed them (mu() held); cuEventQuery, never a wait.
void reap_deferred_frees() {
    auto &pending = deferred_frees();
    if (pending.empty()) return;
    DRV(cuEventQuery);
    DRV(cuEventDestroy_v2);
    DRV(cuMemUnmap);
    DRV(cuMemRelease);
    size_t kept = 0;
    for (DeferredFree &d : pending) {
        if (p_cuEventQuery(d.done) == CUDA_ERROR_NOT_READY) {
            pending[kept++] = d;
            continue;
        }
        p_cuMemUnmap(d.addr, d.mapped);
        p_cuMemRelease(d.handle);
        p_cuEventDestroy_v2(d.done);
    }
    pending.resize(kept);
}

// Disjoint half-open address intervals (start -> end): add merges neighbours, remove splits.
void interval_add(std::map<uint64_t, uint64_t> &set, uint64_t start, uint64_t end) {
    if (start >= end) return;
    auto it = set.upper_bound(start);
    if (it != set.begin() && std::prev(it)->second >= start) {
        --it;
        start = it->first;
        end = std::max(end, it->second);
        it = set.erase(it);
    }
    while (it != set.end() && it->first <= end) {
        end = std::max(end, it->second);
        it = set.erase(it);
    }
    set[start] = end;
}

void interval_remove(std::map<uint64_t, uint64_t> &set, uint64_t start, uint64_t end) {
    if (start >= end) return;
    auto it = set.upper_bound(start);
    if (it != set.begin()) --it;
    while (it != set.end() && it->first < end) {
        uint64_t a = it->first, b = it->second;
        if (b <= start) {
            ++it;
            continue;
        }
        it = set.erase(it);
        if (a < start) set[a] = start;
        if (b > end) {
            set[end] = b;
            break;
        }
    }
}

void reap_timings(bool wait);

CUresult placed_alloc(CUdeviceptr *dptr, size_t size) {
    std::lock_guard<std::mutex> lock(mu());
    reap_deferred_frees();
    reap_timings(false);
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
    // Out of memory while the recorder's shadows are pending: wait for the writer, retry once.
    if (r == CUDA_ERROR_OUT_OF_MEMORY && wait_for_shadows()) r = p_cuMemCreate(&handle, mapped, &prop, 0);
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
    reap_deferred_frees();
    reap_timings(false);
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
    annotations().erase(it->first);
    p.live.erase(it);
    return CUDA_SUCCESS;
}

// ---- code images, modules and device globals ------------------------------------------------------

// One loaded code image. Images inside a loaded ELF file (cudart's fatbins) stay valid for the
// process's life and are only pointed to; others (a JIT's buffer) are copied at load time.
// Written to images/ only when a kernel of the module is recorded.
struct Image {
    const void *data = nullptr;
    std::string owned;
    size_t size = 0;
    const char *kind = "";
    std::string file;  // relative to the recording folder, once written
    bool failed = false;
};

struct Modules {
    std::vector<Image *> images;
    std::unordered_map<void *, size_t> image_of;     // CUmodule / CUlibrary -> index in images
    std::unordered_map<void *, void *> owner_of;     // CUfunction / CUkernel -> CUmodule / CUlibrary
    std::unordered_map<void *, void *> library_of;   // CUmodule -> the CUlibrary it was taken from
    std::map<void *, std::map<std::string, std::pair<CUdeviceptr, size_t>>> globals;  // owner -> name -> (addr, size)
    std::set<void *> libraries;  // owners that are CUlibrary handles
    std::set<void *> scanned;    // owners whose image was searched for device variables
};

Modules &modules() {
    static auto *m = new Modules();
    return *m;
}

void *canonical_owner(void *owner) {
    auto it = modules().library_of.find(owner);
    return it == modules().library_of.end() ? owner : it->second;
}

uint16_t rd16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

const uint32_t FATBIN_MAGIC = 0xBA55ED50u, FATBIN_WRAPPER_MAGIC = 0x466243b1u;

// The extent of a 64-bit ELF image: the furthest of its headers, section and segment contents.
size_t elf_size(const unsigned char *p) {
    if (p[4] != 2) return 0;  // cubins are ELF64
    uint64_t phoff = rd64(p + 32), shoff = rd64(p + 40);
    uint16_t phentsize = rd16(p + 54), phnum = rd16(p + 56), shentsize = rd16(p + 58), shnum = rd16(p + 60);
    uint64_t end = std::max<uint64_t>(64, shoff + (uint64_t)shnum * shentsize);
    end = std::max<uint64_t>(end, phoff + (uint64_t)phnum * phentsize);
    for (unsigned i = 0; shoff && i < shnum; ++i) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
        if (rd32(sh + 4) != 8) end = std::max<uint64_t>(end, rd64(sh + 24) + rd64(sh + 32));  // not SHT_NOBITS
    }
    for (unsigned i = 0; phoff && i < phnum; ++i) {
        const unsigned char *ph = p + phoff + (uint64_t)i * phentsize;
        end = std::max<uint64_t>(end, rd64(ph + 8) + rd64(ph + 32));
    }
    return end;
}

// What a module-load call was given: a fatbin (possibly behind cudart's wrapper), a cubin or PTX.
const void *image_extent(const void *code, size_t *size, const char **kind) {
    const unsigned char *p = static_cast<const unsigned char *>(code);
    *size = 0;
    *kind = "";
    if (!p) return nullptr;
    uint32_t magic = rd32(p);
    if (magic == FATBIN_WRAPPER_MAGIC) {  // {int magic; int version; const void *fatbin; void *rest}
        const void *inner;
        memcpy(&inner, p + 8, sizeof inner);
        return image_extent(inner, size, kind);
    }
    if (magic == FATBIN_MAGIC) {
        *size = rd16(p + 6) + rd64(p + 8);
        *kind = "fatbin";
    } else if (memcmp(p, "\x7f" "ELF", 4) == 0) {
        *size = elf_size(p);
        *kind = "cubin";
    } else {
        *size = strlen(reinterpret_cast<const char *>(p)) + 1;
        *kind = "ptx";
    }
    return p;
}

// The device variables (__device__, __constant__) a cubin defines: OBJECT symbols of its
// .nv.global* and .nv.constant3 sections. cudart resolves only the ones the host touches
// (cudaMemcpyToSymbol, ...), so the recorder also looks these up itself at a recorded launch.
void cubin_globals(const unsigned char *p, size_t size, std::vector<std::string> &names) {
    if (size < 64 || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2) return;
    uint64_t shoff = rd64(p + 40);
    uint16_t shentsize = rd16(p + 58), shnum = rd16(p + 60), shstrndx = rd16(p + 62);
    if (shentsize < 64 || shoff + (uint64_t)shnum * shentsize > size || shstrndx >= shnum) return;
    auto sh = [&](unsigned i) { return p + shoff + (uint64_t)i * shentsize; };
    auto in_file = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
    uint64_t shstr_off = rd64(sh(shstrndx) + 24), shstr_size = rd64(sh(shstrndx) + 32);
    if (!in_file(shstr_off, shstr_size)) return;
    auto section_name = [&](unsigned i) -> std::string {
        uint32_t n = rd32(sh(i));
        if (n >= shstr_size) return "";
        const char *s = reinterpret_cast<const char *>(p + shstr_off + n);
        return std::string(s, strnlen(s, shstr_size - n));
    };
    for (unsigned i = 0; i < shnum; ++i) {
        if (rd32(sh(i) + 4) != 2) continue;  // SHT_SYMTAB
        uint64_t off = rd64(sh(i) + 24), len = rd64(sh(i) + 32), entsize = rd64(sh(i) + 56);
        uint32_t link = rd32(sh(i) + 40);
        if (entsize < 24 || link >= shnum || !in_file(off, len)) continue;
        uint64_t str_off = rd64(sh(link) + 24), str_size = rd64(sh(link) + 32);
        if (!in_file(str_off, str_size)) continue;
        for (uint64_t sym = off; sym + 24 <= off + len; sym += entsize) {
            uint32_t name = rd32(p + sym);
            unsigned char info = p[sym + 4];
            uint16_t shndx = rd16(p + sym + 6);
            if ((info & 0xf) != 1 || shndx == 0 || shndx >= shnum || rd64(p + sym + 16) == 0 || name >= str_size)
                continue;  // STT_OBJECT with a size, in a real section
            std::string section = section_name(shndx);
            if (section.rfind(".nv.global", 0) != 0 && section != ".nv.constant3") continue;
            const char *s = reinterpret_cast<const char *>(p + str_off + name);
            std::string symbol(s, strnlen(s, str_size - name));
            if (!symbol.empty() && symbol[0] != '.' && symbol[0] != '$') names.push_back(symbol);
        }
    }
}

// Decode one raw LZ4 block into `out` (exactly `size` bytes); false when it does not decode.
bool lz4_block(const unsigned char *src, size_t n, size_t size, std::vector<unsigned char> &out) {
    out.clear();
    out.reserve(size);
    size_t i = 0;
    while (i < n) {
        unsigned token = src[i++];
        size_t literals = token >> 4;
        if (literals == 15)
            for (unsigned char extra = 255; extra == 255 && i < n;) literals += (extra = src[i++]);
        if (literals > n - i || out.size() + literals > size) return false;
        out.insert(out.end(), src + i, src + i + literals);
        i += literals;
        if (i >= n || out.size() >= size) break;
        if (i + 2 > n) return false;
        size_t offset = src[i] | (src[i + 1] << 8);
        i += 2;
        size_t length = token & 15;
        if (length == 15)
            for (unsigned char extra = 255; extra == 255 && i < n;) length += (extra = src[i++]);
        length += 4;
        if (offset == 0 || offset > out.size() || out.size() + length > size) return false;
        for (size_t k = 0, start = out.size() - offset; k < length; ++k) out.push_back(out[start + k]);
    }
    return out.size() == size;
}

// Decode one zstd frame through the system's libzstd when the process can load it (the
// recorder links nothing the application might lack); false otherwise.
bool zstd_frame(const unsigned char *src, size_t n, size_t size, std::vector<unsigned char> &out) {
    using decompress_t = size_t (*)(void *, size_t, const void *, size_t);
    using is_error_t = unsigned (*)(size_t);
    static void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    static auto decompress = lib ? reinterpret_cast<decompress_t>(real_dlsym()(lib, "ZSTD_decompress")) : nullptr;
    static auto is_error = lib ? reinterpret_cast<is_error_t>(real_dlsym()(lib, "ZSTD_isError")) : nullptr;
    using frame_size_t = size_t (*)(const void *, size_t);
    static auto frame_size = lib ? reinterpret_cast<frame_size_t>(real_dlsym()(lib, "ZSTD_findFrameCompressedSize"))
                                 : nullptr;
    if (!decompress || !is_error || !frame_size) return false;
    size_t frame = frame_size(src, n);  // the payload is padded after the frame
    if (is_error(frame) || frame > n) return false;
    out.resize(size);
    size_t got = decompress(out.data(), size, src, frame);
    return !is_error(got) && got == size;
}

// The device variables of an image for a device of `arch` (e.g. 90): a cubin's, or those of a
// fatbin's cubin for that architecture (plain, LZ4-compressed, or zstd when libzstd loads).
void image_globals(const void *data, size_t size, int arch, std::vector<std::string> &names) {
    const unsigned char *p = static_cast<const unsigned char *>(data);
    if (size >= 4 && memcmp(p, "\x7f" "ELF", 4) == 0) return cubin_globals(p, size, names);
    if (size < 16 || rd32(p) != FATBIN_MAGIC) return;
    uint64_t pos = rd16(p + 6), end = std::min<uint64_t>(size, pos + rd64(p + 8));
    while (pos + 64 <= end) {
        uint16_t kind = rd16(p + pos);
        uint32_t header = rd32(p + pos + 4);
        uint64_t payload = rd64(p + pos + 8);
        if (header == 0 || pos + header + payload > end) break;
        if (kind == 2 && (int)rd32(p + pos + 28) == arch) {
            const unsigned char *body = p + pos + header;
            uint64_t flags = rd64(p + pos + 40), decoded = rd64(p + pos + 56);
            std::vector<unsigned char> plain;
            if (payload >= 4 && memcmp(body, "\x7f" "ELF", 4) == 0)
                cubin_globals(body, payload, names);
            else if ((flags & 0x2000) && decoded && decoded < (1ull << 32) && lz4_block(body, payload, decoded, plain))
                cubin_globals(plain.data(), plain.size(), names);
            else if (payload >= 4 && memcmp(body, "\x28\xb5\x2f\xfd", 4) == 0 && decoded && decoded < (1ull << 32) &&
                     zstd_frame(body, payload, decoded, plain))
                cubin_globals(plain.data(), plain.size(), names);
        }
        pos += header + payload;
    }
}

// Remember the image a module or library was loaded from (mu() held).
void note_image(void *owner, const void *code, bool from_file, bool library) {
    if (library) modules().libraries.insert(owner);
    auto *img = new Image();
    if (from_file) {
        FILE *in = fopen(static_cast<const char *>(code), "rb");
        if (!in) {
            delete img;
            return;
        }
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) img->owned.append(buf, n);
        fclose(in);
        const char *kind;
        size_t size;
        if (img->owned.size() < 16 || !image_extent(img->owned.data(), &size, &kind)) {
            delete img;
            return;
        }
        img->kind = kind;
        img->size = std::min(size, img->owned.size());
        img->data = img->owned.data();
    } else {
        const void *p = image_extent(code, &img->size, &img->kind);
        if (!p || !img->size) {
            delete img;
            return;
        }
        Dl_info info;
        if (dladdr(p, &info) && info.dli_fbase) {
            img->data = p;  // static data of a loaded ELF file: valid as long as the process runs
        } else {
            img->owned.assign(static_cast<const char *>(p), img->size);  // the caller may free its buffer
            img->data = img->owned.data();
        }
    }
    Modules &m = modules();
    m.image_of[owner] = m.images.size();
    m.images.push_back(img);
}

// ---- recording launches ---------------------------------------------------------------------

thread_local bool in_recorder = false;

struct KernelCounts {
    long seen = 0;
    std::set<uint64_t> instances;        // recorded argument sets
    std::map<uint64_t, long> occurrences;  // launches per argument set, recorded or not
    long graph_launches = 0;               // kernel nodes run through cuGraphLaunch (not recorded)
    std::map<uint64_t, long> timed;        // launches timed in the application, per recorded argument set
    std::map<uint64_t, std::vector<double>> app_times;     // their durations in seconds, by CUDA events
    std::map<uint64_t, std::vector<double>> kernel_times;  // or by the GPU's kernel timestamps (CUPTI)
};

std::map<std::string, KernelCounts> &counts() {
    static auto *m = new std::map<std::string, KernelCounts>();
    return *m;
}

// In-application timing: the recorded launch of an instance and the next MNEME_RECORD_TIMED
// launches with the same dynamic hash run between two events on the application's stream. The
// application is never synchronized for it: elapsed times are collected with cuEventQuery at
// later launches, allocations and frees, and at exit, into counts-<pid>.json ("app_times").
struct PendingTiming {
    std::string kernel;
    uint64_t instance;
    CUevent start, stop;
};

std::vector<PendingTiming> &pending_timings() {  // mu() held
    static auto *v = new std::vector<PendingTiming>();
    return *v;
}

void reap_timings(bool wait) {
    auto &pending = pending_timings();
    if (pending.empty()) return;
    DRV(cuEventQuery);
    DRV(cuEventSynchronize);
    DRV(cuEventElapsedTime_v2);
    DRV(cuEventDestroy_v2);
    size_t kept = 0;
    for (PendingTiming &t : pending) {
        CUresult q = wait ? p_cuEventSynchronize(t.stop) : p_cuEventQuery(t.stop);
        if (q == CUDA_ERROR_NOT_READY) {
            pending[kept++] = t;
            continue;
        }
        float ms = 0;
        bool timed = q == CUDA_SUCCESS && p_cuEventElapsedTime_v2 &&
                     p_cuEventElapsedTime_v2(&ms, t.start, t.stop) == CUDA_SUCCESS;
        if (timed && ms > 0)
            counts()[t.kernel].app_times[t.instance].push_back(ms * 1e-3);
        p_cuEventDestroy_v2(t.start);
        p_cuEventDestroy_v2(t.stop);
    }
    pending.resize(kept);
}

// The gate of the timed launches. On an idle stream a start event recorded before the launch
// fires at once and the kernel only once the host has submitted it, so the events would time the
// submission too. So the stream first waits (cuStreamWaitValue32, GEQ) for a counter in
// page-locked, device-mapped host memory that the recorder raises with a plain store right after
// queuing start event, launch and stop event: the GPU runs the three back to back. The counter
// only grows (the wait compares cyclically) and the store cannot fail, so no release is missed.
// Everything queued before the wait drains, so the launch always finds room in the queue; but a
// driver call that itself waits for the held stream (a lazily loaded kernel, a growing local
// memory pool: both may synchronize the context) would wait for good, so a backstop thread
// releases a ticket still held after GATE_BACKSTOP_MS and that launch's time is dropped. The page
// is this library's own, never freed: a store into it stays safe even after the application
// destroyed the context that registered it.
alignas(4096) uint32_t gate_page[1024];
constexpr int GATE_BACKSTOP_MS = 20;

struct TimingGate {
    uint32_t ticket = 0;  // the last value a gated stream waits for; stored into gate_page[0]
    long gated = 0, ungated = 0, late = 0;  // late: released by the backstop, time dropped
    std::string ungated_because;  // the first reason a launch was timed without the gate
    long exclusive = 0, shared = 0;  // timed alone on the device, or beside whatever else ran
    long cupti = 0, cupti_missed = 0;  // timed by kernel timestamps; launches whose record did not come
    long flushed = 0;                  // recorded launches timed after an L2 flush (flush_l2)
    bool backstop = false;        // its thread runs (in this process: not after a fork)
    std::mutex mu;                // the backstop's own (it never takes mu())
    std::condition_variable cv;
    uint32_t held = 0;           // the ticket a stream waits for now; 0: none
    bool released_late = false;  // the backstop released `held`
};

TimingGate &timing_gate() {  // mu() held
    static auto *g = new TimingGate();
    return *g;
}

void *gate_backstop(void *) {
    TimingGate &g = timing_gate();
    std::unique_lock<std::mutex> lock(g.mu);
    for (;;) {
        g.cv.wait(lock, [&] { return g.held != 0; });
        uint32_t t = g.held;
        if (g.cv.wait_for(lock, std::chrono::milliseconds(GATE_BACKSTOP_MS), [&] { return g.held != t; })) continue;
        __atomic_store_n(&gate_page[0], t, __ATOMIC_RELEASE);
        g.held = 0;
        g.released_late = true;
    }
    return nullptr;
}

// The backstop thread, started once per process (signals blocked: they stay the application's).
bool start_backstop(TimingGate &g) {
    if (g.backstop) return true;
    static bool forks_reset = false;
    if (!forks_reset) {
        forks_reset = true;
        pthread_atfork(nullptr, nullptr, [] {  // a forked child has no backstop thread
            TimingGate &child = timing_gate();
            new (&child.mu) std::mutex();
            new (&child.cv) std::condition_variable();
            child.held = 0;
            child.backstop = false;
        });
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    g.backstop = pthread_create(&thread, nullptr, gate_backstop, nullptr) == 0;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (g.backstop) pthread_detach(thread);
    return g.backstop;
}

void time_ungated(TimingGate &g, const char *what, CUresult r) {
    if (!g.ungated_because.empty()) return;
    DRV(cuGetErrorName);
    const char *name = nullptr;
    if (r != CUDA_SUCCESS && p_cuGetErrorName) p_cuGetErrorName(r, &name);
    g.ungated_because = std::string(what) + (name ? std::string(" (") + name + ")" : "");
    fprintf(stderr, "mneme-recorder: timing launches without the gate: %s; in-application times include the "
                    "host's submission on an idle stream\n", g.ungated_because.c_str());
}

// The device address of the gate's counter in the current context, registering the page once
// (portable: every context sees it); 0 when this context cannot map it.
CUdeviceptr gate_address(TimingGate &g) {
    DRV(cuMemHostGetDevicePointer_v2);
    DRV(cuMemHostRegister_v2);
    if (!p_cuMemHostGetDevicePointer_v2 || !p_cuMemHostRegister_v2) {
        time_ungated(g, "the driver has no cuMemHostRegister/cuMemHostGetDevicePointer", CUDA_SUCCESS);
        return 0;
    }
    CUdeviceptr dev = 0;
    if (p_cuMemHostGetDevicePointer_v2(&dev, gate_page, 0) == CUDA_SUCCESS) return dev;
    CUresult r = p_cuMemHostRegister_v2(gate_page, sizeof gate_page,
                                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r == CUDA_SUCCESS && (r = p_cuMemHostGetDevicePointer_v2(&dev, gate_page, 0)) == CUDA_SUCCESS) return dev;
    time_ungated(g, "no device-mapped host memory for the gate", r);
    return 0;
}

// Registered after cudart's own handler, so it runs while the context still exists: the last
// launches' events (an instance launched once at the end) are still readable (mu() held).
void reap_timings_at_exit() {
    static bool registered = false;
    if (registered) return;
    registered = true;
    atexit([] {
        std::lock_guard<std::mutex> lock(mu());
        reap_timings(true);
    });
}

// Exclusive timing. In an application that runs kernels on several streams at once, a timed
// kernel shares the device with whatever else runs then, and its time is that of the mix, which a
// replay of the kernel alone cannot reproduce (streams_app's saxpy ran 2-5% slower beside the
// other thread's: benchmarks/results/gpu-session-2026-12-04.md). So each timed launch runs alone:
// the context drains first, and launches of other threads wait until its stop event has passed.
// Launches of selected kernels already queue on mu(); every other launch (and cuGraphLaunch)
// holds launch_mu() shared while it is submitted, and a timed launch holds it exclusively, as does
// each chunk of the snapshot writer's drain of recorded shadows (stream_sides). Copies and memsets
// an application queues on other streams meanwhile are not held. Until the first
// timed launch no launch takes the lock (a process that records nothing pays nothing); a launch
// submitted while that first one starts may still run beside it.
std::shared_mutex &launch_mu() {
    static auto *m = new std::shared_mutex();
    return *m;
}
std::atomic<bool> timing_started{false};

// Submit a launch that is not timed: beside an exclusive timing, after it.
template <typename Run>
CUresult run_shared(Run run) {
    if (!timing_started.load(std::memory_order_acquire) || !config().exclusive) return run();
    std::shared_lock<std::shared_mutex> beside(launch_mu());
    return run();
}

// The kernel timer (mneme_cuda/native/cupti_timer.h). An event window around a ~1 us kernel is
// 3.5 us, two thirds of it the front end's work between the start event, the launch and the stop
// event, and that part varies from process to process by several percent
// (benchmarks/results/gpu-session-2026-12-04.md, section 7); the GPU's own start and end
// timestamps of the kernel do not. Set up once, outside mu() (CUPTI's set-up may call the
// driver, whose entry points here take mu()), and left on: records turned off and on again did
// not come for later launches (H200, CUPTI 13.0). Each application launch then costs CUPTI's
// record of it (bench_recorder's overhead figure holds it).
// Where it cannot be had the launches are timed with events, and counts-<pid>.json says why.
struct KernelTimer {
    bool ready = false;
    std::string why;  // why not, when not ready
};

KernelTimer *timer_state = nullptr;  // set once kernel_timer() has run

KernelTimer &kernel_timer() {
    static KernelTimer *timer = [] {
        auto *t = new KernelTimer();
        const std::string &choice = config().timer;
#ifdef MNEME_CUPTI
        if (choice == "events")
            t->why = "MNEME_RECORD_TIMER=events";
        else if (choice == "auto" && getenv("CUDA_INJECTION64_PATH"))
            t->why = "a CUDA injection library (CUDA_INJECTION64_PATH) may own CUPTI's activity buffers";
        else if (mct_open(getenv("MNEME_CUPTI_LIB")) != 0 || mct_enable(MCT_WINDOWS) != 0)
            t->why = mct_why();
        else
            t->ready = true;
#else
        t->why = "the recorder was built without CUPTI's headers (cupti.h)";
#endif
        if (!t->ready && choice == "cupti")
            fprintf(stderr, "mneme-recorder: MNEME_RECORD_TIMER=cupti, but %s; timing with CUDA events\n",
                    t->why.c_str());
        timer_state = t;
        return t;
    }();
    return *timer;
}

// Alone on the device (MNEME_RECORD_TIMING_EXCLUSIVE, the default): no other launch is submitted
// while the returned lock is held, and what was queued has drained. An earlier error of the
// application's fails the synchronize: it is the application's to see at its launch, and this
// launch is timed beside whatever still runs (the lock is not held then).
std::unique_lock<std::shared_mutex> alone_on_device() {
    DRV(cuCtxSynchronize);
    std::unique_lock<std::shared_mutex> alone(launch_mu(), std::defer_lock);
    if (config().exclusive) {
        timing_started.store(true, std::memory_order_release);
        alone.lock();
        if (!p_cuCtxSynchronize || p_cuCtxSynchronize() != CUDA_SUCCESS) alone.unlock();
    }
    return alone;
}

// A lazily loaded kernel loads at its first launch, which may synchronize: load it before timing.
void load_before_timing(CUfunction fn) {
    DRV(cuFuncIsLoaded);
    DRV(cuFuncLoad);
    CUfunctionLoadingState loading = CU_FUNCTION_LOADING_STATE_LOADED;
    if (fn && p_cuFuncIsLoaded && p_cuFuncLoad && p_cuFuncIsLoaded(&loading, fn) == CUDA_SUCCESS &&
        loading != CU_FUNCTION_LOADING_STATE_LOADED)
        p_cuFuncLoad(fn);
}

// Time one launch by its kernel timestamps (mu() held). The application's thread waits for its
// stream here, so the record can be read at once; no gate is needed, the timestamps hold no submission.
#ifdef MNEME_CUPTI
template <typename Run>
CUresult time_kernel(KernelTimer &kt, const std::string &kernel, uint64_t instance, CUfunction fn, CUstream stream,
                     long &timed, Run run) {
    load_before_timing(fn);
    DRV(cuStreamSynchronize);
    std::unique_lock<std::shared_mutex> alone = alone_on_device();
    // Alone on the device the only record of this kernel between the two timestamps is this
    // launch's; beside other threads, only the one on its stream (CUPTI's id of it).
    uint32_t stream_id = ~0u;
    DRV(cuCtxGetCurrent);
    CUcontext ctx = nullptr;
    if (!alone.owns_lock() && p_cuCtxGetCurrent && p_cuCtxGetCurrent(&ctx) == CUDA_SUCCESS &&
        mct_stream(ctx, stream == CU_STREAM_PER_THREAD ? nullptr : stream, stream == CU_STREAM_PER_THREAD,
                   &stream_id) != 0)
        stream_id = ~0u;
    uint64_t from = mct_now();
    mct_arm(from);  // older records a flush still delivers cannot push this one out of the ring
    CUresult r = run();
    bool ran = r == CUDA_SUCCESS && p_cuStreamSynchronize && p_cuStreamSynchronize(stream) == CUDA_SUCCESS;
    uint64_t to = mct_now();
    bool was_alone = alone.owns_lock() && ran;
    if (alone.owns_lock()) alone.unlock();
    if (ran) mct_flush();
    if (r != CUDA_SUCCESS) return r;
    timed++;
    TimingGate &g = timing_gate();
    uint64_t ns = 0;
    if (ran && mct_take_window(kernel.c_str(), from, to, stream_id, &ns) == 1) {
        counts()[kernel].kernel_times[instance].push_back(ns * 1e-9);
        g.cupti++;
        (was_alone ? g.exclusive : g.shared)++;
    } else if (ran && ++g.cupti_missed >= 2 && !g.cupti) {  // never a record: events from here on
        kt.ready = false;
        uint64_t kernels = 0, ids = 0;
        mct_seen(&kernels, &ids);
        char why[160];
        snprintf(why, sizeof why, "CUPTI delivered no record of the timed launches (%llu kernel records in all)",
                 (unsigned long long)kernels);
        kt.why = why;
        mct_enable(MCT_OFF);  // never on again: the application's launches stop paying for the records
        fprintf(stderr, "mneme-recorder: %s; timing with CUDA events\n", kt.why.c_str());
    }
    return r;
}
#endif

// The L2 flush before a recorded launch is timed (mu() held). The prologue capture has just read
// every live allocation, so the L2 holds whatever part of the kernel's data that copy left: a
// state no replay reproduces (saxpy_app's recorded launch took 9.0 us, its replay 7.8 us warm and
// 17.3 us flushed; H200, benchmarks/results/gpu-session-2026-12-04.md). Evicted, it is the state
// `mneme replay --cache flushed` times from, so an instance the application launches once compares
// like for like. A buffer twice the L2's size per context, from the driver's own cuMemAlloc
// (outside the recorded range, in no snapshot), filled as the replay's flush does;
// MNEME_RECORD_TIMING_FLUSH=0 leaves the L2 alone. (Writing it 8 or 32 times instead of once, or
// a busy kernel first, changed nothing: the SM clock was at its 1980 MHz maximum even after 300 ms
// idle; benchmarks/gpu/probes/clock_probe.cu.)
// flush_buffer: the current context's buffer ({0, 0} where none could be had), allocated on first use.
std::pair<CUdeviceptr, size_t> flush_buffer() {
    static auto *buffers = new std::map<CUcontext, std::pair<CUdeviceptr, size_t>>();
    DRV(cuCtxGetCurrent);
    DRV(cuCtxGetDevice);
    DRV(cuDeviceGetAttribute);
    DRV(cuMemAlloc_v2);
    CUcontext ctx = nullptr;
    if (!p_cuCtxGetCurrent || p_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return {0, 0};
    auto it = buffers->find(ctx);
    if (it == buffers->end()) {
        CUdevice device = 0;
        int l2 = 0;
        CUdeviceptr buffer = 0;
        size_t size = 0;
        if (p_cuCtxGetDevice && p_cuDeviceGetAttribute && p_cuMemAlloc_v2 && p_cuCtxGetDevice(&device) == CUDA_SUCCESS &&
            p_cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device) == CUDA_SUCCESS && l2 > 0) {
            size = 2 * (size_t)l2;
            if (p_cuMemAlloc_v2(&buffer, size) != CUDA_SUCCESS) buffer = 0;  // a full device: no flush
        }
        it = buffers->emplace(ctx, std::make_pair(buffer, size)).first;
    }
    return it->second;
}

// flush_l2: the flush, on `stream` (False when it could not be done).
bool flush_l2(CUstream stream) {
    DRV(cuMemsetD8Async);
    auto buffer = flush_buffer();
    return buffer.first && p_cuMemsetD8Async && p_cuMemsetD8Async(buffer.first, 0, buffer.second, stream) == CUDA_SUCCESS;
}

// Run a launch of a recorded instance, timed when that instance still has timings to take (mu() held).
template <typename Run>
CUresult time_launch(const std::string &kernel, uint64_t instance, CUfunction fn, CUstream stream, Run run) {
    reap_timings(false);
    long &timed = counts()[kernel].timed[instance];
    if (timed > config().timed) return run();
#ifdef MNEME_CUPTI
    KernelTimer &kt = kernel_timer();
    if (kt.ready) return time_kernel(kt, kernel, instance, fn, stream, timed, run);
#endif
    reap_timings_at_exit();
    DRV(cuEventCreate);
    DRV(cuEventRecord);
    DRV(cuEventDestroy_v2);
    DRV(cuStreamWaitValue32_v2);
    CUevent start = nullptr, stop = nullptr;
    if (!p_cuEventCreate || p_cuEventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return run();
    if (p_cuEventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        p_cuEventDestroy_v2(start);
        return run();
    }
    TimingGate &g = timing_gate();
    bool held = false;  // the stream waits for gate_page[0] >= ticket
    uint32_t ticket = g.ticket + 1;
    load_before_timing(fn);  // before the gate
    DRV(cuEventSynchronize);
    std::unique_lock<std::shared_mutex> alone = alone_on_device();
    static const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    if (!config().gate) {
        time_ungated(g, "MNEME_RECORD_TIMING_GATE=0", CUDA_SUCCESS);
    } else if (blocking && strcmp(blocking, "1") == 0) {  // each launch would wait for its own held stream
        time_ungated(g, "CUDA_LAUNCH_BLOCKING=1", CUDA_SUCCESS);
    } else if (g.late >= 2) {  // once may be a first launch's load; twice, the launches wait for their stream
        time_ungated(g, "launches waited for their own held stream (the backstop released them)", CUDA_SUCCESS);
    } else if (!start_backstop(g)) {
        time_ungated(g, "no thread for the gate's backstop", CUDA_SUCCESS);
    } else if (CUdeviceptr flag = gate_address(g)) {
        CUresult w = p_cuStreamWaitValue32_v2 ? p_cuStreamWaitValue32_v2(stream, flag, ticket, CU_STREAM_WAIT_VALUE_GEQ)
                                             : CUDA_ERROR_NOT_SUPPORTED;
        held = w == CUDA_SUCCESS;
        if (held) {
            g.ticket = ticket;
            std::lock_guard<std::mutex> backstop(g.mu);
            g.held = ticket;
            g.released_late = false;
        } else {
            time_ungated(g, "cuStreamWaitValue32 on the application's stream failed", w);
        }
        if (held) g.cv.notify_one();
    }
    bool started = p_cuEventRecord(start, stream) == CUDA_SUCCESS;
    CUresult r = run();
    bool stopped = started && r == CUDA_SUCCESS && p_cuEventRecord(stop, stream) == CUDA_SUCCESS;
    bool late = false;
    if (held) {
        __atomic_store_n(&gate_page[0], ticket, __ATOMIC_RELEASE);  // on every path: the stream goes on
        {
            std::lock_guard<std::mutex> backstop(g.mu);
            late = g.released_late;
            g.held = 0;
        }
        g.cv.notify_one();
    }
    if (late) g.late++;
    if (stopped) timed++;  // a late one too: at most MNEME_RECORD_TIMED + 1 stalls per instance
    // The others' launches wait until this one has run (a failed wait: they go on, its time is kept
    // only as shared).
    bool was_alone = alone.owns_lock() && stopped && p_cuEventSynchronize && p_cuEventSynchronize(stop) == CUDA_SUCCESS;
    if (alone.owns_lock()) alone.unlock();
    if (stopped && !late) {
        (held ? g.gated : g.ungated)++;
        (was_alone ? g.exclusive : g.shared)++;
        pending_timings().push_back(PendingTiming{kernel, instance, start, stop});
    } else {
        p_cuEventDestroy_v2(start);
        p_cuEventDestroy_v2(stop);
    }
    return r;
}

bool disabled = false;
bool maps_written = false;
long launch_seq = 0;

// Stop recording for good, with one message; the application runs on.
void stop_recording(const char *fmt, ...) {
    if (disabled) return;
    disabled = true;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; recording stops, the application continues\n");
    va_end(ap);
}

uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
    const unsigned char *b = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

double now_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Write a whole file atomically: a temporary name, fsync, rename. On failure nothing is left.
bool write_atomic(const std::string &path, const void *data, size_t n) {
    std::string tmp = path + ".tmp";
    FILE *out = fopen(tmp.c_str(), "wb");
    if (!out) return false;
    bool ok = fwrite(data, 1, n, out) == n;
    ok = fflush(out) == 0 && ok;
    ok = ok && fsync(fileno(out)) == 0;
    ok = fclose(out) == 0 && ok;
    int saved = errno;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        saved = ok ? errno : saved;
        unlink(tmp.c_str());
        errno = saved;
        return false;
    }
    return true;
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

// Whether a kernel handle is selected, decided once per handle (the regex is too slow per launch).
struct Selection {
    std::string name;
    CUfunction resolved;
    bool selected;
};

std::mutex &selection_mu() {
    static auto *m = new std::mutex();
    return *m;
}

Selection select_kernel(CUfunction f) {
    static auto *cache = new std::unordered_map<void *, Selection>();
    {
        std::lock_guard<std::mutex> lock(selection_mu());
        auto it = cache->find(f);
        if (it != cache->end()) return it->second;
    }
    Selection s;
    s.name = kernel_name(f, &s.resolved);
    s.selected = !s.name.empty() && std::regex_search(s.name, config().kernel);
    std::lock_guard<std::mutex> lock(selection_mu());
    (*cache)[f] = s;
    return s;
}

// The module or library that defines a launched handle (mu() held); nullptr when unknown.
void *owner_of_launch(CUfunction f, CUfunction resolved) {
    Modules &m = modules();
    for (void *h : {static_cast<void *>(f), static_cast<void *>(resolved)}) {
        auto it = m.owner_of.find(h);
        if (it != m.owner_of.end()) return canonical_owner(it->second);
    }
    DRV(cuKernelGetLibrary);
    DRV(cuFuncGetModule);
    CUlibrary lib = nullptr;
    if (f != resolved && p_cuKernelGetLibrary &&
        p_cuKernelGetLibrary(&lib, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS && lib)
        return lib;
    CUmodule mod = nullptr;
    if (p_cuFuncGetModule && p_cuFuncGetModule(&mod, resolved) == CUDA_SUCCESS && mod) return canonical_owner(mod);
    return nullptr;
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

// ---- capture: device shadows, pinned staging and the background snapshot writer ------------------
//
// At a recorded launch the live regions and the module's globals are copied device-to-device
// into shadow buffers (the recorder's own stream-ordered pool: not in the placed range, never
// seen by the application), before the launch (prologue) and after it (epilogue); the
// application then runs on. A writer thread drains the shadows through small pinned staging
// buffers into the launch's prologue.mneme and epilogue.mneme (snapshot_writer.h), writes the
// manifest, renames the launch folder and frees the shadows. When shadows cannot be had (the
// pending bound, the free-memory margin, no pool), the launch is written synchronously from the
// live memory instead: the application waits for the files.

struct GlobalVar {
    std::string name;
    CUdeviceptr addr;
    size_t size;
};

std::string json_string(const std::string &s);
void remove_tree(const std::string &dir);

// The size of one staging buffer, and the snapshot chunk size (LZ4 regions: LZ4_CHUNK_SIZE; the
// writer cuts each staging buffer into them).
const uint64_t CHUNK = 4u << 20;
static_assert(CHUNK % mneme_snapshot::LZ4_CHUNK_SIZE == 0, "a staging buffer holds whole LZ4 chunks");

// Device-to-host copies through pinned staging buffers (two slots, one buffer per side) on a
// private stream, so the copy of the next chunk overlaps the encoding of this one. Falls back to
// pageable synchronous copies when pinned memory or a stream cannot be had.
struct Staging {
    void *buf[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};  // [slot][side]
    CUevent done[2] = {nullptr, nullptr};
    CUstream stream = nullptr;
    bool tried = false, pinned = false;
    std::vector<char> pageable[2];
    std::mutex mu;  // one user at a time: the writer thread, or a synchronous capture
};

Staging &staging() {
    static Staging *once = [] {  // thread-safe: the writer thread and a synchronous capture may race here
        auto *s = new Staging();
        s->tried = true;
        DRV(cuMemAllocHost_v2);
        DRV(cuStreamCreate);
        DRV(cuEventCreate);
        s->pinned = p_cuMemAllocHost_v2 && p_cuStreamCreate && p_cuEventCreate &&
                    p_cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                    p_cuEventCreate(&s->done[0], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                    p_cuEventCreate(&s->done[1], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
        for (int slot = 0; s->pinned && slot < 2; ++slot)
            for (int side = 0; s->pinned && side < 2; ++side)
                s->pinned = p_cuMemAllocHost_v2(&s->buf[slot][side], CHUNK) == CUDA_SUCCESS;
        if (!s->pinned) {
            warn("no pinned staging memory; snapshots are copied through pageable memory (slower)");
            s->pageable[0].resize(CHUNK);
            s->pageable[1].resize(CHUNK);
        }
        return s;
    }();
    return *once;
}

enum { PROLOGUE = 0, EPILOGUE = 1 };

// One side of a launch as the writer streams it: its snapshot writer and where each span's
// bytes are now (the live memory, or a shadow).
struct Side {
    mneme_snapshot::Writer *writer = nullptr;
    std::vector<CUdeviceptr> src;
    mneme_snapshot::Encoding encoding = mneme_snapshot::ENC_ZSTD;
    bool best = false;
};

// What a recorded launch hands to the snapshot writer.
struct CaptureJob {
    std::string tmp_dir, final_dir, manifest;  // manifest: every field but the writer's own
    std::vector<std::pair<uint64_t, uint64_t>> regions;
    std::vector<GlobalVar> globals;
    std::vector<mneme_snapshot::Policy> policies;  // per region
    std::string args;
    std::vector<std::pair<uint32_t, uint32_t>> layout;
    CUcontext context = nullptr;
    CUdeviceptr shadow[2] = {0, 0};
    std::vector<uint64_t> offsets;  // each span's (regions, then globals) offset in a shadow
    uint64_t shadow_bytes = 0;
    std::string name;
    long index = 0;
};

// The epilogue's encoding: MNEME_RECORD_EPILOGUE_FORMAT (`mneme record --epilogue-format`).
struct EpilogueFormat {
    mneme_snapshot::Encoding encoding = mneme_snapshot::ENC_DIFF;
    bool best = false;
    const char *name = "diff";
};

const EpilogueFormat &epilogue_format() {
    static EpilogueFormat *f = [] {
        auto *f = new EpilogueFormat();
        const char *v = getenv("MNEME_RECORD_EPILOGUE_FORMAT");
        if (v && strcmp(v, "bytes") == 0) {
            f->encoding = mneme_snapshot::ENC_ZSTD;
            f->name = "bytes";
        } else if (v && strcmp(v, "best") == 0) {
            f->best = true;
            f->name = "best";
        } else if (v && *v && strcmp(v, "diff") != 0) {
            warn("MNEME_RECORD_EPILOGUE_FORMAT=%s is not diff, bytes or best; epilogues are written as diffs", v);
        }
        return f;
    }();
    return *f;
}

mneme_snapshot::Options writer_options() {
    static mneme_snapshot::Options *o = [] {
        auto *o = new mneme_snapshot::Options();
        o->chunk_size = CHUNK;
        // No fsync: the rename of the launch folder protects against the application crashing
        // (the kernel keeps its page cache); syncing gigabytes per launch costs more than the copy.
        o->sync = false;
        if (const char *v = getenv("MNEME_RECORD_ZSTD_LEVEL")) o->level = atoi(v);
        // MNEME_RECORD_COMPRESSION (`mneme record --compression`): lz4 (the default: prologues
        // restore about twice as fast as from zstd), zstd, or none. Without liblz4, zstd.
        o->codec = mneme_snapshot::CODEC_LZ4;
        if (const char *v = getenv("MNEME_RECORD_COMPRESSION")) {
            if (strcmp(v, "zstd") == 0)
                o->codec = mneme_snapshot::CODEC_ZSTD;
            else if (strcmp(v, "none") == 0)
                o->compress = false;
            else if (*v && strcmp(v, "lz4") != 0)
                warn("MNEME_RECORD_COMPRESSION=%s is not lz4, zstd or none; snapshots are compressed with lz4", v);
        }
        if (o->compress && o->codec == mneme_snapshot::CODEC_LZ4 && !mneme_snapshot::lz4_available())
            warn("liblz4.so.1 cannot be loaded; snapshots are compressed with zstd (install liblz4-1)");
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long threads = std::max(1l, std::min(8l, cores / 2));
        if (const char *v = getenv("MNEME_RECORD_WRITE_THREADS")) threads = std::max(1l, atol(v));
        mneme_snapshot::set_threads((int)threads);
        return o;
    }();
    return *o;
}

// Copy `n` device bytes at `src` into `out` through the staging buffer of `side` (staging().mu held).
bool copy_down(CUdeviceptr src, uint64_t n, std::string &out, int side) {
    Staging &s = staging();
    DRV(cuMemcpyDtoH_v2);
    out.clear();
    for (uint64_t off = 0; off < n; off += CHUNK) {
        size_t len = (size_t)std::min<uint64_t>(CHUNK, n - off);
        void *buf = s.pinned ? s.buf[0][side] : s.pageable[side].data();
        if (!p_cuMemcpyDtoH_v2 || p_cuMemcpyDtoH_v2(buf, src + off, len) != CUDA_SUCCESS) return false;
        out.append(static_cast<const char *>(buf), len);
    }
    return true;
}

// Stream every region, then every global, of one or both sides into their writers, chunk by
// chunk through the staging buffers; a diff epilogue takes the prologue's bytes of the same
// chunk as its base. 0, or an errno value (EIO for a failed device copy).
int stream_sides(const CaptureJob &job, Side *sides[2]) {
    Staging &s = staging();
    std::lock_guard<std::mutex> lock(s.mu);
    DRV(cuMemcpyDtoHAsync_v2);
    DRV(cuMemcpyDtoH_v2);
    DRV(cuEventRecord);
    DRV(cuEventSynchronize);
    DRV(cuStreamSynchronize);
    for (size_t i = 0; i < job.regions.size(); ++i) {
        uint64_t addr = job.regions[i].first, size = job.regions[i].second;
        for (int k = 0; k < 2; ++k)
            if (sides[k])
                if (int e = sides[k]->writer->begin_region(addr, size, sides[k]->encoding, job.policies[i],
                                                            sides[k]->best))
                    return e;
        uint64_t chunks = (size + CHUNK - 1) / CHUNK;
        auto length = [&](uint64_t c) { return (size_t)std::min<uint64_t>(CHUNK, size - c * CHUNK); };
        auto issue = [&](uint64_t c) {
            // Not beside a timed launch: that one runs alone on the device (alone_on_device drains
            // what was queued; this waits until it has run). A drain of the last recording's
            // shadows would otherwise share the memory system with the next timed launch: reduce_app
            // launches its 4-block reduce_sum right after the 1024-block one, and over 25 processes
            // that launch took 1.50-1.95 us (median 1.665) with the drain beside it, 1.47-1.76 us
            // (median 1.600, its flushed replay's) without (benchmarks/gpu/probes/flush_order_probe.py).
            std::shared_lock<std::shared_mutex> beside(launch_mu(), std::defer_lock);
            if (timing_started.load(std::memory_order_acquire) && config().exclusive) beside.lock();
            for (int k = 0; k < 2; ++k) {
                if (!sides[k]) continue;
                CUdeviceptr from = sides[k]->src[i] + c * CHUNK;
                if (!s.pinned) {
                    if (p_cuMemcpyDtoH_v2(s.pageable[k].data(), from, length(c)) != CUDA_SUCCESS) return false;
                } else if (p_cuMemcpyDtoHAsync_v2(s.buf[c % 2][k], from, length(c), s.stream) != CUDA_SUCCESS) {
                    return false;
                }
            }
            return !s.pinned || p_cuEventRecord(s.done[c % 2], s.stream) == CUDA_SUCCESS;
        };
        bool ok = chunks == 0 || issue(0);
        int err = 0;
        for (uint64_t c = 0; ok && !err && c < chunks; ++c) {
            if (s.pinned) ok = p_cuEventSynchronize(s.done[c % 2]) == CUDA_SUCCESS;
            const void *data[2];
            for (int k = 0; k < 2; ++k) data[k] = s.pinned ? s.buf[c % 2][k] : s.pageable[k].data();
            if (!ok) break;
            // Pinned: the next chunk comes down while the writers copy this one out of its slot.
            if (s.pinned && c + 1 < chunks && !issue(c + 1)) ok = false;
            if (sides[PROLOGUE]) err = sides[PROLOGUE]->writer->chunk(data[PROLOGUE], length(c));
            if (!err && sides[EPILOGUE])
                err = sides[EPILOGUE]->writer->chunk(data[EPILOGUE], length(c),
                                                     sides[PROLOGUE] ? data[PROLOGUE] : nullptr);
            if (ok && !err && !s.pinned && c + 1 < chunks && !issue(c + 1)) ok = false;
        }
        if (s.pinned) p_cuStreamSynchronize(s.stream);  // no copy may still land in a buffer we reuse
        if (err) return err;
        if (!ok) return EIO;
        for (int k = 0; k < 2; ++k)
            if (sides[k])
                if (int e = sides[k]->writer->end_region()) return e;
    }
    std::string bytes;
    for (size_t g = 0; g < job.globals.size(); ++g)
        for (int k = 0; k < 2; ++k) {
            if (!sides[k]) continue;
            if (!copy_down(sides[k]->src[job.regions.size() + g], job.globals[g].size, bytes, k)) return EIO;
            if (int e = sides[k]->writer->global(job.globals[g].name, bytes.data(), bytes.size())) return e;
        }
    return 0;
}

const char *PRODUCER = "mneme-cuda-recorder 0.3";

// Open one side's snapshot in the launch's temporary folder, with its argument buffer.
int open_side(const CaptureJob &job, int kind, mneme_snapshot::Writer &w, const uint8_t *base_id) {
    // META's static hash is left empty (the code's identity is known only when finalize links
    // its IR), and so is the dynamic hash: the recording database names both.
    if (int e = w.open("", "", PRODUCER, base_id)) return e;
    (void)kind;
    return w.args(job.args.data(), job.args.size(), job.layout);
}

std::string snapshot_path(const CaptureJob &job, int kind) {
    return job.tmp_dir + (kind == PROLOGUE ? "/prologue.mneme" : "/epilogue.mneme");
}

// The manifest's last fields, the manifest itself, then the rename that publishes the launch.
int publish(const CaptureJob &job, const char *path, double write_seconds, uint64_t stored) {
    char buf[512];
    snprintf(buf, sizeof buf,
             ", \"prologue\": \"prologue.mneme\", \"epilogue\": \"epilogue.mneme\", \"capture\": \"%s\""
             ", \"epilogue_format\": \"%s\", \"write_seconds\": %.6f, \"stored_bytes\": %llu}\n",
             path, epilogue_format().name, write_seconds, (unsigned long long)stored);
    std::string m = job.manifest + buf;
    if (!write_atomic(job.tmp_dir + "/manifest.json", m.data(), m.size())) return errno ? errno : EIO;
    if (rename(job.tmp_dir.c_str(), job.final_dir.c_str()) != 0) return errno ? errno : EIO;
    return 0;
}

// The shadow pool, the capture stream and the writer thread's queue.
struct Shadows {
    bool tried = false, ok = false;
    CUmemoryPool pool = nullptr;
    CUstream stream = nullptr;  // the capture stream (device-to-device copies), private
    CUevent copied = nullptr;
    uint64_t limit = 0;   // bytes of shadows pending at most
    uint64_t margin = 0;  // device memory left free for the application
    std::mutex mu;
    std::condition_variable cv;
    std::deque<CaptureJob *> queue;
    uint64_t pending_bytes = 0;
    std::atomic<int> pending{0};  // jobs queued or being written (read by the crash handler)
    bool started = false;
    pthread_t writer;
};

Shadows &shadows() {
    static auto *s = new Shadows();
    return *s;
}

void writer_main();

// Wait (bounded) for the writer, then die as the signal says (the previous action, by default
// the default one): launches completed before a crash stay readable.
struct sigaction previous_action[32];

void on_crash(int sig) {
    Shadows &s = shadows();
    if (!pthread_equal(pthread_self(), s.writer)) {
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 6000 && s.pending.load() > 0; ++i) nanosleep(&tick, nullptr);
    }
    sigaction(sig, &previous_action[sig], nullptr);
    raise(sig);  // delivered when this handler returns (the signal is blocked until then)
}

void wait_for_writer() {
    Shadows &s = shadows();
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.pending.load() == 0; });
}

void at_exit_wait() { wait_for_writer(); }

bool start_writer() {
    Shadows &s = shadows();
    if (s.started) return true;
    if (pthread_create(&s.writer, nullptr, [](void *) -> void * { writer_main(); return nullptr; }, nullptr) != 0)
        return false;
    s.started = true;
    atexit(at_exit_wait);  // registered after cudart's own handler, so it runs before the context goes
    // A forked child has no writer thread (nor a usable context): it must not wait for the parent's launches.
    pthread_atfork(nullptr, nullptr, [] {
        Shadows &child = shadows();
        new (&child.mu) std::mutex();  // the writer may have held it at the fork
        new (&child.cv) std::condition_variable();
        child.queue.clear();
        child.pending.store(0);
        child.pending_bytes = 0;
        child.started = false;
        child.tried = true;
        child.ok = false;  // its launches are written synchronously
    });
    struct sigaction sa = {};
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &sa, &previous_action[sig]);
    return true;
}

// The pool, stream and bounds, once (mu() held).
bool shadows_ready() {
    Shadows &s = shadows();
    if (s.tried) return s.ok;
    s.tried = true;
    if (getenv("MNEME_RECORD_SYNC") && strcmp(getenv("MNEME_RECORD_SYNC"), "0") != 0) return false;
    DRV(cuCtxGetDevice);
    DRV(cuMemPoolCreate);
    DRV(cuStreamCreate);
    DRV(cuEventCreate);
    DRV(cuMemGetInfo_v2);
    CUdevice device;
    size_t free_bytes = 0, total = 0;
    if (!p_cuCtxGetDevice || !p_cuMemPoolCreate || !p_cuStreamCreate || !p_cuEventCreate || !p_cuMemGetInfo_v2 ||
        p_cuCtxGetDevice(&device) != CUDA_SUCCESS || p_cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS)
        return false;
    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    if (p_cuMemPoolCreate(&s.pool, &props) != CUDA_SUCCESS ||
        p_cuStreamCreate(&s.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        p_cuEventCreate(&s.copied, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return false;
    s.limit = total / 2;
    if (const char *v = getenv("MNEME_RECORD_PENDING_MIB")) s.limit = strtoull(v, nullptr, 0) << 20;
    s.margin = std::max<uint64_t>(1ull << 30, total / 20);
    s.ok = true;
    return true;
}

// Room for a launch's two shadows: both allocated on the capture stream, or neither (mu() held).
bool take_shadows(CaptureJob &job) {
    if (!shadows_ready() || !start_writer()) return false;
    Shadows &s = shadows();
    DRV(cuMemGetInfo_v2);
    DRV(cuMemAllocFromPoolAsync);
    DRV(cuMemFreeAsync);
    size_t free_bytes = 0, total = 0;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.pending_bytes + 2 * job.shadow_bytes > s.limit) return false;
    }
    if (p_cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS || free_bytes < 2 * job.shadow_bytes + s.margin)
        return false;
    uint64_t bytes = std::max<uint64_t>(job.shadow_bytes, 256);
    if (p_cuMemAllocFromPoolAsync(&job.shadow[0], bytes, s.pool, s.stream) != CUDA_SUCCESS) return false;
    if (p_cuMemAllocFromPoolAsync(&job.shadow[1], bytes, s.pool, s.stream) != CUDA_SUCCESS) {
        p_cuMemFreeAsync(job.shadow[0], s.stream);
        job.shadow[0] = 0;
        return false;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending_bytes += 2 * job.shadow_bytes;
    return true;
}

void drop_shadows(CaptureJob &job, CUstream stream) {
    DRV(cuMemFreeAsync);
    for (CUdeviceptr &p : job.shadow)
        if (p) p_cuMemFreeAsync(p, stream);
    job.shadow[0] = job.shadow[1] = 0;
}

// Copy every span into one side's shadow on the capture stream.
bool copy_into_shadow(const CaptureJob &job, int kind) {
    Shadows &s = shadows();
    DRV(cuMemcpyDtoDAsync_v2);
    for (size_t i = 0; i < job.regions.size(); ++i)
        if (job.regions[i].second && p_cuMemcpyDtoDAsync_v2(job.shadow[kind] + job.offsets[i], job.regions[i].first,
                                                             job.regions[i].second, s.stream) != CUDA_SUCCESS)
            return false;
    for (size_t g = 0; g < job.globals.size(); ++g)
        if (p_cuMemcpyDtoDAsync_v2(job.shadow[kind] + job.offsets[job.regions.size() + g], job.globals[g].addr,
                                   job.globals[g].size, s.stream) != CUDA_SUCCESS)
            return false;
    return true;
}

std::vector<CUdeviceptr> shadow_sources(const CaptureJob &job, int kind) {
    std::vector<CUdeviceptr> src;
    for (uint64_t off : job.offsets) src.push_back(job.shadow[kind] + off);
    return src;
}

std::vector<CUdeviceptr> live_sources(const CaptureJob &job) {
    std::vector<CUdeviceptr> src;
    for (auto &r : job.regions) src.push_back(r.first);
    for (auto &g : job.globals) src.push_back(g.addr);
    return src;
}

// Both snapshots of a shadowed launch, in one pass over the shadows; 0 or an errno value.
int write_from_shadows(const CaptureJob &job, uint64_t *stored) {
    mneme_snapshot::Writer pro(snapshot_path(job, PROLOGUE), PROLOGUE, writer_options());
    mneme_snapshot::Writer epi(snapshot_path(job, EPILOGUE), EPILOGUE, writer_options());
    const EpilogueFormat &f = epilogue_format();
    if (int e = open_side(job, PROLOGUE, pro, nullptr)) return e;
    if (int e = open_side(job, EPILOGUE, epi, f.encoding == mneme_snapshot::ENC_DIFF ? pro.snapshot_id() : nullptr))
        return e;
    Side p, q;
    p.writer = &pro;
    p.src = shadow_sources(job, PROLOGUE);
    q.writer = &epi;
    q.src = shadow_sources(job, EPILOGUE);
    q.encoding = f.encoding;
    q.best = f.best;
    Side *sides[2] = {&p, &q};
    if (int e = stream_sides(job, sides)) return e;
    if (int e = pro.finish()) return e;
    if (int e = epi.finish()) return e;
    *stored = pro.bytes_written() + epi.bytes_written();
    return 0;
}

void writer_main() {
    Shadows &s = shadows();
    DRV(cuCtxSetCurrent);
    DRV(cuStreamCreate);
    DRV(cuStreamSynchronize);
    DRV(cuMemPoolTrimTo);
    CUstream stream = nullptr;
    for (;;) {
        CaptureJob *job;
        {
            std::unique_lock<std::mutex> lock(s.mu);
            s.cv.wait(lock, [&] { return !s.queue.empty(); });
            job = s.queue.front();
            s.queue.pop_front();
        }
        double t0 = now_seconds();
        p_cuCtxSetCurrent(job->context);
        if (!stream && p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) stream = s.stream;
        uint64_t stored = 0;
        int err = write_from_shadows(*job, &stored);
        drop_shadows(*job, stream);
        p_cuStreamSynchronize(stream);
        if (!err) err = publish(*job, "device shadow", now_seconds() - t0, stored);
        if (err) {
            remove_tree(job->tmp_dir);
            stop_recording("writing the snapshots of launch %ld of %s to %s failed (%s)", job->index,
                           job->name.c_str(), job->tmp_dir.c_str(), strerror(err));
        }
        std::lock_guard<std::mutex> lock(s.mu);
        s.pending_bytes -= 2 * job->shadow_bytes;
        if (s.queue.empty()) p_cuMemPoolTrimTo(s.pool, 0);  // give the memory back to the application
        delete job;
        s.pending.fetch_sub(1);
        s.cv.notify_all();
    }
}

void enqueue(CaptureJob *job) {
    Shadows &s = shadows();
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending.fetch_add(1);
    s.queue.push_back(job);
    s.cv.notify_all();
}

// An application allocation failed for lack of memory: when shadows are pending, wait for the
// writer to free them and say so (the caller retries once).
bool wait_for_shadows() {
    Shadows &s = shadows();
    if (!s.started || s.pending.load() == 0) return false;
    wait_for_writer();
    return true;
}

// Give a launch's shadows back when its capture did not complete (mu() held).
void release_shadows(CaptureJob &job) {
    Shadows &s = shadows();
    DRV(cuStreamSynchronize);
    p_cuStreamSynchronize(s.stream);
    drop_shadows(job, s.stream);
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending_bytes -= 2 * job.shadow_bytes;
}

// A region's verification policy as the application annotated it, else exact bytes (mu() held).
mneme_snapshot::Policy region_policy(uint64_t addr) {
    static const char *dtypes[] = {"u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64",
                                   "f16", "bf16", "f32", "f64"};
    static const char *norms[] = {"none", "L1", "L2", "Linf"};
    mneme_snapshot::Policy p;
    auto it = annotations().find(addr);
    if (it == annotations().end()) return p;
    for (uint8_t i = 0; i < 12; ++i)
        if (it->second.dtype == dtypes[i]) p.dtype = i;
    for (uint8_t i = 0; i < 4; ++i)
        if (it->second.norm == norms[i]) p.norm = i;
    p.relative = it->second.relative;
    p.threshold = it->second.threshold;
    return p;
}

// One side written synchronously from the live memory (the application waits); 0 or an errno value.
int write_live(const CaptureJob &job, int kind, uint64_t *stored) {
    mneme_snapshot::Writer w(snapshot_path(job, kind), kind, writer_options());
    if (int e = open_side(job, kind, w, nullptr)) return e;
    Side side;
    side.writer = &w;
    side.src = live_sources(job);
    Side *sides[2] = {nullptr, nullptr};
    sides[kind] = &side;  // an epilogue without its prologue's bytes is stored whole (zstd)
    if (int e = stream_sides(job, sides)) return e;
    if (int e = w.finish()) return e;
    *stored += w.bytes_written();
    return 0;
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

// The image file of a module, written on first use (mu() held); "" when unknown or unwritable.
std::string image_file(void *owner) {
    Modules &m = modules();
    auto it = m.image_of.find(owner);
    if (it == m.image_of.end()) return "";
    Image *img = m.images[it->second];
    if (!img->file.empty() || img->failed) return img->file;
    const Config &c = config();
    std::string folder = c.dir + "/images";
    mkdir(folder.c_str(), 0755);
    char name[128];
    snprintf(name, sizeof name, "image-%d-%04zu.%s", (int)getpid(), it->second, img->kind);
    if (!write_atomic(folder + "/" + name, img->data, img->size)) {
        img->failed = true;
        stop_recording("cannot write the code image %s/%s (%s)", folder.c_str(), name, strerror(errno));
        return "";
    }
    img->file = std::string("images/") + name;
    return img->file;
}

// /proc/self/maps, once per process: the finalizer looks for embedded IR in the files it names.
void write_maps() {
    if (maps_written) return;
    maps_written = true;
    std::string text;
    if (FILE *in = fopen("/proc/self/maps", "r")) {
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) text.append(buf, n);
        fclose(in);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/maps-%d.txt", config().dir.c_str(), (int)getpid());
    if (!write_atomic(path, text.data(), text.size())) stop_recording("cannot write %s (%s)", path, strerror(errno));
}

void remove_tree(const std::string &dir) {
    for (const char *name : {"prologue.mneme", "epilogue.mneme", "manifest.json"}) unlink((dir + "/" + name).c_str());
    rmdir(dir.c_str());
}

struct Launch {
    unsigned grid[3], block[3], shared;
    CUstream stream;
};

void discover_globals(void *owner);
void append_mapped_regions(std::vector<std::pair<uint64_t, uint64_t>> &regions);
void warn_outside_args(const std::string &kernel, const std::string &args,
                       const std::vector<std::pair<size_t, size_t>> &layout);

// Decide whether to record this launch; when yes, run it between prologue and epilogue dumps.
template <typename Run>
CUresult record_launch(CUfunction f, const Launch &l, void **params, void **extra, Run run) {
    const Config &c = config();
    if (disabled || in_recorder || c.dir.empty()) return run();
    in_recorder = true;
    struct Reset {
        ~Reset() { in_recorder = false; }
    } reset;
    Selection sel = select_kernel(f);
    if (!sel.selected) return run_shared(run);
    // A launch into a stream being captured into a CUDA graph does not run now, and synchronizing
    // would break the capture: leave it alone (graph launches are not recorded).
    DRV(cuStreamIsCapturing);
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!p_cuStreamIsCapturing || p_cuStreamIsCapturing(l.stream, &capture) != CUDA_SUCCESS ||
        capture != CU_STREAM_CAPTURE_STATUS_NONE)
        return run();
    const std::string &name = sel.name;
    CUfunction fn = sel.resolved;
    std::string args;
    std::vector<std::pair<size_t, size_t>> layout;
    if (!pack_args(fn, params, extra, args, layout)) return run();
    kernel_timer();  // set up before mu() is taken
    // One recording at a time, and no allocation or free while its regions are copied.
    std::lock_guard<std::mutex> lock(mu());
    if (disabled) return run();
    KernelCounts &kc = counts()[name];
    long index = kc.seen++;
    uint64_t h = fnv1a(l.grid, sizeof l.grid, fnv1a(l.block, sizeof l.block, fnv1a(&l.shared, sizeof l.shared)));
    h = fnv1a(args.data(), args.size(), h);
    if (index >= c.skip) kc.occurrences[h]++;
    if (index >= c.skip && kc.instances.count(h)) return time_launch(name, h, fn, l.stream, run);
    if (index < c.skip || (long)kc.instances.size() >= c.max_per_kernel) return run();
    kc.instances.insert(h);
    warn_outside_args(name, args, layout);
    long seq = launch_seq++;
    std::vector<std::pair<uint64_t, uint64_t>> regions;
    for (auto &a : placement().live) regions.emplace_back(a.first, a.second.size);
    append_mapped_regions(regions);  // the application's own VMM mappings
    std::string policies;  // the annotated regions' policies, as the manifest's "policies" entries
    for (auto &a : annotations()) {
        if (!placement().live.count(a.first)) continue;
        char buf[160];
        snprintf(buf, sizeof buf, "{\"addr\": %llu, \"dtype\": \"%s\", \"threshold\": %.17g, \"relative\": %s, ",
                 (unsigned long long)a.first, a.second.dtype.c_str(), a.second.threshold,
                 a.second.relative ? "true" : "false");
        policies += (policies.empty() ? "" : ", ") + std::string(buf) + "\"norm\": \"" + a.second.norm +
                    "\", \"tag\": " + json_string(a.second.tag) + "}";
    }
    void *owner = owner_of_launch(f, fn);
    std::vector<GlobalVar> globals;
    if (owner) {
        discover_globals(owner);
        auto it = modules().globals.find(owner);
        if (it != modules().globals.end())
            for (auto &g : it->second) globals.push_back(GlobalVar{g.first, g.second.first, g.second.second});
    }

    DRV(cuCtxSynchronize);
    DRV(cuCtxGetCurrent);
    DRV(cuEventRecord);
    DRV(cuStreamWaitEvent);
    DRV(cuStreamSynchronize);
    char final_dir[4096], tmp_dir[4200];
    snprintf(final_dir, sizeof final_dir, "%s/launch-%d-%06ld", c.dir.c_str(), (int)getpid(), seq);
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp", final_dir);
    mkdir(c.dir.c_str(), 0755);
    if (mkdir(tmp_dir, 0755) != 0 && errno != EEXIST) {
        stop_recording("cannot create %s (%s)", tmp_dir, strerror(errno));
        return run();
    }
    std::string image = owner ? image_file(owner) : "";
    const char *image_kind = image.empty() ? "" : modules().images[modules().image_of[owner]]->kind;
    write_maps();
    if (disabled) {
        remove_tree(tmp_dir);
        return run();
    }
    CUresult synced = p_cuCtxSynchronize();
    if (synced != CUDA_SUCCESS) {  // an earlier error of the application's: leave it to the application
        remove_tree(tmp_dir);
        return run();
    }
    std::unique_ptr<CaptureJob> job(new CaptureJob());
    job->tmp_dir = tmp_dir;
    job->final_dir = final_dir;
    job->regions = regions;
    job->globals = globals;
    job->args = args;
    for (auto &p : layout) job->layout.emplace_back((uint32_t)p.first, (uint32_t)p.second);
    job->name = name;
    job->index = index;
    for (auto &r : regions) job->policies.push_back(region_policy(r.first));
    for (auto &r : regions) {  // shadow layout: 256-byte aligned spans, regions then globals
        job->offsets.push_back(job->shadow_bytes);
        job->shadow_bytes += (r.second + 255) / 256 * 256;
    }
    for (auto &g : globals) {
        job->offsets.push_back(job->shadow_bytes);
        job->shadow_bytes += (g.size + 255) / 256 * 256;
    }
    if (p_cuCtxGetCurrent) p_cuCtxGetCurrent(&job->context);
    // The flush buffer is allocated before the prologue capture, not just before the timed launch:
    // a new mapping right before a short kernel's first launch made it take one of two levels,
    // about 20% apart from process to process (benchmarks/gpu/probes/once_probe.py).
    const bool flush = config().flush && config().timed >= 0;  // the recorded launch is timed from an evicted L2
    if (flush) flush_buffer();
    Shadows &sh = shadows();
    double t0 = now_seconds();
    int err = 0;
    uint64_t stored = 0;
    bool shadowed = take_shadows(*job);
    if (shadowed) {
        // The launch's stream waits for the prologue copy; the application's thread does not.
        shadowed = copy_into_shadow(*job, PROLOGUE) && p_cuEventRecord(sh.copied, sh.stream) == CUDA_SUCCESS;
        if (shadowed && p_cuStreamWaitEvent(l.stream, sh.copied, 0) != CUDA_SUCCESS)
            shadowed = p_cuStreamSynchronize(sh.stream) == CUDA_SUCCESS;
        if (!shadowed) release_shadows(*job);
    }
    if (!shadowed) err = write_live(*job, PROLOGUE, &stored);  // stall = write
    double t1 = now_seconds();
    if (flush && flush_l2(l.stream)) timing_gate().flushed++;
    CUresult result = time_launch(name, h, fn, l.stream, run);
    synced = p_cuCtxSynchronize();
    double t2 = now_seconds();
    bool launched = result == CUDA_SUCCESS && synced == CUDA_SUCCESS;
    if (launched && shadowed && !(copy_into_shadow(*job, EPILOGUE) && p_cuStreamSynchronize(sh.stream) == CUDA_SUCCESS))
        err = EIO;
    else if (launched && !shadowed && !err)
        err = write_live(*job, EPILOGUE, &stored);
    double t3 = now_seconds();
    if (!launched || err) {
        if (shadowed) release_shadows(*job);
        remove_tree(tmp_dir);
        // The launch itself failed: the application sees its error; this launch is not recorded.
        if (launched)
            stop_recording("writing the snapshot of launch %ld of %s to %s failed (%s)", index, name.c_str(),
                           tmp_dir, strerror(err));
        return result;
    }
    uint64_t bytes = 0;
    for (auto &r : regions) bytes += r.second;
    for (auto &g : globals) bytes += g.size;
    std::string m = "{\"format\": \"mneme-cuda-raw\", \"version\": 2, \"kernel\": " + json_string(name);
    char buf[768];
    // prologue/launch/epilogue seconds: what the application waited for (the shadow copies, or
    // the synchronous writes); the writer adds its own time (write_seconds).
    snprintf(buf, sizeof buf,
             ", \"pid\": %d, \"sequence\": %ld, \"occurrence\": %ld, \"instance_key\": \"%016llx\""
             ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_mem\": %u, \"va_base\": %llu"
             ", \"va_size\": %llu, \"bytes\": %llu, \"prologue_seconds\": %.6f, \"launch_seconds\": %.6f"
             ", \"epilogue_seconds\": %.6f",
             (int)getpid(), seq, index, (unsigned long long)h, l.grid[0], l.grid[1], l.grid[2], l.block[0],
             l.block[1], l.block[2], l.shared, (unsigned long long)c.va_base, (unsigned long long)c.va_size,
             (unsigned long long)bytes, t1 - t0, t2 - t1, t3 - t2);
    m += buf;
    m += ", \"image\": " + json_string(image) + ", \"image_kind\": " + json_string(image_kind);
    m += ", \"args\": \"" + hex(args) + "\", \"params\": [";
    for (size_t i = 0; i < layout.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(layout[i].first) + ", " + std::to_string(layout[i].second) + "]";
    m += "], \"regions\": [";
    for (size_t i = 0; i < regions.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(regions[i].first) + ", " + std::to_string(regions[i].second) + "]";
    m += "], \"globals\": [";
    for (size_t i = 0; i < globals.size(); ++i)
        m += (i ? ", [" : "[") + json_string(globals[i].name) + ", " + std::to_string(globals[i].addr) + ", " +
             std::to_string(globals[i].size) + "]";
    m += "], \"policies\": [" + policies + "]";
    job->manifest = m;
    if (shadowed) {
        enqueue(job.release());  // the writer thread writes, publishes and frees the shadows
        return result;
    }
    if ((err = publish(*job, "synchronous", (t1 - t0) + (t3 - t2), stored)) != 0) {
        remove_tree(tmp_dir);
        stop_recording("cannot write %s (%s)", final_dir, strerror(err));
    }
    return result;
}

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
    Launch l{{cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ}, {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ},
             cfg->sharedMemBytes, cfg->hStream};
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
    return record_launch(f, l, params, nullptr, [&] { return real_fn(f, gx, gy, gz, bx, by, bz, shared, s, params); });
}

CUresult w_coop(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, CUstream s, void **params) {
    if (!real_coop) real_coop = driver_fn<coop_t>("cuLaunchCooperativeKernel");
    return coop_with(real_coop, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult w_coop_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, CUstream s, void **params) {
    return coop_with(real_coop_ptsz, f, gx, gy, gz, bx, by, bz, shared, per_thread(s), params);
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

CUresult w_module_load_data(CUmodule *mod, const void *image) {
    auto fn = resolve_real(real_modules().load_data, "cuModuleLoadData");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(mod, image);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*mod, image, false, false);
    }
    return r;
}

CUresult w_module_load_fatbin(CUmodule *mod, const void *image) {
    auto fn = resolve_real(real_modules().load_fatbin, "cuModuleLoadFatBinary");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(mod, image);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*mod, image, false, false);
    }
    return r;
}

CUresult w_module_load_data_ex(CUmodule *mod, const void *image, unsigned n, CUjit_option *options, void **values) {
    auto fn = resolve_real(real_modules().load_data_ex, "cuModuleLoadDataEx");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(mod, image, n, options, values);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*mod, image, false, false);
    }
    return r;
}

CUresult w_module_load(CUmodule *mod, const char *path) {
    auto fn = resolve_real(real_modules().load_file, "cuModuleLoad");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(mod, path);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*mod, path, true, false);
    }
    return r;
}

CUresult w_library_load_data(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                             CUlibraryOption *lo, void **lv, unsigned nl) {
    auto fn = resolve_real(real_modules().library_load, "cuLibraryLoadData");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(lib, code, jo, jv, nj, lo, lv, nl);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*lib, code, false, true);
    }
    return r;
}

CUresult w_library_load_file(CUlibrary *lib, const char *path, CUjit_option *jo, void **jv, unsigned nj,
                             CUlibraryOption *lo, void **lv, unsigned nl) {
    auto fn = resolve_real(real_modules().library_load_file, "cuLibraryLoadFromFile");
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fn(lib, path, jo, jv, nj, lo, lv, nl);
    if (r == CUDA_SUCCESS && tracking()) {
        std::lock_guard<std::mutex> lock(mu());
        note_image(*lib, path, true, true);
    }
    return r;
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

void warn_once(const std::string &key, const char *fmt, ...) {
    static std::mutex *m = new std::mutex();
    static auto *warned = new std::set<std::string>();
    {
        std::lock_guard<std::mutex> lock(*m);
        if (!warned->insert(key).second) return;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
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

void warn_outside_args(const std::string &kernel, const std::string &args,
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
    deferred_frees().push_back(DeferredFree{it->first, it->second.mapped, it->second.handle, done});
    annotations().erase(it->first);
    p.live.erase(it);
    reap_deferred_frees();
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

// ---- CUDA graphs ----------------------------------------------------------------------------------
// Kernel nodes are not recorded. At instantiation the recorder notes which selected kernels a
// graph holds (child graphs included); each cuGraphLaunch of it counts one launch per node
// (counts-<pid>.json "graph_launches"), and the first one warns, naming the kernel.

using graph_instantiate_t = CUresult (*)(CUgraphExec *, CUgraph, unsigned long long);
using graph_instantiate_params_t = CUresult (*)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
using graph_launch_t = CUresult (*)(CUgraphExec, CUstream);

struct RealGraphs {
    graph_instantiate_t instantiate = nullptr;
    graph_instantiate_params_t instantiate_params = nullptr, instantiate_params_ptsz = nullptr;
    graph_launch_t launch = nullptr, launch_ptsz = nullptr;
};

RealGraphs &real_graphs() {
    static auto *r = new RealGraphs();
    return *r;
}

std::unordered_map<void *, std::vector<std::string>> &graph_kernels() {  // CUgraphExec -> selected kernel nodes
    static auto *m = new std::unordered_map<void *, std::vector<std::string>>();
    return *m;
}

void selected_nodes(CUgraph graph, std::vector<std::string> &names, int depth = 0) {
    DRV(cuGraphGetNodes);
    DRV(cuGraphNodeGetType);
    DRV(cuGraphKernelNodeGetParams_v2);
    DRV(cuGraphChildGraphNodeGetGraph);
    size_t n = 0;
    if (depth > 8 || !p_cuGraphGetNodes || p_cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || !n) return;
    std::vector<CUgraphNode> nodes(n);
    if (p_cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type;
        if (p_cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH && p_cuGraphChildGraphNodeGetGraph) {
            CUgraph child = nullptr;
            if (p_cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) selected_nodes(child, names, depth + 1);
        } else if (type == CU_GRAPH_NODE_TYPE_KERNEL && p_cuGraphKernelNodeGetParams_v2) {
            CUDA_KERNEL_NODE_PARAMS params = {};
            if (p_cuGraphKernelNodeGetParams_v2(node, &params) != CUDA_SUCCESS) continue;
            CUfunction f = params.func ? params.func : reinterpret_cast<CUfunction>(params.kern);
            if (!f) continue;
            Selection sel = select_kernel(f);
            if (sel.selected) names.push_back(sel.name);
        }
    }
}

void note_graph(CUresult r, CUgraphExec *exec, CUgraph graph) {
    if (r != CUDA_SUCCESS || !exec || !tracking()) return;
    std::vector<std::string> names;
    selected_nodes(graph, names);
    std::lock_guard<std::mutex> lock(mu());
    if (names.empty())
        graph_kernels().erase(*exec);
    else
        graph_kernels()[*exec] = names;
}

CUresult w_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    CUresult r = resolve_real(real_graphs().instantiate, "cuGraphInstantiateWithFlags")(exec, graph, flags);
    note_graph(r, exec, graph);
    return r;
}

CUresult w_graph_instantiate_params(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult r = resolve_real(real_graphs().instantiate_params, "cuGraphInstantiateWithParams")(exec, graph, params);
    note_graph(r, exec, graph);
    return r;
}

CUresult w_graph_instantiate_params_ptsz(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    auto fn = resolve_real(real_graphs().instantiate_params_ptsz, "cuGraphInstantiateWithParams_ptsz");
    CUresult r = fn(exec, graph, params);
    note_graph(r, exec, graph);
    return r;
}

CUresult graph_launch(graph_launch_t real_fn, CUgraphExec exec, CUstream s) {
    CUresult r = run_shared([&] { return real_fn(exec, s); });
    if (r != CUDA_SUCCESS || !tracking()) return r;
    std::lock_guard<std::mutex> lock(mu());
    auto it = graph_kernels().find(exec);
    if (it == graph_kernels().end()) return r;
    for (const std::string &name : it->second) {
        counts()[name].graph_launches++;
        warn_once("graph " + name, "kernel %s runs inside a CUDA graph (cuGraphLaunch); launches in graphs are not "
                  "recorded, only counted. Record it where the application launches it directly (e.g. run without "
                  "CUDA graphs: PyTorch without torch.cuda.graphs or mode=\"reduce-overhead\")", name.c_str());
    }
    return r;
}

CUresult w_graph_launch(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch, "cuGraphLaunch"), exec, s);
}

CUresult w_graph_launch_ptsz(CUgraphExec exec, CUstream s) {
    return graph_launch(resolve_real(real_graphs().launch_ptsz, "cuGraphLaunch_ptsz"), exec, s);
}

CUresult w_getproc_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult w_getproc_v1(const char *, void **, int, cuuint64_t);

// The CUDA version a cuGetProcAddress call asked for (0 for dlsym): some names changed signature.
thread_local int getproc_version = 0;

// Keep a real entry point in `slot` (a typed function pointer), from a captureless lambda.
#define KEEP(slot) [](void *fn) { auto &kept = slot; kept = reinterpret_cast<std::decay_t<decltype(kept)>>(fn); }

// One interposed driver entry point: the names it goes by, where its real address is kept, and
// our wrapper. An entry point with a per-thread-default-stream flavour has two hooks, one for
// each; a name ending in _ptsz, or the per-thread flag of cuGetProcAddress, asks for that one.
struct Hook {
    const char *names[2];  // the second: another version's name (cuMemAlloc_v2), or nullptr
    enum Stream : uint8_t { ONE, LEGACY, PER_THREAD } stream;
    bool recording_only;   // module, host-memory and graph bookkeeping: only while recording
    int min_version;       // the CUDA version from which cuGetProcAddress gives this name this signature
    void (*keep)(void *fn);
    void *wrapper;
};

const std::vector<Hook> &hooks() {
    using S = Hook::Stream;
    auto w = [](auto fn) { return reinterpret_cast<void *>(fn); };
    static const std::vector<Hook> *table = new std::vector<Hook>{
        {{"cuMemAlloc", "cuMemAlloc_v2"}, S::ONE, false, 0, KEEP(real().mem_alloc), w(&w_alloc)},
        {{"cuMemFree", "cuMemFree_v2"}, S::ONE, false, 0, KEEP(real().mem_free), w(&w_free)},
        {{"cuLaunchKernel"}, S::LEGACY, false, 0, KEEP(real().launch), w(&w_launch)},
        {{"cuLaunchKernel"}, S::PER_THREAD, false, 0, KEEP(real().launch_ptsz), w(&w_launch_ptsz)},
        {{"cuLaunchKernelEx"}, S::LEGACY, false, 0, KEEP(real().launch_ex), w(&w_launch_ex)},
        {{"cuLaunchKernelEx"}, S::PER_THREAD, false, 0, KEEP(real().launch_ex_ptsz), w(&w_launch_ex_ptsz)},
        {{"cuLaunchCooperativeKernel"}, S::LEGACY, false, 0, KEEP(real_coop), w(&w_coop)},
        {{"cuLaunchCooperativeKernel"}, S::PER_THREAD, false, 0, KEEP(real_coop_ptsz), w(&w_coop_ptsz)},
        // Pitched, stream-ordered and managed allocations, and the application's own VMM
        // mappings: placed or tracked whether or not anything is recorded, like cuMemAlloc.
        {{"cuMemAllocManaged"}, S::ONE, false, 0, KEEP(real_memory().managed), w(&w_alloc_managed)},
        {{"cuMemAllocPitch", "cuMemAllocPitch_v2"}, S::ONE, false, 0, KEEP(real_memory().pitch), w(&w_alloc_pitch)},
        {{"cuMemAllocAsync"}, S::LEGACY, false, 0, KEEP(real_memory().async), w(&w_alloc_async)},
        {{"cuMemAllocAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().async_ptsz), w(&w_alloc_async_ptsz)},
        {{"cuMemAllocFromPoolAsync"}, S::LEGACY, false, 0, KEEP(real_memory().pool), w(&w_alloc_pool)},
        {{"cuMemAllocFromPoolAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().pool_ptsz), w(&w_alloc_pool_ptsz)},
        {{"cuMemFreeAsync"}, S::LEGACY, false, 0, KEEP(real_memory().free_async), w(&w_free_async)},
        {{"cuMemFreeAsync"}, S::PER_THREAD, false, 0, KEEP(real_memory().free_async_ptsz), w(&w_free_async_ptsz)},
        {{"cuMemAddressReserve"}, S::ONE, false, 0, KEEP(real_memory().va_reserve), w(&w_va_reserve)},
        {{"cuMemAddressFree"}, S::ONE, false, 0, KEEP(real_memory().va_free), w(&w_va_free)},
        {{"cuMemMap"}, S::ONE, false, 0, KEEP(real_memory().map), w(&w_mem_map)},
        {{"cuMemUnmap"}, S::ONE, false, 0, KEEP(real_memory().unmap), w(&w_mem_unmap)},
        {{"cuMemSetAccess"}, S::ONE, false, 0, KEEP(real_memory().set_access), w(&w_set_access)},
        {{"cuMemHostAlloc"}, S::ONE, true, 0, KEEP(real_host().host_alloc), w(&w_host_alloc)},
        {{"cuMemAllocHost", "cuMemAllocHost_v2"}, S::ONE, true, 0, KEEP(real_host().alloc_host), w(&w_alloc_host)},
        {{"cuMemHostRegister", "cuMemHostRegister_v2"}, S::ONE, true, 0, KEEP(real_host().host_register),
         w(&w_host_register)},
        {{"cuMemFreeHost"}, S::ONE, true, 0, KEEP(real_host().free_host), w(&w_free_host)},
        {{"cuMemHostUnregister"}, S::ONE, true, 0, KEEP(real_host().unregister), w(&w_host_unregister)},
        {{"cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2"}, S::ONE, true, 0,
         KEEP(real_host().device_ptr), w(&w_host_device_ptr)},
        {{"cuModuleLoadData"}, S::ONE, true, 0, KEEP(real_modules().load_data), w(&w_module_load_data)},
        {{"cuModuleLoadDataEx"}, S::ONE, true, 0, KEEP(real_modules().load_data_ex), w(&w_module_load_data_ex)},
        {{"cuModuleLoadFatBinary"}, S::ONE, true, 0, KEEP(real_modules().load_fatbin), w(&w_module_load_fatbin)},
        {{"cuModuleLoad"}, S::ONE, true, 0, KEEP(real_modules().load_file), w(&w_module_load)},
        {{"cuLibraryLoadData"}, S::ONE, true, 0, KEEP(real_modules().library_load), w(&w_library_load_data)},
        {{"cuLibraryLoadFromFile"}, S::ONE, true, 0, KEEP(real_modules().library_load_file),
         w(&w_library_load_file)},
        {{"cuModuleGetFunction"}, S::ONE, true, 0, KEEP(real_modules().get_function), w(&w_module_get_function)},
        {{"cuLibraryGetKernel"}, S::ONE, true, 0, KEEP(real_modules().get_kernel), w(&w_library_get_kernel)},
        {{"cuKernelGetFunction"}, S::ONE, true, 0, KEEP(real_modules().kernel_get_function),
         w(&w_kernel_get_function)},
        {{"cuLibraryGetModule"}, S::ONE, true, 0, KEEP(real_modules().library_get_module), w(&w_library_get_module)},
        {{"cuModuleGetGlobal", "cuModuleGetGlobal_v2"}, S::ONE, true, 0, KEEP(real_modules().module_get_global),
         w(&w_module_get_global)},
        {{"cuLibraryGetGlobal"}, S::ONE, true, 0, KEEP(real_modules().library_get_global), w(&w_library_get_global)},
        // cuGraphInstantiate at 12.0 and later is cuGraphInstantiateWithFlags.
        {{"cuGraphInstantiateWithFlags"}, S::ONE, true, 0, KEEP(real_graphs().instantiate), w(&w_graph_instantiate)},
        {{"cuGraphInstantiate"}, S::ONE, true, 12000, KEEP(real_graphs().instantiate), w(&w_graph_instantiate)},
        {{"cuGraphInstantiateWithParams"}, S::LEGACY, true, 0, KEEP(real_graphs().instantiate_params),
         w(&w_graph_instantiate_params)},
        {{"cuGraphInstantiateWithParams"}, S::PER_THREAD, true, 0, KEEP(real_graphs().instantiate_params_ptsz),
         w(&w_graph_instantiate_params_ptsz)},
        {{"cuGraphLaunch"}, S::LEGACY, true, 0, KEEP(real_graphs().launch), w(&w_graph_launch)},
        {{"cuGraphLaunch"}, S::PER_THREAD, true, 0, KEEP(real_graphs().launch_ptsz), w(&w_graph_launch_ptsz)},
    };
    return *table;
}

#undef KEEP

// Swap a driver entry point the application asked for by name for our wrapper.
void *wrap(const char *symbol, void *fn, cuuint64_t flags) {
    if (!symbol || !fn) return fn;
    std::string s(symbol);
    if (s == "cuGetProcAddress") {
        // Versions >= 12.0 answer with the 5-argument entry point.
        if (!real().getproc_v2) real().getproc_v2 = reinterpret_cast<getproc_v2_t>(fn);
        return reinterpret_cast<void *>(&w_getproc_v2);
    }
    const std::string suffix = "_ptsz";
    bool named_ptsz = s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    std::string base = named_ptsz ? s.substr(0, s.size() - suffix.size()) : s;
    bool per_thread = named_ptsz || (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    for (const Hook &h : hooks()) {
        bool named = h.stream == Hook::ONE
                         ? s == h.names[0] || (h.names[1] && s == h.names[1])
                         : base == h.names[0] && per_thread == (h.stream == Hook::PER_THREAD);
        if (!named || getproc_version < h.min_version) continue;
        if (h.recording_only && !tracking()) return fn;
        h.keep(fn);
        return h.wrapper;
    }
    return fn;
}

CUresult w_getproc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult *status) {
    CUresult r = real().getproc_v2(symbol, pfn, version, flags, status);
    getproc_version = version;
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    getproc_version = 0;
    return r;
}

CUresult w_getproc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    CUresult r = real().getproc_v1(symbol, pfn, version, flags);
    getproc_version = version;
    if (r == CUDA_SUCCESS && pfn) *pfn = wrap(symbol, *pfn, flags);
    getproc_version = 0;
    return r;
}

}  // namespace

// ---- exported symbols ---------------------------------------------------------------------------

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void *dlsym(void *handle, const char *name) {
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

// The plain driver symbols, for programs linked against libcuda (the dynamic linker binds these
// before libcuda's). cuda.h's macros give them their versioned names (cuMemAlloc_v2, ...).
EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size) { return w_alloc(dptr, size); }

EXPORT CUresult cuMemFree(CUdeviceptr ptr) { return w_free(ptr); }

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
    return w_launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    return w_launch_ex(cfg, f, params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, CUstream s, void **params) {
    return w_coop(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult cuModuleLoadData(CUmodule *mod, const void *image) { return w_module_load_data(mod, image); }

EXPORT CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned n, CUjit_option *options,
                                   void **values) {
    return w_module_load_data_ex(mod, image, n, options, values);
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *image) { return w_module_load_fatbin(mod, image); }

EXPORT CUresult cuModuleLoad(CUmodule *mod, const char *path) { return w_module_load(mod, path); }

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                                  CUlibraryOption *lo, void **lv, unsigned nl) {
    return w_library_load_data(lib, code, jo, jv, nj, lo, lv, nl);
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name) {
    return w_module_get_function(f, mod, name);
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name) {
    return w_library_get_kernel(k, lib, name);
}

EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name) {
    return w_module_get_global(dptr, bytes, mod, name);
}

EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name) {
    return w_library_get_global(dptr, bytes, lib, name);
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element) {
    return w_alloc_pitch(dptr, pitch, width, height, element);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) { return w_alloc_async(dptr, size, s); }

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return w_alloc_pool(dptr, size, pool, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream s) { return w_free_async(ptr, s); }

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
    return w_va_reserve(ptr, size, alignment, addr, flags);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return w_va_free(ptr, size); }

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    return w_mem_map(ptr, size, offset, handle, flags);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { return w_mem_unmap(ptr, size); }

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    return w_set_access(ptr, size, desc, count);
}

EXPORT CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    return w_graph_instantiate(exec, graph, flags);
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return w_graph_instantiate_params(exec, graph, params);
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return w_graph_launch(exec, s); }

EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) { return w_host_alloc(pp, size, flags); }

EXPORT CUresult cuMemAllocHost(void **pp, size_t size) { return w_alloc_host(pp, size); }

EXPORT CUresult cuMemHostRegister(void *p, size_t size, unsigned flags) { return w_host_register(p, size, flags); }

EXPORT CUresult cuMemFreeHost(void *p) { return w_free_host(p); }

EXPORT CUresult cuMemHostUnregister(void *p) { return w_host_unregister(p); }

EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned flags) {
    return w_host_device_ptr(dptr, p, flags);
}

// {"<instance key>": [seconds, ...], ...}
std::string times_json(const std::map<uint64_t, std::vector<double>> &times) {
    std::string text = "{";
    for (auto &entry : times) {
        char key[40];
        snprintf(key, sizeof key, "%s\"%016llx\": [", text.size() > 1 ? ", " : "", (unsigned long long)entry.first);
        text += key;
        for (size_t i = 0; i < entry.second.size(); ++i) {
            char v[32];
            snprintf(v, sizeof v, "%s%.9g", i ? ", " : "", entry.second[i]);
            text += v;
        }
        text += "]";
    }
    return text + "}";
}

// At exit: how often each recorded kernel ran with each argument set (Occurrences), also for
// the launches past --max-recordings, how often it ran inside CUDA graphs, and its in-application
// times. Written atomically; nothing when nothing was selected.
__attribute__((destructor)) static void mneme_recorder_write_counts() {
    const Config &c = config();
    if (c.dir.empty()) return;
    std::lock_guard<std::mutex> lock(mu());
    reap_timings(true);  // the launches still in flight; lost if the application already tore its context down
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
        text += "}, \"graph_launches\": " + std::to_string(entry.second.graph_launches) +
                ", \"app_times\": " + times_json(entry.second.app_times) +
                ", \"kernel_times\": " + times_json(entry.second.kernel_times) + "}";
    }
    // How the in-application times were taken: behind the gate (no host submission in them) or not,
    // and why not; alone on the device (exclusive) or beside the rest of the application (shared).
    const TimingGate &g = timing_gate();
    text += "}, \"app_timing\": {\"gated\": " + std::to_string(g.gated) + ", \"ungated\": " +
            std::to_string(g.ungated) + ", \"late\": " + std::to_string(g.late) +
            ", \"exclusive\": " + std::to_string(g.exclusive) + ", \"shared\": " + std::to_string(g.shared) +
            ", \"ungated_because\": " + json_string(g.ungated_because) + ", \"cupti\": " + std::to_string(g.cupti) +
            ", \"cupti_missed\": " + std::to_string(g.cupti_missed) + ", \"flushed\": " + std::to_string(g.flushed) +
            ", \"events_because\": " + json_string(timer_state ? timer_state->why : "") + "}}\n";
    char path[4096];
    snprintf(path, sizeof path, "%s/counts-%d.json", c.dir.c_str(), (int)getpid());
    write_atomic(path, text.data(), text.size());
}

// Whether this process records (rank selection applied); for `mneme cuda info` and the tests.
EXPORT int mneme_recorder_records() { return config().dir.empty() ? 0 : 1; }

// `mneme cuda recorder-info` and the tests read this to check which recorder is loaded.
EXPORT const char *mneme_recorder_version() { return "mneme-cuda-recorder 0.2"; }

// mneme_annotate() (include/mneme_annotate.h) and mneme.annotate.annotate() land here: the
// verification policy of the placed allocation containing `ptr`, written with every launch
// recorded from now on. 1: attached; -1: `ptr` lies in no placed allocation; -2: an invalid
// argument (one message for the first of each kind).
EXPORT int mneme_recorder_annotate(const void *ptr, const char *dtype, double threshold, int relative,
                                   const char *norm, const char *tag) {
    static const char *dtypes[] = {"u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64",
                                   "f16", "bf16", "f32", "f64"};
    static const char *norms[] = {"none", "L1", "L2", "Linf"};
    Annotation a;
    for (const char *d : dtypes)
        if (dtype && strcmp(dtype, d) == 0) a.dtype = d;
    for (const char *n : norms)
        if (strcasecmp(norm && *norm ? norm : "none", n) == 0) a.norm = n;
    static bool warned_invalid = false, warned_unplaced = false;
    if (a.dtype.empty() || a.norm.empty() || !isfinite(threshold) || threshold < 0) {
        std::lock_guard<std::mutex> lock(mu());
        if (warned_invalid) return -2;
        warned_invalid = true;
        warn("mneme_annotate(%p, %s, %g, %d, %s): invalid policy (dtype one of u8..u64, i8..i64, f16, bf16, f32, "
             "f64; threshold finite and >= 0; norm none, L1, L2 or Linf); ignored (later ones are not reported)",
             ptr, dtype ? dtype : "(null)", threshold, relative, norm ? norm : "(null)");
        return -2;
    }
    a.threshold = threshold;
    a.relative = relative != 0;
    a.tag = tag ? tag : "";
    uint64_t addr = reinterpret_cast<uint64_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto &live = placement().live;
    auto it = live.upper_bound(addr);
    if (it == live.begin() || (--it, addr - it->first >= std::max<uint64_t>(it->second.size, 1))) {
        if (!warned_unplaced)
            warn("mneme_annotate(%p, tag '%s'): not inside an allocation the recorder placed "
                 "(cuMemAlloc/cudaMalloc); ignored (later ones are not reported)",
                 ptr, a.tag.c_str());
        warned_unplaced = true;
        return -1;
    }
    annotations()[it->first] = a;
    return 1;
}

// Host-side pieces, exported for the tests that run without a GPU: the size and kind of a
// code image as a module load sees it, and the atomic writer (0 on success, else errno).
EXPORT size_t mneme_recorder_image_size(const void *code, const char **kind) {
    size_t size = 0;
    const char *k = "";
    image_extent(code, &size, &k);
    if (kind) *kind = k;
    return size;
}

EXPORT int mneme_recorder_write_atomic(const char *path, const void *data, size_t n) {
    return write_atomic(path, data, n) ? 0 : (errno ? errno : EIO);
}

// The device variables an image defines for architecture `arch` (e.g. 90), one name per line
// into `out`; returns how many (tests).
EXPORT int mneme_recorder_image_globals(const void *code, size_t size, int arch, char *out, size_t out_len) {
    std::vector<std::string> names;
    image_globals(code, size, arch, names);
    std::string text;
    for (auto &n : names) text += n + "\n";
    if (out && out_len) {
        size_t n = std::min(text.size(), out_len - 1);
        memcpy(out, text.data(), n);
        out[n] = 0;
    }
    return (int)names.size();
}

// The pitch a row of `width` bytes gets at `alignment` when the driver cannot be asked (tests).
EXPORT uint64_t mneme_recorder_pitch(uint64_t width, uint64_t alignment) { return pitch_for(width, alignment); }

// Which of a launch's parameters (`layout`: offset, size pairs; `args` the packed buffer) point
// into the ranges (start, size pairs) of memory a recording does not hold: their indexes into
// `out` (at most `out_len`); returns how many (tests).
EXPORT size_t mneme_recorder_outside_params(const uint64_t *ranges, size_t n_ranges, const void *args,
                                            size_t args_len, const uint64_t *layout, size_t n_params,
                                            uint64_t *out, size_t out_len) {
    OutsideRanges set;
    for (size_t i = 0; i < n_ranges; ++i) set[ranges[2 * i]] = OutsideRange{ranges[2 * i + 1], "test"};
    std::vector<std::pair<size_t, size_t>> params;
    for (size_t i = 0; i < n_params; ++i) params.emplace_back(layout[2 * i], layout[2 * i + 1]);
    auto hits = outside_params(set, std::string(static_cast<const char *>(args), args_len), params);
    for (size_t k = 0; k < hits.size() && k < out_len; ++k) out[k] = hits[k].first;
    return hits.size();
}

// Apply `n` interval operations (ops[3i] = 1 add / 0 remove, ops[3i+1] start, ops[3i+2] end) to an
// empty set of the application's mapped ranges and write the result as start, end pairs into
// `out` (at most `out_pairs`); returns how many intervals it holds (tests).
EXPORT size_t mneme_recorder_intervals(const uint64_t *ops, size_t n, uint64_t *out, size_t out_pairs) {
    std::map<uint64_t, uint64_t> set;
    for (size_t i = 0; i < n; ++i)
        (ops[3 * i] ? interval_add : interval_remove)(set, ops[3 * i + 1], ops[3 * i + 2]);
    size_t k = 0;
    for (auto &iv : set) {
        if (k < out_pairs) {
            out[2 * k] = iv.first;
            out[2 * k + 1] = iv.second;
        }
        ++k;
    }
    return k;
}
