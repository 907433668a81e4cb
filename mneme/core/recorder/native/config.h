// The recorder's configuration, from the MNEME_RECORD_* environment of the recorded process,
// and which MPI ranks record (docs/design/native.md).
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <regex>
#include <string>

// The name of the backend's timer by the device's own kernel timestamps (MNEME_RECORD_TIMER), which
// the backend defines before including the engine; the others are "events" and "auto".
#ifndef MNEME_DEVICE_TIMER
#define MNEME_DEVICE_TIMER "kernel"
#endif

namespace mneme_engine {

struct Config {
    std::string dir;  // empty: place allocations only, record nothing
    std::regex kernel{".*"};
    long skip = 0;
    long max_per_kernel = 4;
    uint64_t va_base = 0x153940000000ull;
    uint64_t va_size = 1ull << 40;
    uint64_t vmm_size = 1ull << 41;  // the zone above the placed range for the application's own reservations
    long timed = 16;                 // launches timed in the application per recorded instance, after the recorded one
    bool gate = true;                // hold each timed launch's stream until its events and kernel are queued
    bool exclusive = true;           // run each timed launch alone on the device (see time_launch)
    std::string timer = "auto";      // MNEME_RECORD_TIMER: MNEME_DEVICE_TIMER (kernel timestamps), events, or auto (that if it works)
    bool flush = true;               // evict the L2 before timing a recorded launch (see flush_l2)
    bool retime = false;             // time the recorded launch a second time, from its restored prologue (retime.h)
    bool retime_image = false;       // MNEME_RECORD_RETIME=image: and a third, through its code image loaded anew
    long timer_park = 64;            // untimed launches in a row after which the kernel timer's records stop; 0: never
    bool place = true;
};

// The MPI rank of this process as a launcher announces it; -1 without a launcher.
inline long launcher_rank() {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                                 "SLURM_PROCID", "FLUX_TASK_RANK"};
    for (const char *var : vars)
        if (const char *v = getenv(var)) return atol(v);
    return -1;
}

// Whether this rank records: `spec` is "all", a comma-separated list of ranks, or unset (rank 0,
// or the only process when no launcher is involved), as the original Mneme does.
inline bool rank_selected(const char *spec, long rank) {
    if (!spec || !*spec) return rank <= 0;
    if (strcmp(spec, "all") == 0) return true;
    long me = rank < 0 ? 0 : rank;
    const char *p = spec;
    while (*p) {
        char *end = nullptr;
        long r = strtol(p, &end, 10);
        if (end == p) return false;
        if (r == me) return true;
        p = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return false;
}

inline Config &config() {
    static Config *c = [] {
        auto *cfg = new Config();
        if (const char *v = getenv("MNEME_RECORD_DIR")) cfg->dir = v;
        if (const char *v = getenv("MNEME_RECORD_KERNEL")) {
            try {
                cfg->kernel = std::regex(v);
            } catch (const std::regex_error &) {
                fprintf(stderr, "mneme-recorder: invalid MNEME_RECORD_KERNEL regex '%s'; recording nothing\n", v);
                cfg->dir.clear();
            }
        }
        if (const char *v = getenv("MNEME_RECORD_SKIP")) cfg->skip = atol(v);
        if (const char *v = getenv("MNEME_RECORD_MAX")) cfg->max_per_kernel = atol(v);
        if (const char *v = getenv("MNEME_RECORD_VA_BASE")) cfg->va_base = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_VA_SIZE")) cfg->va_size = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_PLACE")) cfg->place = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_VMM_SIZE")) cfg->vmm_size = strtoull(v, nullptr, 0);
        if (const char *v = getenv("MNEME_RECORD_TIMED")) cfg->timed = atol(v);
        if (const char *v = getenv("MNEME_RECORD_TIMING_GATE")) cfg->gate = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_TIMING_EXCLUSIVE")) cfg->exclusive = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_TIMING_FLUSH")) cfg->flush = strcmp(v, "0") != 0;
        if (const char *v = getenv("MNEME_RECORD_RETIME")) {
            cfg->retime = strcmp(v, "0") != 0 && *v;
            cfg->retime_image = strcmp(v, "image") == 0;
        }
        if (const char *v = getenv("MNEME_RECORD_TIMER_PARK")) cfg->timer_park = atol(v);
        if (const char *v = getenv("MNEME_RECORD_TIMER")) {
            cfg->timer = v;
            if (cfg->timer != "auto" && cfg->timer != MNEME_DEVICE_TIMER && cfg->timer != "events") {
                fprintf(stderr, "mneme-recorder: MNEME_RECORD_TIMER=%s is none of auto, " MNEME_DEVICE_TIMER ", events; using auto\n", v);
                cfg->timer = "auto";
            }
        }
        if (!rank_selected(getenv("MNEME_RECORD_RANKS"), launcher_rank())) cfg->dir.clear();
        return cfg;
    }();
    return *c;
}

}  // namespace mneme_engine
