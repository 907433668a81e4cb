// The monotonic clock the recorder's timings and write durations use.
#pragma once

#include <time.h>

namespace mneme_engine {

inline double now_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace mneme_engine
