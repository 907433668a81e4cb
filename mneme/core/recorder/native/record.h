// The record of one launch, vendor-neutral: which occurrences are recorded (the argument-set
// dedup, MNEME_RECORD_SKIP and MNEME_RECORD_MAX, the counts of what was not recorded and why),
// the code image written once, the launch folder, the prologue and epilogue captures around the
// launch (shadows or synchronous writes, capture.h), the manifest, and the publication of the folder.
// A backend's recorder selects the kernel, packs its arguments and runs (and times) the launch
// through its API; everything else of a recorded launch is here. docs/design/native.md.
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "annotations.h"
#include "capture.h"
#include "clock.h"
#include "config.h"
#include "counts.h"
#include "device_ops.h"
#include "files.h"
#include "hash.h"
#include "log.h"
#include "manifest.h"
#include "zone.h"

namespace mneme_engine {

inline thread_local bool in_recorder = false;  // set while this thread records: the recorder's own calls pass through
inline long launch_seq = 0;                    // the launch folders' sequence numbers (mu() held)

// Marks this thread as recording while it lives: the driver calls the record makes pass through.
struct RecordingScope {
    RecordingScope() { in_recorder = true; }
    ~RecordingScope() { in_recorder = false; }
    RecordingScope(const RecordingScope &) = delete;
    RecordingScope &operator=(const RecordingScope &) = delete;
};

// A selected launch that is not recorded, counted with why (counts-<pid>.json "unrecorded"; `mneme
// record` warns with them when a kernel ran but was never recorded). Takes mu().
inline void count_unrecorded(const std::string &kernel, const char *why) {
    std::lock_guard<std::mutex> lock(mu());
    counts()[kernel].unrecorded[why]++;
}

// The dynamic hash of a launch: its geometry, shared memory and argument bytes.
inline uint64_t instance_key(const unsigned grid[3], const unsigned block[3], unsigned shared, const std::string &args) {
    uint64_t h = fnv1a(grid, 3 * sizeof(unsigned), fnv1a(block, 3 * sizeof(unsigned), fnv1a(&shared, sizeof shared)));
    return fnv1a(args.data(), args.size(), h);
}

// What to do with one occurrence of a selected kernel (mu() held).
enum class Admission {
    Skipped,   // before MNEME_RECORD_SKIP's count: run it, counted as skipped
    Recorded,  // its argument set is recorded already: run it (a backend may time it)
    Full,      // MNEME_RECORD_MAX argument sets of this kernel are recorded: run it
    Record,    // record it: its argument set is taken (give it back with `abandon` if the record fails)
};

// What admit() would answer for the next launch with `key`, counting nothing (mu() held).
inline Admission peek_admission(const KernelCounts &kc, uint64_t key) {
    const Config &c = config();
    if (kc.seen < c.skip) return Admission::Skipped;
    if (kc.instances.count(key)) return Admission::Recorded;
    if ((long)kc.instances.size() >= c.max_per_kernel) return Admission::Full;
    return Admission::Record;
}

// Count the occurrence and decide; `index` gets its number among the kernel's launches.
inline Admission admit(KernelCounts &kc, uint64_t key, long &index) {
    Admission a = peek_admission(kc, key);
    index = kc.seen++;
    if (a == Admission::Skipped) {
        kc.unrecorded["skipped (MNEME_RECORD_SKIP, --skip)"]++;
        return a;
    }
    kc.occurrences[key]++;
    if (a == Admission::Record) kc.instances.insert(key);
    return a;
}

// A record abandoned before its files are complete: the argument set is free again, a later launch
// of it is recorded instead, and this one is counted with why (mu() held).
inline void abandon(KernelCounts &kc, uint64_t key, const std::string &why) {
    kc.instances.erase(key);
    kc.unrecorded[why]++;
}

// Write a code image once into the raw folder's images/ (mu() held): its path there, or "" when it
// cannot be written (recording then stops). `Image` has `file`, `failed` and `kind`; `index` numbers it.
template <typename Image>
std::string write_image_once(Image &img, size_t index, const void *data, size_t size) {
    if (!img.file.empty() || img.failed) return img.file;
    std::string folder = config().dir + "/images";
    mkdir(folder.c_str(), 0755);
    char name[128];
    snprintf(name, sizeof name, "image-%d-%04zu.%s", (int)getpid(), index, img.kind);
    if (!write_atomic(folder + "/" + name, data, size)) {
        img.failed = true;
        stop_recording("cannot write the code image %s/%s (%s)", folder.c_str(), name, strerror(errno));
        return "";
    }
    img.file = std::string("images/") + name;
    return img.file;
}

// The placed allocations live now, as (address, size): what a prologue captures (mu() held).
inline std::vector<std::pair<uint64_t, uint64_t>> live_regions() {
    std::vector<std::pair<uint64_t, uint64_t>> regions;
    for (auto &a : placement().live) regions.emplace_back(a.first, a.second.size);
    return regions;
}

// What a backend knows of a launch it records; `record_admitted` fills in the rest.
struct LaunchRecord {
    const char *format = "";  // the manifest's format (the backend names it)
    std::string kernel;
    long index = 0;      // the occurrence (admit)
    uint64_t key = 0;    // instance_key
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
    bool cooperative = false;
    unsigned cluster[3] = {0, 0, 0};
    void *stream = nullptr;  // the launch's stream: it waits for the prologue copy
    std::string args;        // the argument bytes, and each parameter's (offset, size)
    std::vector<std::pair<size_t, size_t>> layout;
    std::vector<std::pair<uint64_t, uint64_t>> regions;  // live_regions(), and any a backend adds
    // Filled by the backend's `describe`, once the launch folder exists:
    std::vector<GlobalVar> globals;
    std::string image;  // write_image_once's path, "" when none
    const char *image_kind = "";
};

// The backend's part of a recorded launch. Statuses are the vendor's (0: success).
template <typename Status>
struct LaunchHooks {
    std::function<Status()> run;                     // the launch as the application asked (when not recorded)
    std::function<Status()> launch;                  // the recorded launch (the backend may time it)
    std::function<const char *(int)> error_name;     // the vendor's name of a status
    std::function<void(LaunchRecord &)> describe;    // the module's globals and code image
    std::function<void()> before_prologue;           // optional: what must be set up before the first copy
    // Optional (MNEME_RECORD_RETIME): run and time the launch again once its epilogue is in its shadow.
    // `restore(PROLOGUE)` puts the launch's prologue back, `restore(EPILOGUE)` what the launch left;
    // the backend calls both, the second whatever happened, and says nothing to the application.
    std::function<void(const std::function<bool(int)> &restore)> retime;
};

// The capture job of a launch: its folders, regions, globals and their 256-byte aligned shadow spans.
inline std::unique_ptr<CaptureJob> capture_job(const LaunchRecord &r, const char *tmp_dir, const char *final_dir) {
    std::unique_ptr<CaptureJob> job(new CaptureJob());
    job->tmp_dir = tmp_dir;
    job->final_dir = final_dir;
    job->regions = r.regions;
    job->globals = r.globals;
    job->args = r.args;
    for (auto &p : r.layout) job->layout.emplace_back((uint32_t)p.first, (uint32_t)p.second);
    job->name = r.kernel;
    job->index = r.index;
    for (auto &reg : r.regions) job->policies.push_back(region_policy(reg.first));
    for (auto &reg : r.regions) {  // shadow layout: regions then globals
        job->offsets.push_back(job->shadow_bytes);
        job->shadow_bytes += (reg.second + 255) / 256 * 256;
    }
    for (auto &g : r.globals) {
        job->offsets.push_back(job->shadow_bytes);
        job->shadow_bytes += (g.size + 255) / 256 * 256;
    }
    job->context = device_ops().current_context();
    return job;
}

// The manifest of a recorded launch, but for the writer's own fields.
inline std::string launch_manifest(const LaunchRecord &r, long seq, double t0, double t1, double t2, double t3,
                                   const std::string &policies) {
    const Config &c = config();
    LaunchManifest lm;
    lm.format = r.format;
    lm.kernel = r.kernel;
    lm.sequence = seq;
    lm.occurrence = r.index;
    lm.instance_key = r.key;
    for (int i = 0; i < 3; ++i) lm.grid[i] = r.grid[i], lm.block[i] = r.block[i], lm.cluster[i] = r.cluster[i];
    lm.shared = r.shared;
    lm.cooperative = r.cooperative;
    lm.va_base = c.va_base;
    lm.va_size = c.va_size;
    for (auto &reg : r.regions) lm.bytes += reg.second;
    for (auto &g : r.globals) lm.bytes += g.size;
    // prologue/launch/epilogue seconds: what the application waited for (the shadow copies, or the
    // synchronous writes); the writer adds its own time (write_seconds).
    lm.prologue_seconds = t1 - t0;
    lm.launch_seconds = t2 - t1;
    lm.epilogue_seconds = t3 - t2;
    lm.image = r.image;
    lm.image_kind = r.image_kind;
    lm.args = r.args;
    lm.params = r.layout;
    lm.regions = r.regions;
    for (auto &g : r.globals) lm.globals.emplace_back(g.name, g.addr, g.size);
    lm.policies = policies;
    return manifest_head(lm);
}

// Record an admitted launch (mu() held, `admit` said Record): make its folder, capture the
// prologue, launch, capture the epilogue, and publish the folder (at once, or by the writer
// thread from the shadows). Whatever fails, the application's launch runs and its status is
// returned; a record that cannot complete is abandoned (its argument set free again) with why.
template <typename Status>
Status record_admitted(KernelCounts &kc, LaunchRecord &r, const LaunchHooks<Status> &hooks) {
    const Config &c = config();
    const mneme_device_ops &d = device_ops();
    long seq = launch_seq++;
    std::string policies;  // the annotated regions' policies, as the manifest's "policies" entries
    for (auto &a : annotations()) {
        if (!placement().live.count(a.first)) continue;
        policies += (policies.empty() ? "" : ", ") + annotation_json(a.first, a.second);
    }
    char final_dir[4096], tmp_dir[4200];
    snprintf(final_dir, sizeof final_dir, "%s/launch-%d-%06ld", c.dir.c_str(), (int)getpid(), seq);
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp", final_dir);
    mkdir(c.dir.c_str(), 0755);
    if (mkdir(tmp_dir, 0755) != 0 && errno != EEXIST) {
        stop_recording("cannot create %s (%s)", tmp_dir, strerror(errno));
        abandon(kc, r.key, "the recorder stopped (its folder could not be written)");
        return hooks.run();
    }
    hooks.describe(r);
    write_maps();
    if (disabled) {
        remove_tree(tmp_dir);
        abandon(kc, r.key, "the recorder stopped (its folder could not be written)");
        return hooks.run();
    }
    int synced = d.synchronize();
    if (synced != 0) {  // an earlier error of the application's: leave it to the application
        remove_tree(tmp_dir);
        abandon(kc, r.key, std::string("an earlier error of the application's was pending (") +
                               hooks.error_name(synced) + ")");
        return hooks.run();
    }
    std::unique_ptr<CaptureJob> job = capture_job(r, tmp_dir, final_dir);
    if (hooks.before_prologue) hooks.before_prologue();
    Shadows &sh = shadows();
    double t0 = now_seconds();
    int err = 0;
    uint64_t stored = 0;
    bool shadowed = take_shadows(*job);
    if (shadowed) {
        // The launch's stream waits for the prologue copy; the application's thread does not.
        shadowed = copy_into_shadow(*job, PROLOGUE) && d.event_record(sh.copied, sh.stream) == 0;
        if (shadowed && d.stream_wait_event(r.stream, sh.copied) != 0) shadowed = d.stream_synchronize(sh.stream) == 0;
        if (!shadowed) release_shadows(*job);
    }
    if (!shadowed) err = write_live(*job, PROLOGUE, &stored);  // stall = write
    double t1 = now_seconds();
    Status result = hooks.launch();
    synced = d.synchronize();
    double t2 = now_seconds();
    bool launched = (int)result == 0 && synced == 0;
    if (launched && shadowed && !(copy_into_shadow(*job, EPILOGUE) && d.stream_synchronize(sh.stream) == 0))
        err = EIO;
    else if (launched && !shadowed && !err)
        err = write_live(*job, EPILOGUE, &stored);
    double t3 = now_seconds();
    if (!launched || err) {
        if (shadowed) release_shadows(*job);
        remove_tree(tmp_dir);
        // The launch itself failed: the application sees its error; this launch is not recorded.
        if (launched)
            stop_recording("writing the snapshot of launch %ld of %s to %s failed (%s)", r.index, r.kernel.c_str(),
                           tmp_dir, strerror(err));
        abandon(kc, r.key, launched ? std::string("its snapshot could not be written (") + strerror(err) + ")"
                                    : std::string("the launch failed (") +
                                          hooks.error_name((int)result != 0 ? (int)result : synced) + ")");
        return result;
    }
    // The second timing: only from shadows (a synchronous capture has no device copy of the prologue),
    // after t3: its cost is not the capture's (epilogue_seconds).
    if (c.retime && hooks.retime) {
        if (shadowed)
            hooks.retime([&](int kind) { return restore_from_shadow(*job, kind); });
        else
            kc.retime_skipped["its capture was synchronous (no device copy of its prologue to restore)"]++;
    }
    job->manifest = launch_manifest(r, seq, t0, t1, t2, t3, policies);
    if (shadowed) {
        enqueue(job.release());  // the writer thread writes, publishes and frees the shadows
        return result;
    }
    if ((err = publish(*job, "synchronous", (t1 - t0) + (t3 - t2), stored)) != 0) {
        remove_tree(tmp_dir);
        stop_recording("cannot write %s (%s)", final_dir, strerror(err));
    }
    return result;
}

}  // namespace mneme_engine
