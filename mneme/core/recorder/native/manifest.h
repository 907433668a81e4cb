// One recorded launch's manifest.json (version 2), which finalize reads
// (mneme.core.recorder.rawdir.launches), and the rename that publishes its launch folder.
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "files.h"
#include "json.h"
#include "snapshot_options.h"

namespace mneme_engine {

struct LaunchManifest {
    std::string format;  // the manifest format of the backend that wrote it
    std::string kernel;
    long sequence = 0, occurrence = 0;
    uint64_t instance_key = 0;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
    bool cooperative = false;           // every block resident at once (a cooperative launch)
    unsigned cluster[3] = {0, 0, 0};    // thread block cluster dimensions; zeros: no clusters
    uint64_t va_base = 0, va_size = 0, bytes = 0;
    double prologue_seconds = 0, launch_seconds = 0, epilogue_seconds = 0;
    std::string image, image_kind, args;                           // args: the argument bytes
    std::vector<std::pair<size_t, size_t>> params;                 // (offset, size) of each parameter
    std::vector<std::pair<uint64_t, uint64_t>> regions;            // (address, size)
    std::vector<std::tuple<std::string, uint64_t, uint64_t>> globals;  // (name, address, size)
    std::string policies;                                          // annotation_json entries
};

// Every field of the manifest but the writer's own (publish_launch adds them and closes it).
inline std::string manifest_head(const LaunchManifest &l) {
    std::string m = "{\"format\": " + json_string(l.format) + ", \"version\": 2, \"kernel\": " + json_string(l.kernel);
    char buf[768];
    snprintf(buf, sizeof buf,
             ", \"pid\": %d, \"sequence\": %ld, \"occurrence\": %ld, \"instance_key\": \"%016llx\""
             ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_mem\": %u, \"va_base\": %llu"
             ", \"va_size\": %llu, \"bytes\": %llu, \"prologue_seconds\": %.6f, \"launch_seconds\": %.6f"
             ", \"epilogue_seconds\": %.6f",
             (int)getpid(), l.sequence, l.occurrence, (unsigned long long)l.instance_key, l.grid[0], l.grid[1],
             l.grid[2], l.block[0], l.block[1], l.block[2], l.shared, (unsigned long long)l.va_base,
             (unsigned long long)l.va_size, (unsigned long long)l.bytes, l.prologue_seconds, l.launch_seconds,
             l.epilogue_seconds);
    m += buf;
    snprintf(buf, sizeof buf, ", \"cooperative\": %s, \"cluster\": [%u, %u, %u]", l.cooperative ? "true" : "false",
             l.cluster[0], l.cluster[1], l.cluster[2]);
    m += buf;
    m += ", \"image\": " + json_string(l.image) + ", \"image_kind\": " + json_string(l.image_kind);
    m += ", \"args\": \"" + hex(l.args) + "\", \"params\": [";
    for (size_t i = 0; i < l.params.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(l.params[i].first) + ", " + std::to_string(l.params[i].second) + "]";
    m += "], \"regions\": [";
    for (size_t i = 0; i < l.regions.size(); ++i)
        m += (i ? ", [" : "[") + std::to_string(l.regions[i].first) + ", " + std::to_string(l.regions[i].second) + "]";
    m += "], \"globals\": [";
    for (size_t i = 0; i < l.globals.size(); ++i)
        m += (i ? ", [" : "[") + json_string(std::get<0>(l.globals[i])) + ", " +
             std::to_string(std::get<1>(l.globals[i])) + ", " + std::to_string(std::get<2>(l.globals[i])) + "]";
    m += "], \"policies\": [" + l.policies + "]";
    return m;
}

// The manifest's last fields (`capture`: how the snapshots were taken), the manifest itself, then
// the rename of `tmp_dir` to `final_dir` that publishes the launch; 0 or an errno value.
inline int publish_launch(const std::string &head, const std::string &tmp_dir, const std::string &final_dir,
                          const char *capture, double write_seconds, uint64_t stored) {
    char buf[512];
    snprintf(buf, sizeof buf,
             ", \"prologue\": \"prologue.mneme\", \"epilogue\": \"epilogue.mneme\", \"capture\": \"%s\""
             ", \"epilogue_format\": \"%s\", \"write_seconds\": %.6f, \"stored_bytes\": %llu}\n",
             capture, epilogue_format().name, write_seconds, (unsigned long long)stored);
    std::string m = head + buf;
    if (!write_atomic(tmp_dir + "/manifest.json", m.data(), m.size())) return errno ? errno : EIO;
    if (rename(tmp_dir.c_str(), final_dir.c_str()) != 0) return errno ? errno : EIO;
    return 0;
}

}  // namespace mneme_engine
