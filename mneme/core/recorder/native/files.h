// The recorder's files: atomic writes, the process's maps, and removing a launch folder that failed.
#pragma once

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "config.h"
#include "log.h"

namespace mneme_engine {

// Write a whole file atomically: a temporary name, fsync, rename. On failure nothing is left.
inline bool write_atomic(const std::string &path, const void *data, size_t n) {
    std::string tmp = path + ".tmp";
    FILE *out = fopen(tmp.c_str(), "wb");
    if (!out) return false;
    bool ok = fwrite(data, 1, n, out) == n;
    ok = fflush(out) == 0 && ok;
    ok = ok && fsync(fileno(out)) == 0;
    ok = fclose(out) == 0 && ok;
    int saved = errno;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        saved = ok ? errno : saved;
        unlink(tmp.c_str());
        errno = saved;
        return false;
    }
    return true;
}

inline bool maps_written = false;

// /proc/self/maps, once per process: the finalizer looks for embedded IR in the files it names.
inline void write_maps() {
    if (maps_written) return;
    maps_written = true;
    std::string text;
    if (FILE *in = fopen("/proc/self/maps", "r")) {
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) text.append(buf, n);
        fclose(in);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/maps-%d.txt", config().dir.c_str(), (int)getpid());
    if (!write_atomic(path, text.data(), text.size())) stop_recording("cannot write %s (%s)", path, strerror(errno));
}

inline void remove_tree(const std::string &dir) {
    for (const char *name : {"prologue.mneme", "epilogue.mneme", "manifest.json"}) unlink((dir + "/" + name).c_str());
    rmdir(dir.c_str());
}

}  // namespace mneme_engine
