// The recorder's messages on stderr, and the one switch that stops recording for good.
#pragma once

#include <stdarg.h>
#include <stdio.h>

#include <mutex>
#include <set>
#include <string>

namespace mneme_engine {

inline void vwarn(const char *fmt, va_list ap) {
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

inline void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

// Warn once per `key`: a message that every later launch or allocation would repeat is said once.
inline void warn_once(const std::string &key, const char *fmt, ...) {
    static std::mutex *m = new std::mutex();
    static auto *warned = new std::set<std::string>();
    {
        std::lock_guard<std::mutex> lock(*m);
        if (!warned->insert(key).second) return;
    }
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

inline bool disabled = false;

// Stop recording for good, with one message; the application runs on.
inline void stop_recording(const char *fmt, ...) {
    if (disabled) return;
    disabled = true;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; recording stops, the application continues\n");
    va_end(ap);
}

}  // namespace mneme_engine
