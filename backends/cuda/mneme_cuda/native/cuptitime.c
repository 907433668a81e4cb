/* The replay's kernel timer (mneme_cuda/cupti.py): cupti_timer.h behind a C ABI for ctypes. */
#include "cupti_timer.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int mneme_cupti_abi(void) { return 3; }
EXPORT int mneme_cupti_open(const char *library) { return mct_open(library); }
EXPORT const char *mneme_cupti_why(void) { return mct_why(); }
EXPORT int mneme_cupti_enable(int mode) { return mct_enable(mode); }
EXPORT int mneme_cupti_push(uint64_t id) { return mct_push(id); }
EXPORT int mneme_cupti_pop(void) { return mct_pop(); }
EXPORT int mneme_cupti_flush(void) { return mct_flush(); }
EXPORT void mneme_cupti_forget(void) { mct_forget(); }
EXPORT uint64_t mneme_cupti_dropped(void) { return mct_dropped(); }
EXPORT void mneme_cupti_seen(uint64_t *kernels, uint64_t *ids) { mct_seen(kernels, ids); }

/* The kernel times of the launches tagged first .. first + n - 1 into ns[] (0: none); how many were found. */
EXPORT size_t mneme_cupti_take(uint64_t first, size_t n, uint64_t *ns) {
    size_t found = 0;
    for (size_t i = 0; i < n; ++i) {
        ns[i] = 0;
        found += (size_t)mct_take(first + i, &ns[i]);
    }
    return found;
}

/* CUPTI's clock now (the host's window around a timed launch, kept for the clock's warning). */
EXPORT uint64_t mneme_cupti_now(void) { return mct_now(); }

/* Sequence mode (the replay's windows): the kernel records kept so far, and those of kernel `name` kept since. */
EXPORT uint64_t mneme_cupti_seq(void) { return mct_seq(); }
EXPORT int mneme_cupti_take_since(const char *name, uint64_t seq, uint64_t *ns, uint64_t *start, uint64_t *end) {
    return mct_take_since(name, seq, ns, start, end);
}
