// How the recorder writes its snapshots: the epilogue's encoding (MNEME_RECORD_EPILOGUE_FORMAT),
// the codec, level and encoding threads (MNEME_RECORD_COMPRESSION, _ZSTD_LEVEL, _WRITE_THREADS).
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "log.h"
#include "snapshot_writer.h"

namespace mneme_engine {

// The epilogue's encoding: MNEME_RECORD_EPILOGUE_FORMAT (`mneme record --epilogue-format`).
struct EpilogueFormat {
    mneme_snapshot::Encoding encoding = mneme_snapshot::ENC_DIFF;
    bool best = false;
    const char *name = "diff";
};

inline const EpilogueFormat &epilogue_format() {
    static EpilogueFormat *f = [] {
        auto *f = new EpilogueFormat();
        const char *v = getenv("MNEME_RECORD_EPILOGUE_FORMAT");
        if (v && strcmp(v, "bytes") == 0) {
            f->encoding = mneme_snapshot::ENC_ZSTD;
            f->name = "bytes";
        } else if (v && strcmp(v, "best") == 0) {
            f->best = true;
            f->name = "best";
        } else if (v && *v && strcmp(v, "diff") != 0) {
            warn("MNEME_RECORD_EPILOGUE_FORMAT=%s is not diff, bytes or best; epilogues are written as diffs", v);
        }
        return f;
    }();
    return *f;
}

// The snapshot writer's options, with chunks of `chunk_size` bytes (fixed by the first call).
inline const mneme_snapshot::Options &snapshot_options(uint64_t chunk_size) {
    static mneme_snapshot::Options *o = [chunk_size] {
        auto *o = new mneme_snapshot::Options();
        o->chunk_size = chunk_size;
        // No fsync: the rename of the launch folder protects against the application crashing
        // (the kernel keeps its page cache); syncing gigabytes per launch costs more than the copy.
        o->sync = false;
        if (const char *v = getenv("MNEME_RECORD_ZSTD_LEVEL")) o->level = atoi(v);
        // MNEME_RECORD_COMPRESSION (`mneme record --compression`): lz4 (the default: prologues
        // restore about twice as fast as from zstd), zstd, or none. Without liblz4, zstd.
        o->codec = mneme_snapshot::CODEC_LZ4;
        if (const char *v = getenv("MNEME_RECORD_COMPRESSION")) {
            if (strcmp(v, "zstd") == 0)
                o->codec = mneme_snapshot::CODEC_ZSTD;
            else if (strcmp(v, "none") == 0)
                o->compress = false;
            else if (*v && strcmp(v, "lz4") != 0)
                warn("MNEME_RECORD_COMPRESSION=%s is not lz4, zstd or none; snapshots are compressed with lz4", v);
        }
        if (o->compress && o->codec == mneme_snapshot::CODEC_LZ4 && !mneme_snapshot::lz4_available())
            warn("liblz4.so.1 cannot be loaded; snapshots are compressed with zstd (install liblz4-1)");
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long threads = std::max(1l, std::min(8l, cores / 2));
        if (const char *v = getenv("MNEME_RECORD_WRITE_THREADS")) threads = std::max(1l, atol(v));
        mneme_snapshot::set_threads((int)threads);
        return o;
    }();
    return *o;
}

}  // namespace mneme_engine
