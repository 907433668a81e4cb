// Capture: device shadows, pinned staging and the background snapshot writer. Device calls go
// through the backend's device_ops() (device_ops.h); docs/design/native.md, docs/design/recording.md.
//
// At a recorded launch the live regions and the module's globals are copied device-to-device
// into shadow buffers (the recorder's own stream-ordered pool: not in the placed range, never
// seen by the application), before the launch (prologue) and after it (epilogue); the
// application then runs on. A writer thread drains the shadows through small pinned staging
// buffers into the launch's prologue.mneme and epilogue.mneme (snapshot_writer.h), writes the
// manifest, renames the launch folder and frees the shadows. When shadows cannot be had (the
// pending bound, the free-memory margin, no pool), the launch is written synchronously from the
// live memory instead: the application waits for the files.

#pragma once

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "annotations.h"
#include "clock.h"
#include "config.h"
#include "device_ops.h"
#include "exclusive.h"
#include "files.h"
#include "log.h"
#include "manifest.h"
#include "snapshot_options.h"
#include "snapshot_writer.h"

namespace mneme_engine {

struct GlobalVar {
    std::string name;
    uint64_t addr;
    size_t size;
};

// The size of one staging buffer, and the snapshot chunk size (LZ4 regions: LZ4_CHUNK_SIZE; the
// writer cuts each staging buffer into them).
const uint64_t CHUNK = 4u << 20;
static_assert(CHUNK % mneme_snapshot::LZ4_CHUNK_SIZE == 0, "a staging buffer holds whole LZ4 chunks");

// Device-to-host copies through pinned staging buffers (two slots, one buffer per side) on a
// private stream, so the copy of the next chunk overlaps the encoding of this one. Falls back to
// pageable synchronous copies when pinned memory or a stream cannot be had.
struct Staging {
    void *buf[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};  // [slot][side]
    void *done[2] = {nullptr, nullptr};  // the backend's events
    void *stream = nullptr;
    bool tried = false, pinned = false;
    std::vector<char> pageable[2];
    std::mutex mu;  // one user at a time: the writer thread, or a synchronous capture
};

inline Staging &staging() {
    static Staging *once = [] {  // thread-safe: the writer thread and a synchronous capture may race here
        auto *s = new Staging();
        s->tried = true;
        const mneme_device_ops &d = device_ops();
        s->pinned = d.stream_create(&s->stream) == 0 && d.event_create(&s->done[0]) == 0 &&
                    d.event_create(&s->done[1]) == 0;
        for (int slot = 0; s->pinned && slot < 2; ++slot)
            for (int side = 0; s->pinned && side < 2; ++side)
                s->pinned = d.host_alloc_pinned(&s->buf[slot][side], CHUNK) == 0;
        if (!s->pinned) {
            warn("no pinned staging memory; snapshots are copied through pageable memory (slower)");
            s->pageable[0].resize(CHUNK);
            s->pageable[1].resize(CHUNK);
        }
        return s;
    }();
    return *once;
}

enum { PROLOGUE = 0, EPILOGUE = 1 };

// One side of a launch as the writer streams it: its snapshot writer and where each span's
// bytes are now (the live memory, or a shadow).
struct Side {
    mneme_snapshot::Writer *writer = nullptr;
    std::vector<uint64_t> src;
    mneme_snapshot::Encoding encoding = mneme_snapshot::ENC_ZSTD;
    bool best = false;
};

// What a recorded launch hands to the snapshot writer.
struct CaptureJob {
    std::string tmp_dir, final_dir, manifest;  // manifest: every field but the writer's own
    std::vector<std::pair<uint64_t, uint64_t>> regions;
    std::vector<GlobalVar> globals;
    std::vector<mneme_snapshot::Policy> policies;  // per region
    std::string args;
    std::vector<std::pair<uint32_t, uint32_t>> layout;
    void *context = nullptr;  // the backend's, where it has one
    uint64_t shadow[2] = {0, 0};
    std::vector<uint64_t> offsets;  // each span's (regions, then globals) offset in a shadow
    uint64_t shadow_bytes = 0;
    std::string name;
    long index = 0;
};

inline mneme_snapshot::Options writer_options() { return snapshot_options(CHUNK); }

// Copy `n` device bytes at `src` into `out` through the staging buffer of `side` (staging().mu held).
inline bool copy_down(uint64_t src, uint64_t n, std::string &out, int side) {
    Staging &s = staging();
    const mneme_device_ops &d = device_ops();
    out.clear();
    for (uint64_t off = 0; off < n; off += CHUNK) {
        size_t len = (size_t)std::min<uint64_t>(CHUNK, n - off);
        void *buf = s.pinned ? s.buf[0][side] : s.pageable[side].data();
        if (d.copy_to_host(buf, src + off, len) != 0) return false;
        out.append(static_cast<const char *>(buf), len);
    }
    return true;
}

// Stream every region, then every global, of one or both sides into their writers, chunk by
// chunk through the staging buffers; a diff epilogue takes the prologue's bytes of the same
// chunk as its base. 0, or an errno value (EIO for a failed device copy).
inline int stream_sides(const CaptureJob &job, Side *sides[2]) {
    Staging &s = staging();
    std::lock_guard<std::mutex> lock(s.mu);
    const mneme_device_ops &d = device_ops();
    for (size_t i = 0; i < job.regions.size(); ++i) {
        uint64_t addr = job.regions[i].first, size = job.regions[i].second;
        for (int k = 0; k < 2; ++k)
            if (sides[k])
                if (int e = sides[k]->writer->begin_region(addr, size, sides[k]->encoding, job.policies[i],
                                                            sides[k]->best))
                    return e;
        uint64_t chunks = (size + CHUNK - 1) / CHUNK;
        auto length = [&](uint64_t c) { return (size_t)std::min<uint64_t>(CHUNK, size - c * CHUNK); };
        auto issue = [&](uint64_t c) {
            // Not beside a timed launch: that one runs alone on the device (alone_on_device drains
            // what was queued; this waits until it has run). A drain of the last recording's
            // shadows would otherwise share the memory system with the next timed launch: reduce_app
            // launches its 4-block reduce_sum right after the 1024-block one, and over 25 processes
            // that launch took 1.50-1.95 us (median 1.665) with the drain beside it, 1.47-1.76 us
            // (median 1.600, its flushed replay's) without (benchmarks/gpu/probes/flush_order_probe.py).
            std::shared_lock<std::shared_mutex> beside(launch_mu(), std::defer_lock);
            if (timing_started.load(std::memory_order_acquire) && config().exclusive) beside.lock();
            for (int k = 0; k < 2; ++k) {
                if (!sides[k]) continue;
                uint64_t from = sides[k]->src[i] + c * CHUNK;
                if (!s.pinned) {
                    if (d.copy_to_host(s.pageable[k].data(), from, length(c)) != 0) return false;
                } else if (d.copy_to_host_async(s.buf[c % 2][k], from, length(c), s.stream) != 0) {
                    return false;
                }
            }
            return !s.pinned || d.event_record(s.done[c % 2], s.stream) == 0;
        };
        bool ok = chunks == 0 || issue(0);
        int err = 0;
        for (uint64_t c = 0; ok && !err && c < chunks; ++c) {
            if (s.pinned) ok = d.event_synchronize(s.done[c % 2]) == 0;
            const void *data[2];
            for (int k = 0; k < 2; ++k) data[k] = s.pinned ? s.buf[c % 2][k] : s.pageable[k].data();
            if (!ok) break;
            // Pinned: the next chunk comes down while the writers copy this one out of its slot.
            if (s.pinned && c + 1 < chunks && !issue(c + 1)) ok = false;
            if (sides[PROLOGUE]) err = sides[PROLOGUE]->writer->chunk(data[PROLOGUE], length(c));
            if (!err && sides[EPILOGUE])
                err = sides[EPILOGUE]->writer->chunk(data[EPILOGUE], length(c),
                                                     sides[PROLOGUE] ? data[PROLOGUE] : nullptr);
            if (ok && !err && !s.pinned && c + 1 < chunks && !issue(c + 1)) ok = false;
        }
        if (s.pinned) d.stream_synchronize(s.stream);  // no copy may still land in a buffer we reuse
        if (err) return err;
        if (!ok) return EIO;
        for (int k = 0; k < 2; ++k)
            if (sides[k])
                if (int e = sides[k]->writer->end_region()) return e;
    }
    std::string bytes;
    for (size_t g = 0; g < job.globals.size(); ++g)
        for (int k = 0; k < 2; ++k) {
            if (!sides[k]) continue;
            if (!copy_down(sides[k]->src[job.regions.size() + g], job.globals[g].size, bytes, k)) return EIO;
            if (int e = sides[k]->writer->global(job.globals[g].name, bytes.data(), bytes.size())) return e;
        }
    return 0;
}

// Open one side's snapshot in the launch's temporary folder, with its argument buffer.
inline int open_side(const CaptureJob &job, int kind, mneme_snapshot::Writer &w, const uint8_t *base_id) {
    // META's static hash is left empty (the code's identity is known only when finalize links
    // its IR), and so is the dynamic hash: the recording database names both.
    if (int e = w.open("", "", device_ops().producer, base_id)) return e;
    (void)kind;
    return w.args(job.args.data(), job.args.size(), job.layout);
}

inline std::string snapshot_path(const CaptureJob &job, int kind) {
    return job.tmp_dir + (kind == PROLOGUE ? "/prologue.mneme" : "/epilogue.mneme");
}

// The manifest's last fields, the manifest itself, then the rename that publishes the launch.
inline int publish(const CaptureJob &job, const char *path, double write_seconds, uint64_t stored) {
    return publish_launch(job.manifest, job.tmp_dir, job.final_dir, path, write_seconds, stored);
}

// The shadow pool, the capture stream and the writer thread's queue.
struct Shadows {
    bool tried = false, ok = false;
    void *pool = nullptr;
    void *stream = nullptr;  // the capture stream (device-to-device copies), private
    void *copied = nullptr;
    uint64_t limit = 0;   // bytes of shadows pending at most
    uint64_t margin = 0;  // device memory left free for the application
    std::mutex mu;
    std::condition_variable cv;
    std::deque<CaptureJob *> queue;
    uint64_t pending_bytes = 0;
    std::atomic<int> pending{0};  // jobs queued or being written (read by the crash handler)
    bool untrimmed = false;       // the pool holds freed shadows' memory still mapped (trim_when_idle)
    bool started = false;
    pthread_t writer;
};

inline Shadows &shadows() {
    static auto *s = new Shadows();
    return *s;
}

inline void writer_main();

// Wait (bounded) for the writer, then die as the signal says (the previous action, by default
// the default one): launches completed before a crash stay readable.
inline struct sigaction previous_action[32];

inline void on_crash(int sig) {
    Shadows &s = shadows();
    if (!pthread_equal(pthread_self(), s.writer)) {
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 6000 && s.pending.load() > 0; ++i) nanosleep(&tick, nullptr);
    }
    sigaction(sig, &previous_action[sig], nullptr);
    raise(sig);  // delivered when this handler returns (the signal is blocked until then)
}

inline void wait_for_writer() {
    Shadows &s = shadows();
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.pending.load() == 0; });
}

inline void at_exit_wait() { wait_for_writer(); }

inline bool start_writer() {
    Shadows &s = shadows();
    if (s.started) return true;
    if (pthread_create(&s.writer, nullptr, [](void *) -> void * { writer_main(); return nullptr; }, nullptr) != 0)
        return false;
    s.started = true;
    atexit(at_exit_wait);  // registered after the runtime's own handler, so it runs before the context goes
    // A forked child has no writer thread (nor a usable context): it must not wait for the parent's launches.
    pthread_atfork(nullptr, nullptr, [] {
        Shadows &child = shadows();
        new (&child.mu) std::mutex();  // the writer may have held it at the fork
        new (&child.cv) std::condition_variable();
        child.queue.clear();
        child.pending.store(0);
        child.pending_bytes = 0;
        child.started = false;
        child.tried = true;
        child.ok = false;  // its launches are written synchronously
    });
    struct sigaction sa = {};
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &sa, &previous_action[sig]);
    return true;
}

// The pool, stream and bounds, once (mu() held).
inline bool shadows_ready() {
    Shadows &s = shadows();
    if (s.tried) return s.ok;
    s.tried = true;
    if (getenv("MNEME_RECORD_SYNC") && strcmp(getenv("MNEME_RECORD_SYNC"), "0") != 0) return false;
    const mneme_device_ops &d = device_ops();
    int device = 0;
    size_t free_bytes = 0, total = 0;
    if (d.current_device(&device) != 0 || d.mem_info(&free_bytes, &total) != 0) return false;
    if (d.pool_create(&s.pool, device) != 0 || d.stream_create(&s.stream) != 0 || d.event_create(&s.copied) != 0)
        return false;
    s.limit = total / 2;
    if (const char *v = getenv("MNEME_RECORD_PENDING_MIB")) s.limit = strtoull(v, nullptr, 0) << 20;
    s.margin = std::max<uint64_t>(1ull << 30, total / 20);
    s.ok = true;
    return true;
}

// Room for a launch's two shadows: both allocated on the capture stream, or neither (mu() held).
inline bool take_shadows(CaptureJob &job) {
    if (!shadows_ready() || !start_writer()) return false;
    Shadows &s = shadows();
    const mneme_device_ops &d = device_ops();
    size_t free_bytes = 0, total = 0;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.pending_bytes + 2 * job.shadow_bytes > s.limit) return false;
    }
    if (d.mem_info(&free_bytes, &total) != 0 || free_bytes < 2 * job.shadow_bytes + s.margin)
        return false;
    uint64_t bytes = std::max<uint64_t>(job.shadow_bytes, 256);
    if (d.pool_alloc_async(&job.shadow[0], bytes, s.pool, s.stream) != 0) return false;
    if (d.pool_alloc_async(&job.shadow[1], bytes, s.pool, s.stream) != 0) {
        d.free_async(job.shadow[0], s.stream);
        job.shadow[0] = 0;
        return false;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending_bytes += 2 * job.shadow_bytes;
    return true;
}

inline void drop_shadows(CaptureJob &job, void *stream) {
    const mneme_device_ops &d = device_ops();
    for (uint64_t &p : job.shadow)
        if (p) d.free_async(p, stream);
    job.shadow[0] = job.shadow[1] = 0;
}

// Copy every span into one side's shadow on the capture stream.
inline bool copy_into_shadow(const CaptureJob &job, int kind) {
    Shadows &s = shadows();
    const mneme_device_ops &d = device_ops();
    for (size_t i = 0; i < job.regions.size(); ++i)
        if (job.regions[i].second && d.copy_on_device_async(job.shadow[kind] + job.offsets[i], job.regions[i].first,
                                                            job.regions[i].second, s.stream) != 0)
            return false;
    for (size_t g = 0; g < job.globals.size(); ++g)
        if (d.copy_on_device_async(job.shadow[kind] + job.offsets[job.regions.size() + g], job.globals[g].addr,
                                  job.globals[g].size, s.stream) != 0)
            return false;
    return true;
}

// Copy one side's shadow back over every span's live bytes and wait for it (MNEME_RECORD_RETIME:
// the prologue before the launch runs again, the epilogue after, so the application finds what its
// own launch left). Every span, not only those the launch wrote: which ones it wrote is not known
// here, and a span it did not write gets its own bytes back. The prologue restore leaves the copy
// engine as the last writer of every span, as a replay's restore does.
inline bool restore_from_shadow(const CaptureJob &job, int kind) {
    Shadows &s = shadows();
    const mneme_device_ops &d = device_ops();
    bool ok = true;
    for (size_t i = 0; i < job.regions.size(); ++i)
        if (job.regions[i].second && d.copy_on_device_async(job.regions[i].first, job.shadow[kind] + job.offsets[i],
                                                            job.regions[i].second, s.stream) != 0)
            ok = false;
    for (size_t g = 0; g < job.globals.size(); ++g)
        if (d.copy_on_device_async(job.globals[g].addr, job.shadow[kind] + job.offsets[job.regions.size() + g],
                                  job.globals[g].size, s.stream) != 0)
            ok = false;
    return d.stream_synchronize(s.stream) == 0 && ok;
}

inline std::vector<uint64_t> shadow_sources(const CaptureJob &job, int kind) {
    std::vector<uint64_t> src;
    for (uint64_t off : job.offsets) src.push_back(job.shadow[kind] + off);
    return src;
}

inline std::vector<uint64_t> live_sources(const CaptureJob &job) {
    std::vector<uint64_t> src;
    for (auto &r : job.regions) src.push_back(r.first);
    for (auto &g : job.globals) src.push_back(g.addr);
    return src;
}

// Both snapshots of a shadowed launch, in one pass over the shadows; 0 or an errno value.
inline int write_from_shadows(const CaptureJob &job, uint64_t *stored) {
    mneme_snapshot::Writer pro(snapshot_path(job, PROLOGUE), PROLOGUE, writer_options());
    mneme_snapshot::Writer epi(snapshot_path(job, EPILOGUE), EPILOGUE, writer_options());
    const EpilogueFormat &f = epilogue_format();
    if (int e = open_side(job, PROLOGUE, pro, nullptr)) return e;
    if (int e = open_side(job, EPILOGUE, epi, f.encoding == mneme_snapshot::ENC_DIFF ? pro.snapshot_id() : nullptr))
        return e;
    Side p, q;
    p.writer = &pro;
    p.src = shadow_sources(job, PROLOGUE);
    q.writer = &epi;
    q.src = shadow_sources(job, EPILOGUE);
    q.encoding = f.encoding;
    q.best = f.best;
    Side *sides[2] = {&p, &q};
    if (int e = stream_sides(job, sides)) return e;
    if (int e = pro.finish()) return e;
    if (int e = epi.finish()) return e;
    *stored = pro.bytes_written() + epi.bytes_written();
    return 0;
}

// The pool's free memory back to the application (s.mu held).
inline void trim_pool(Shadows &s) {
    device_ops().pool_trim(s.pool);
    s.untrimmed = false;
}

// Give the pool's free memory back to the application (s.mu held), but never while a recording runs:
// unmapping device memory invalidates the GPU's address translations, and a kernel launched right
// after runs about 10% slower while it walks its page tables again (2.11 against 1.92 us on 1 MiB,
// H100, benchmarks/gpu/probes/mapping_probe.cu). The pool keeps its memory through
// synchronizations (its release threshold), so this is the only place it is unmapped but for an
// application allocation that found the device full (wait_for_shadows). False: a recording ran.
inline bool trim_when_idle(Shadows &s) {
    std::unique_lock<std::mutex> recording(mu(), std::try_to_lock);
    if (recording.owns_lock()) trim_pool(s);
    return recording.owns_lock();
}

inline void writer_main() {
    Shadows &s = shadows();
    const mneme_device_ops &d = device_ops();
    void *stream = nullptr;
    for (;;) {
        CaptureJob *job;
        {
            std::unique_lock<std::mutex> lock(s.mu);
            // Idle with memory to give back: try again every 2 ms until no recording runs (a sleep, not a
            // timed wait: that needs a newer glibc than a preloaded recorder may, docs/design/native.md).
            while (s.queue.empty()) {
                if (s.untrimmed && !trim_when_idle(s)) {
                    lock.unlock();
                    struct timespec tick = {0, 2 * 1000 * 1000};
                    nanosleep(&tick, nullptr);
                    lock.lock();
                } else {
                    s.cv.wait(lock, [&] { return !s.queue.empty(); });
                }
            }
            job = s.queue.front();
            s.queue.pop_front();
        }
        double t0 = now_seconds();
        d.set_context(job->context);
        if (!stream && d.stream_create(&stream) != 0) stream = s.stream;
        uint64_t stored = 0;
        int err = write_from_shadows(*job, &stored);
        drop_shadows(*job, stream);
        d.stream_synchronize(stream);
        if (!err) err = publish(*job, "device shadow", now_seconds() - t0, stored);
        if (err) {
            remove_tree(job->tmp_dir);
            stop_recording("writing the snapshots of launch %ld of %s to %s failed (%s)", job->index,
                           job->name.c_str(), job->tmp_dir.c_str(), strerror(err));
        }
        std::lock_guard<std::mutex> lock(s.mu);
        s.pending_bytes -= 2 * job->shadow_bytes;
        s.untrimmed = true;  // given back once the queue is empty and no recording runs (above)
        delete job;
        s.pending.fetch_sub(1);
        s.cv.notify_all();
    }
}

inline void enqueue(CaptureJob *job) {
    Shadows &s = shadows();
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending.fetch_add(1);
    s.queue.push_back(job);
    s.cv.notify_all();
}

// An application allocation failed for lack of memory (mu() held, so no recording runs): when
// shadows are pending, wait for the writer to free them; give the pool's free memory back; say
// whether there was any to have (the caller retries once).
inline bool wait_for_shadows() {
    Shadows &s = shadows();
    if (!s.started) return false;
    bool waited = s.pending.load() != 0;
    if (waited) wait_for_writer();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.untrimmed) return waited;
    trim_pool(s);
    return true;
}

// Give a launch's shadows back when its capture did not complete (mu() held).
inline void release_shadows(CaptureJob &job) {
    Shadows &s = shadows();
    device_ops().stream_synchronize(s.stream);
    drop_shadows(job, s.stream);
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending_bytes -= 2 * job.shadow_bytes;
}

// A region's verification policy as the application annotated it, else exact bytes (mu() held).
inline mneme_snapshot::Policy region_policy(uint64_t addr) {
    auto it = annotations().find(addr);
    return it == annotations().end() ? mneme_snapshot::Policy() : annotation_policy(it->second);
}

// One side written synchronously from the live memory (the application waits); 0 or an errno value.
inline int write_live(const CaptureJob &job, int kind, uint64_t *stored) {
    mneme_snapshot::Writer w(snapshot_path(job, kind), kind, writer_options());
    if (int e = open_side(job, kind, w, nullptr)) return e;
    Side side;
    side.writer = &w;
    side.src = live_sources(job);
    Side *sides[2] = {nullptr, nullptr};
    sides[kind] = &side;  // an epilogue without its prologue's bytes is stored whole (zstd)
    if (int e = stream_sides(job, sides)) return e;
    if (int e = w.finish()) return e;
    *stored += w.bytes_written();
    return 0;
}

}  // namespace mneme_engine
