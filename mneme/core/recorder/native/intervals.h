// Sets of disjoint address intervals (placed ranges, application mappings).
#pragma once

#include <stdint.h>

#include <algorithm>
#include <iterator>
#include <map>

namespace mneme_engine {

// Disjoint half-open address intervals (start -> end): add merges neighbours, remove splits.
inline void interval_add(std::map<uint64_t, uint64_t> &set, uint64_t start, uint64_t end) {
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

inline void interval_remove(std::map<uint64_t, uint64_t> &set, uint64_t start, uint64_t end) {
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

}  // namespace mneme_engine
