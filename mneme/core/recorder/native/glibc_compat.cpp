// The glibc functions a library preloaded into applications calls, bound to versions that glibc
// 2.28 has, so that one build loads on every glibc since (manylinux_2_28; docs/design/native.md,
// "Preloaded libraries: manylinux_2_28").
//
// Built on a newer glibc, references bind to the newest versions: pthread_* and dl* moved into
// libc at 2.34, and the static libstdc++ and libgcc call functions 2.28 lacks. Each function
// here is a hidden definition, so every reference in the library (its own code and the static
// runtime's) binds to it; it calls the oldest version through .symver, or, for a function 2.28
// lacks, does the same work with functions 2.28 has. No libc header is included: their
// declarations of these very functions would clash with these definitions (types are spelt
// here as the ABI has them).
#include <stdint.h>  // first: on glibc it defines __GLIBC__, which the rest depends on

#if defined(__linux__) && defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))

#include <elf.h>
#include <errno.h>
#include <stddef.h>
#include <time.h>

#if defined(__x86_64__)
#define PRELOAD_GLIBC_BASE "GLIBC_2.2.5"
#else
#define PRELOAD_GLIBC_BASE "GLIBC_2.17"
#endif

#define PRELOAD_HIDDEN extern "C" __attribute__((visibility("hidden")))

// name(params) calls name@<the first version of the architecture>.
#define PRELOAD_OLDEST(ret, name, params, args)                                     \
    extern "C" ret mneme_oldest_##name params;                                   \
    __asm__(".symver mneme_oldest_" #name "," #name "@" PRELOAD_GLIBC_BASE);       \
    PRELOAD_HIDDEN ret name params { return mneme_oldest_##name args; }

typedef unsigned long mneme_thread_t;  // pthread_t
typedef unsigned int mneme_key_t;      // pthread_key_t

PRELOAD_OLDEST(int, pthread_create, (void *t, const void *attr, void *(*fn)(void *), void *arg), (t, attr, fn, arg))
PRELOAD_OLDEST(int, pthread_detach, (mneme_thread_t t), (t))
PRELOAD_OLDEST(int, pthread_join, (mneme_thread_t t, void **ret), (t, ret))
PRELOAD_OLDEST(int, pthread_once, (int *once, void (*fn)(void)), (once, fn))
PRELOAD_OLDEST(int, pthread_key_create, (mneme_key_t * key, void (*dtor)(void *)), (key, dtor))
PRELOAD_OLDEST(int, __pthread_key_create, (mneme_key_t * key, void (*dtor)(void *)), (key, dtor))
PRELOAD_OLDEST(int, pthread_key_delete, (mneme_key_t key), (key))
PRELOAD_OLDEST(void *, pthread_getspecific, (mneme_key_t key), (key))
PRELOAD_OLDEST(int, pthread_setspecific, (mneme_key_t key, const void *value), (key, value))
PRELOAD_OLDEST(int, pthread_mutex_trylock, (void *mutex), (mutex))  // std::mutex::try_lock (capture.h)
PRELOAD_OLDEST(int, pthread_rwlock_rdlock, (void *lock), (lock))
PRELOAD_OLDEST(int, pthread_rwlock_wrlock, (void *lock), (lock))
PRELOAD_OLDEST(int, pthread_rwlock_unlock, (void *lock), (lock))
PRELOAD_OLDEST(int, pthread_sigmask, (int how, const void *set, void *old), (how, set, old))
PRELOAD_OLDEST(void *, dlopen, (const char *file, int mode), (file, mode))
PRELOAD_OLDEST(char *, dlerror, (void), ())
PRELOAD_OLDEST(int, dladdr, (const void *address, void *info), (address, info))
PRELOAD_OLDEST(void *, dlvsym, (void *handle, const char *name, const char *version), (handle, name, version))
// dlsym is not here: the recorders export their own (the interposer) and call the real one by dlvsym.

extern "C" int pthread_cond_timedwait(void *cond, void *mutex, const struct timespec *abstime);
extern "C" long syscall(long number, ...);
extern "C" int dl_iterate_phdr(int (*callback)(void *info, size_t size, void *data), void *data);

// libstdc++ asks whether the process has one thread (2.32); "no" is always correct, only slower.
PRELOAD_HIDDEN char __libc_single_threaded = 0;

// std::condition_variable's waits on the steady clock (2.30): the same wait on the realtime clock,
// its deadline moved by the two clocks' difference now.
PRELOAD_HIDDEN int pthread_cond_clockwait(void *cond, void *mutex, clockid_t clock, const struct timespec *abstime) {
    if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
    struct timespec now_clock, now_real;
    if (clock_gettime(clock, &now_clock) != 0 || clock_gettime(CLOCK_REALTIME, &now_real) != 0) return EINVAL;
    int64_t ns = (int64_t)(abstime->tv_sec - now_clock.tv_sec) * 1000000000 + (abstime->tv_nsec - now_clock.tv_nsec);
    ns += (int64_t)now_real.tv_sec * 1000000000 + now_real.tv_nsec;
    struct timespec real_deadline;
    real_deadline.tv_sec = (time_t)(ns / 1000000000);
    real_deadline.tv_nsec = (long)(ns % 1000000000);
    return pthread_cond_timedwait(cond, mutex, &real_deadline);
}

// std::random_device (2.36): the kernel's getrandom system call (Linux 3.17).
PRELOAD_HIDDEN uint32_t arc4random(void) {
#if defined(__x86_64__)
    const long getrandom_call = 318;
#else
    const long getrandom_call = 278;
#endif
    uint32_t value = 0;
    while (syscall(getrandom_call, &value, sizeof value, 0) != (long)sizeof value) {
        if (errno != EINTR) break;
    }
    return value;
}

// The unwinder's lookup of the object holding a code address (2.35), through dl_iterate_phdr.
struct mneme_phdr_info {  // the leading fields of struct dl_phdr_info
    Elf64_Addr addr;
    const char *name;
    const Elf64_Phdr *phdr;
    Elf64_Half phnum;
};

struct mneme_find_object {  // struct dl_find_object of x86_64 and aarch64
    unsigned long long flags;
    void *map_start;
    void *map_end;
    void *link_map;
    void *eh_frame;
    unsigned long long reserved[7];
};

struct mneme_find_query {
    uintptr_t pc;
    mneme_find_object *result;
    int found;
};

static int mneme_find_callback(void *raw, size_t, void *data) {
    const mneme_phdr_info *info = (const mneme_phdr_info *)raw;
    mneme_find_query *query = (mneme_find_query *)data;
    uintptr_t low = UINTPTR_MAX, high = 0, eh_frame = 0;
    int inside = 0;
    for (Elf64_Half i = 0; i < info->phnum; i++) {
        const Elf64_Phdr *ph = &info->phdr[i];
        uintptr_t start = info->addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD) {
            if (start < low) low = start;
            if (start + ph->p_memsz > high) high = start + ph->p_memsz;
            if (query->pc >= start && query->pc < start + ph->p_memsz) inside = 1;
        } else if (ph->p_type == PT_GNU_EH_FRAME) {
            eh_frame = start;
        }
    }
    if (!inside) return 0;
    query->result->flags = 0;
    query->result->map_start = (void *)low;
    query->result->map_end = (void *)high;
    query->result->link_map = NULL;
    query->result->eh_frame = (void *)eh_frame;
    query->found = 1;
    return 1;
}

PRELOAD_HIDDEN int _dl_find_object(void *pc, mneme_find_object *result) {
    mneme_find_query query = {(uintptr_t)pc, result, 0};
    dl_iterate_phdr(mneme_find_callback, &query);
    return query.found ? 0 : -1;
}

#endif
