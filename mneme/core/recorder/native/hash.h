// FNV-1a: the recorder's key of one launch's argument set (an instance key).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace mneme_engine {

inline uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
    const unsigned char *b = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

}  // namespace mneme_engine
