// The recorder's messages on stderr, and the one switch that stops recording for good.
#pragma once

#include <stdarg.h>
#include <stdio.h>

namespace mneme_engine {

inline void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mneme-recorder: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
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
