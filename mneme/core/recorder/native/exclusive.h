// The engine's locks: the recording lock, mu(), and exclusive timing's lock. A timed launch runs
// alone on the device: it holds launch_mu() exclusively, every other launch (and each chunk of the
// capture writer's drain, capture.h) holds it shared while it is submitted. Until the first timed launch (timing_started) nobody takes it,
// so a process that records nothing pays nothing. docs/design/recording.md, "Timing inside the application".
#pragma once

#include <atomic>
#include <mutex>
#include <shared_mutex>

namespace mneme_engine {

// The recording lock: held through a whole recording (admission, prologue, launch, epilogue), by the
// allocation hooks, and by the capture writer while it gives the shadow pool's memory back (capture.h).
// Never destroyed: the exit-time writer and late frees from other threads may still use it.
inline std::mutex &mu() {
    static auto *m = new std::mutex();
    return *m;
}

inline std::shared_mutex &launch_mu() {
    static auto *m = new std::shared_mutex();
    return *m;
}

inline std::atomic<bool> timing_started{false};

}  // namespace mneme_engine
