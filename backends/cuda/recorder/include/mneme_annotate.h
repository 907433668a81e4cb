/* Mneme tolerance annotations: declare how a device buffer is verified when a recorded launch
 * is replayed (docs/design/recording.md, "Tolerance annotations").
 *
 *   #include "mneme_annotate.h"
 *   float *out;  cudaMalloc(&out, n * sizeof(float));
 *   mneme_annotate(out, "f32", 1e-5, 1, "none", "output");   // f32, relative 1e-5, every element
 *
 * Header only: no library to link. When the process runs under Mneme's recorder
 * (`mneme record`), the call reaches the recorder's exported `mneme_recorder_annotate`, looked
 * up once with dlsym(RTLD_DEFAULT, ...); the policy then belongs to the device allocation that
 * contains `ptr` and is written as that region's verification policy in the snapshots of every
 * launch recorded afterwards (until the allocation is freed or annotated again). Without the
 * recorder the call does nothing and returns 0.
 *
 *   dtype:     "u8" "u16" "u32" "u64" "i8" "i16" "i32" "i64" "f16" "bf16" "f32" "f64"
 *   threshold: finite, >= 0; absolute, or relative to |expected| when `relative` is nonzero
 *   norm:      "none" (each element), "L1", "L2", "Linf" (the norm of the error vector); NULL: "none"
 *   tag:       free text naming the buffer (NULL allowed)
 *
 * Returns 0 when no recorder is loaded, 1 when the policy was attached, -1 when `ptr` lies in no
 * allocation the recorder placed, -2 when an argument is invalid.
 *
 * Programs built with glibc older than 2.34 link with -ldl (nvcc links it already).
 */
#ifndef MNEME_ANNOTATE_H
#define MNEME_ANNOTATE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*mneme_recorder_annotate_fn)(const void *ptr, const char *dtype, double threshold, int relative,
                                          const char *norm, const char *tag);

static inline int mneme_annotate(const void *ptr, const char *dtype, double threshold, int relative,
                                 const char *norm, const char *tag) {
    /* Looked up on every call: annotations are rare, and a cached miss would hide a recorder
     * loaded later with dlopen. */
    union {
        void *sym;
        mneme_recorder_annotate_fn fn;
    } found;
    found.sym = dlsym(RTLD_DEFAULT, "mneme_recorder_annotate");
    if (!found.sym) return 0;
    return found.fn(ptr, dtype, threshold, relative, norm, tag);
}

#ifdef __cplusplus
}
#endif

#endif /* MNEME_ANNOTATE_H */
