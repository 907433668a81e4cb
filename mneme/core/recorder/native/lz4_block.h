// One raw LZ4 block, decoded without liblz4 (code images nvcc compressed).
#pragma once

#include <stddef.h>

#include <vector>

namespace mneme_engine {

// Decode one raw LZ4 block into `out` (exactly `size` bytes); false when it does not decode.
inline bool lz4_block(const unsigned char *src, size_t n, size_t size, std::vector<unsigned char> &out) {
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

}  // namespace mneme_engine
