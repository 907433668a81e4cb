// What the recorder counts per kernel while the application runs, written to counts-<pid>.json at
// exit (finalize's Occurrences and in-application times).
#pragma once

#include <stdint.h>
#include <stdio.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "json.h"

namespace mneme_engine {

struct KernelCounts {
    long seen = 0;
    std::set<uint64_t> instances;        // recorded argument sets
    std::map<uint64_t, long> occurrences;  // launches per argument set, recorded or not
    long graph_launches = 0;               // kernel nodes run inside graphs the recorder could not run node by node
    std::map<uint64_t, long> timed;        // launches timed in the application, per recorded argument set
    std::map<uint64_t, std::vector<double>> app_times;     // their durations in seconds, by events
    std::map<uint64_t, std::vector<double>> kernel_times;  // or by the device's kernel timestamps
    // The recorded launch's own time, apart from the repeats': seconds, and the cache it started from
    // ("flushed": the L2 evicted first, as `mneme replay --cache flushed` starts; "warm": as the
    // prologue capture left it).
    std::map<uint64_t, std::pair<double, std::string>> recorded_time;
    // MNEME_RECORD_RETIME: the same launch run and timed again right after, from its prologue restored
    // and the cache state of the second pair member (retime.h); apart from recorded_time, which it never changes.
    std::map<uint64_t, std::pair<double, std::string>> retimed_time;
    // MNEME_RECORD_RETIME=image: the same launch timed a third time, through the recorded code image loaded
    // into a module of its own, as a replay loads it; and what differs between the application's function
    // and the image's, or describes the application's context ("what: application / image").
    std::map<uint64_t, std::pair<double, std::string>> retimed_image_time;
    std::map<std::string, std::string> retime_facts;
    std::map<std::string, long> retime_skipped;  // recorded launches not timed again, by why
    std::map<std::string, long> unrecorded;  // launches selected but not recorded, by why
};

inline std::map<std::string, KernelCounts> &counts() {
    static auto *m = new std::map<std::string, KernelCounts>();
    return *m;
}

// {"<instance key>": {"seconds": s, "cache": "flushed" or "warm"}, ...}: recorded_time, retimed_time.
inline std::string cached_times_json(const std::map<uint64_t, std::pair<double, std::string>> &times) {
    std::string text = "{";
    bool first = true;
    for (auto &rt : times) {
        char key[32], seconds[40];
        snprintf(key, sizeof key, "%016llx", (unsigned long long)rt.first);
        snprintf(seconds, sizeof seconds, "%.9g", rt.second.first);
        text += std::string(first ? "" : ", ") + "\"" + key + "\": {\"seconds\": " + seconds +
                ", \"cache\": " + json_string(rt.second.second) + "}";
        first = false;
    }
    return text + "}";
}

// {"<why>": count, ...}
inline std::string reasons_json(const std::map<std::string, long> &reasons) {
    std::string text = "{";
    bool first = true;
    for (auto &why : reasons) {
        text += std::string(first ? "" : ", ") + json_string(why.first) + ": " + std::to_string(why.second);
        first = false;
    }
    return text + "}";
}

// The counts file's "kernels" object: per kernel, launches seen, launches per argument set
// (recorded or not), launches inside graphs, and the in-application times of each recorded set.
inline std::string kernels_json(const std::map<std::string, KernelCounts> &all) {
    std::string text = "{";
    bool first_kernel = true;
    for (auto &entry : all) {
        text += (first_kernel ? "" : ", ") + json_string(entry.first) + ": {\"seen\": " +
                std::to_string(entry.second.seen) + ", \"instances\": {";
        first_kernel = false;
        bool first = true;
        for (auto &occ : entry.second.occurrences) {
            char key[32];
            snprintf(key, sizeof key, "%016llx", (unsigned long long)occ.first);
            text += std::string(first ? "" : ", ") + "\"" + key + "\": " + std::to_string(occ.second);
            first = false;
        }
        text += "}, \"graph_launches\": " + std::to_string(entry.second.graph_launches) +
                ", \"app_times\": " + times_json(entry.second.app_times) +
                ", \"kernel_times\": " + times_json(entry.second.kernel_times) +
                ", \"recorded_time\": " + cached_times_json(entry.second.recorded_time);
        // Written only when there is one: a counts file without MNEME_RECORD_RETIME stays as it was.
        if (!entry.second.retimed_time.empty())
            text += ", \"retimed_time\": " + cached_times_json(entry.second.retimed_time);
        if (!entry.second.retimed_image_time.empty())
            text += ", \"retimed_image_time\": " + cached_times_json(entry.second.retimed_image_time);
        if (!entry.second.retime_facts.empty()) {
            text += ", \"retime_facts\": {";
            bool first = true;
            for (auto &fact : entry.second.retime_facts) {
                text += std::string(first ? "" : ", ") + json_string(fact.first) + ": " + json_string(fact.second);
                first = false;
            }
            text += "}";
        }
        if (!entry.second.retime_skipped.empty())
            text += ", \"retime_skipped\": " + reasons_json(entry.second.retime_skipped);
        text += ", \"unrecorded\": " + reasons_json(entry.second.unrecorded) + "}";
    }
    return text + "}";
}

}  // namespace mneme_engine
