// Verification policies the application declared for its buffers (mneme_annotate(), mneme.annotate),
// per allocation, as each launch manifest's "policies" entries (finalize's RegionPolicy).
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <map>
#include <string>

#include "json.h"
#include "snapshot_writer.h"

namespace mneme_engine {

struct Annotation {
    std::string dtype, norm, tag;
    double threshold = 0;
    bool relative = false;
};

// The snapshot format's element types and norms, in the order of their codes (docs/formats.md).
inline const char *const DTYPES[12] = {"u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64",
                                       "f16", "bf16", "f32", "f64"};
inline const char *const NORMS[4] = {"none", "L1", "L2", "Linf"};

// Allocation base -> its policy (the recorder's lock held); dropped when the allocation is freed.
inline std::map<uint64_t, Annotation> &annotations() {
    static auto *a = new std::map<uint64_t, Annotation>();
    return *a;
}

// The policy of one mneme_annotate() call in `a`; false when it is invalid (a dtype, norm or
// threshold the snapshot format does not know), `a` then unusable.
inline bool parse_annotation(const char *dtype, double threshold, int relative, const char *norm, const char *tag,
                             Annotation &a) {
    for (const char *d : DTYPES)
        if (dtype && strcmp(dtype, d) == 0) a.dtype = d;
    for (const char *n : NORMS)
        if (strcasecmp(norm && *norm ? norm : "none", n) == 0) a.norm = n;
    if (a.dtype.empty() || a.norm.empty() || !isfinite(threshold) || threshold < 0) return false;
    a.threshold = threshold;
    a.relative = relative != 0;
    a.tag = tag ? tag : "";
    return true;
}

// The snapshot writer's policy for an annotated region.
inline mneme_snapshot::Policy annotation_policy(const Annotation &a) {
    mneme_snapshot::Policy p;
    for (uint8_t i = 0; i < 12; ++i)
        if (a.dtype == DTYPES[i]) p.dtype = i;
    for (uint8_t i = 0; i < 4; ++i)
        if (a.norm == NORMS[i]) p.norm = i;
    p.relative = a.relative;
    p.threshold = a.threshold;
    return p;
}

// One manifest "policies" entry: the policy of the region at `addr`.
inline std::string annotation_json(uint64_t addr, const Annotation &a) {
    char buf[160];
    snprintf(buf, sizeof buf, "{\"addr\": %llu, \"dtype\": \"%s\", \"threshold\": %.17g, \"relative\": %s, ",
             (unsigned long long)addr, a.dtype.c_str(), a.threshold, a.relative ? "true" : "false");
    return std::string(buf) + "\"norm\": \"" + a.norm + "\", \"tag\": " + json_string(a.tag) + "}";
}

}  // namespace mneme_engine
