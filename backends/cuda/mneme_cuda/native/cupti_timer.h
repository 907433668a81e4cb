/* The kernel timer of Mneme's CUDA side: the GPU's own start and end timestamps of a launch,
 * from CUPTI activity records, so a kernel's time holds no front-end work between an event and
 * the launch (an event window around a ~1 us kernel is 3.5 us, two thirds of it the front end).
 *
 * One copy of this header is compiled into the recorder (C++, mneme_recorder.cpp) and one into
 * the replay's helper library (C, cuptitime.c). libcupti is opened at run time with dlopen, so
 * nothing links it and a process without it keeps CUDA events.
 *
 * Two ways to find a launch's record. By tag (the replay): mct_enable(MCT_TAGS) once before the first
 * launch to time; around each of them mct_push(id) and mct_pop() (the launch's driver call then
 * carries the external correlation id `id`); once they have run, mct_flush() and mct_take(id,
 * &ns) for each. By window (the recorder): mct_enable(MCT_WINDOWS) once; t0 = mct_now(), mct_arm(t0)
 * before the launch, t1 = mct_now() once its stream has synchronized, mct_flush(), then
 * mct_take_window(name, t0, t1, stream, &ns) finds the one record of that kernel that ran
 * between them. The tags need the
 * driver call's own record, which launches that the application's runtime submits do not always
 * get (H200, CUPTI 13.0: the recorded launch had one, its repeats through cudart none), so the
 * recorder, whose timed launch runs alone on the device, matches by name, time and stream.
 * A kernel record is joined to its id through the correlation id of the launch's driver call:
 * CUPTI writes an EXTERNAL_CORRELATION record (id -> correlation id) when the call is made and
 * a CONCURRENT_KERNEL record (correlation id -> start, end) once the kernel has run, each into
 * whichever buffer is current, in either order. A kernel record whose correlation record has not
 * come yet waits (the last MCT_UNMATCHED of them, oldest out first: most are other kernels'),
 * and mct_forget() clears the tables once a batch is read. In window mode only records that
 * started after mct_arm()'s time are kept. Latency timestamps stay off (they cost every launch).
 *
 * Thread safety: CUPTI completes buffers on a thread of its own; the tables are guarded by one
 * mutex. Every function returns at once when the timer is not open.
 */
#ifndef MNEME_CUPTI_TIMER_H
#define MNEME_CUPTI_TIMER_H

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MCT_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 /* ours; CUSTOM0/1 are the usual picks of others */
#define MCT_BUFFER (1u << 20)
#define MCT_UNMATCHED 4096 /* kernel records kept while waiting for their correlation record */
enum { MCT_OFF = 0, MCT_TAGS = 1, MCT_WINDOWS = 2 }; /* mct_enable's modes */

typedef struct {
    uint64_t key;   /* a correlation id, or (in `done`) an external id */
    uint64_t value; /* an external id, or end - start in ns */
} mct_pair;

typedef struct {
    mct_pair *items;
    size_t count, cap;
} mct_table;

typedef struct {
    uint64_t name_hash, start, end;
    uint32_t stream;
} mct_run; /* a kernel record, for mct_take_window */

#define MCT_RUNS 1024 /* the last kernel records, a ring */

static pthread_mutex_t mct_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int open;
    char why[256];
    mct_table ids;     /* correlation -> external id, waiting for the kernel record */
    mct_table kernels; /* correlation -> duration, waiting for the correlation record */
    mct_table done;    /* external id -> duration, waiting for mct_take */
    uint64_t kernels_seen, ids_seen; /* records delivered: kernels (any), correlations (ours) */
    int windows;                     /* keep the last kernel records in `runs` (MCT_WINDOWS) */
    uint64_t armed;                  /* window mode: keep only records that started at or after this */
    mct_run runs[MCT_RUNS];
    uint64_t runs_next;
    __typeof__(&cuptiGetTimestamp) timestamp;
    __typeof__(&cuptiGetStreamIdEx) stream_id;
    int debug;                       /* MNEME_CUPTI_DEBUG=1: every record and lookup on stderr */
    __typeof__(&cuptiActivityEnable) enable;
    __typeof__(&cuptiActivityDisable) disable;
    __typeof__(&cuptiActivityFlushAll) flush;
    __typeof__(&cuptiActivityGetNextRecord) next;
    __typeof__(&cuptiActivityPushExternalCorrelationId) push;
    __typeof__(&cuptiActivityPopExternalCorrelationId) pop;
    __typeof__(&cuptiActivityGetNumDroppedRecords) dropped_records;
} mct;

static void mct_put(mct_table *t, uint64_t key, uint64_t value) {
    if (t->count == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        mct_pair *grown = (mct_pair *)realloc(t->items, cap * sizeof(mct_pair));
        if (!grown) return; /* that launch goes untimed */
        t->items = grown;
        t->cap = cap;
    }
    t->items[t->count].key = key;
    t->items[t->count].value = value;
    t->count++;
}

/* Remove the entry with this key, keeping the others in arrival order; its value into *value. */
static int mct_pull(mct_table *t, uint64_t key, uint64_t *value) {
    for (size_t i = 0; i < t->count; ++i) {
        if (t->items[i].key != key) continue;
        *value = t->items[i].value;
        memmove(&t->items[i], &t->items[i + 1], (t->count - i - 1) * sizeof(mct_pair));
        t->count--;
        return 1;
    }
    return 0;
}

static uint64_t mct_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void CUPTIAPI mct_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(8, MCT_BUFFER);
    *size = *buffer ? MCT_BUFFER : 0;
    *max_records = 0;
}

static void CUPTIAPI mct_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *record = NULL;
    pthread_mutex_lock(&mct_mu);
    while (mct.next(buffer, valid, &record) == CUPTI_SUCCESS) {
        uint64_t other;
        if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
            const CUpti_ActivityExternalCorrelation *c = (const CUpti_ActivityExternalCorrelation *)record;
            if (mct.debug)
                fprintf(stderr, "mct: correlation kind %d ext %llu corr %u\n", (int)c->externalKind,
                        (unsigned long long)c->externalId, c->correlationId);
            if (c->externalKind != MCT_KIND) continue;
            mct.ids_seen++;
            if (mct_pull(&mct.kernels, c->correlationId, &other))
                mct_put(&mct.done, c->externalId, other);
            else
                mct_put(&mct.ids, c->correlationId, c->externalId);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_DRIVER && mct.debug) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)record;
            fprintf(stderr, "mct: api cbid %u corr %u thread %u\n", (unsigned)a->cbid, a->correlationId, a->threadId);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
            mct.kernels_seen++;
            if (mct.debug)
                fprintf(stderr, "mct: kernel corr %u %llu ns %s\n", k->correlationId,
                        (unsigned long long)(k->end - k->start), k->name ? k->name : "?");
            if (k->end <= k->start) continue; /* no timestamps (a failed launch) */
            uint64_t ns = k->end - k->start;
            if (mct.windows) {
                if (k->start < mct.armed) continue; /* before the timed launch: another kernel's */
                mct_run *run = &mct.runs[mct.runs_next++ % MCT_RUNS];
                run->name_hash = mct_hash(k->name);
                run->start = k->start;
                run->end = k->end;
                run->stream = k->streamId;
                continue;
            }
            if (mct_pull(&mct.ids, k->correlationId, &other)) {
                mct_put(&mct.done, other, ns);
            } else { /* its correlation record may be in a later buffer: kept, the oldest making room */
                if (mct.kernels.count >= MCT_UNMATCHED) {
                    memmove(&mct.kernels.items[0], &mct.kernels.items[1], (MCT_UNMATCHED - 1) * sizeof(mct_pair));
                    mct.kernels.count--;
                }
                mct_put(&mct.kernels, k->correlationId, ns);
            }
        }
    }
    pthread_mutex_unlock(&mct_mu);
    free(buffer);
}

/* Open libcupti (`library`, or the loader's search for libcupti.so.13 and libcupti.so when NULL or
 * empty) and register the buffers; 0 on success, else -1 and mct_why() says why. Once only. */
static int mct_open(const char *library) {
    if (mct.open) return 0;
    if (mct.why[0]) return -1;
    char versioned[32];
    snprintf(versioned, sizeof versioned, "libcupti.so.%d", (int)(CUPTI_API_VERSION / 10000));
    const char *names[] = {library, versioned, "libcupti.so"};
    void *h = NULL;
    const char *tried = "";
    for (size_t i = library && *library ? 0 : 1; i < 3 && !h; ++i) {
        tried = names[i];
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (library && *library) break; /* an explicit library or nothing */
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(mct.why, sizeof mct.why, "cannot open %s (%s)", tried, e ? e : "not found");
        return -1;
    }
    __typeof__(&cuptiGetVersion) version = (__typeof__(&cuptiGetVersion))dlsym(h, "cuptiGetVersion");
    __typeof__(&cuptiActivityRegisterCallbacks) reg =
        (__typeof__(&cuptiActivityRegisterCallbacks))dlsym(h, "cuptiActivityRegisterCallbacks");
    mct.enable = (__typeof__(&cuptiActivityEnable))dlsym(h, "cuptiActivityEnable");
    mct.disable = (__typeof__(&cuptiActivityDisable))dlsym(h, "cuptiActivityDisable");
    mct.flush = (__typeof__(&cuptiActivityFlushAll))dlsym(h, "cuptiActivityFlushAll");
    mct.next = (__typeof__(&cuptiActivityGetNextRecord))dlsym(h, "cuptiActivityGetNextRecord");
    mct.push = (__typeof__(&cuptiActivityPushExternalCorrelationId))dlsym(h, "cuptiActivityPushExternalCorrelationId");
    mct.pop = (__typeof__(&cuptiActivityPopExternalCorrelationId))dlsym(h, "cuptiActivityPopExternalCorrelationId");
    mct.dropped_records = (__typeof__(&cuptiActivityGetNumDroppedRecords))dlsym(h, "cuptiActivityGetNumDroppedRecords");
    mct.timestamp = (__typeof__(&cuptiGetTimestamp))dlsym(h, "cuptiGetTimestamp");
    mct.stream_id = (__typeof__(&cuptiGetStreamIdEx))dlsym(h, "cuptiGetStreamIdEx");
    if (!version || !reg || !mct.enable || !mct.disable || !mct.flush || !mct.next || !mct.push || !mct.pop ||
        !mct.timestamp) {
        snprintf(mct.why, sizeof mct.why, "%s lacks the activity API", tried);
        return -1;
    }
    uint32_t v = 0;
    /* The records are read with this header's layout: the library must be of its major version and
     * at least its minor one (a record struct only ever grows within a major version). */
    if (version(&v) != CUPTI_SUCCESS || v / 10000 != CUPTI_API_VERSION / 10000 || v < CUPTI_API_VERSION) {
        snprintf(mct.why, sizeof mct.why, "%s has CUPTI API version %u; this build reads version %u records", tried,
                 v, (unsigned)CUPTI_API_VERSION);
        return -1;
    }
    CUptiResult r = reg(mct_requested, mct_completed);
    if (r != CUPTI_SUCCESS) {
        snprintf(mct.why, sizeof mct.why, "CUPTI refused the activity buffers (error %d; is a profiler attached?)",
                 (int)r);
        return -1;
    }
    const char *debug = getenv("MNEME_CUPTI_DEBUG");
    mct.debug = debug && strcmp(debug, "1") == 0;
    mct.open = 1;
    return 0;
}

static const char *mct_why(void) { return mct.why; }

/* Turn the kernel records on for MCT_TAGS or MCT_WINDOWS, or MCT_OFF; 0 on success. For tags
 * the driver API's records come too: CUPTI writes a correlation record only beside the record
 * of the driver call (H200, CUPTI 13.0: without them no correlation record ever came). Turned
 * off and on again, the records of later launches did not come (ibid.): turn them on once. */
static int mct_enable(int mode) {
    if (!mct.open) return -1;
    CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_DRIVER,
                                  CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    if (mode != MCT_OFF) {
        pthread_mutex_lock(&mct_mu);
        mct.windows = mode == MCT_WINDOWS;
        pthread_mutex_unlock(&mct_mu);
    }
    for (size_t i = 0; i < (mct.windows ? 1u : 3u); ++i) {
        CUptiResult r = mode != MCT_OFF ? mct.enable(kinds[i]) : mct.disable(kinds[i]);
        if (r != CUPTI_SUCCESS) {
            snprintf(mct.why, sizeof mct.why, "cuptiActivity%s(%d) failed with error %d",
                     mode != MCT_OFF ? "Enable" : "Disable", (int)kinds[i], (int)r);
            return -1;
        }
    }
    return 0;
}

static int mct_push(uint64_t id) {
    if (mct.debug) fprintf(stderr, "mct: push %llu\n", (unsigned long long)id);
    return mct.open && mct.push(MCT_KIND, id) == CUPTI_SUCCESS ? 0 : -1;
}

static int mct_pop(void) {
    uint64_t last = 0;
    return mct.open && mct.pop(MCT_KIND, &last) == CUPTI_SUCCESS ? 0 : -1;
}

/* Deliver every record so far, partly filled buffers too; 0 on success. */
static int mct_flush(void) { return mct.open && mct.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS ? 0 : -1; }

/* The kernel time of the launch tagged `id` into *ns, and forget it: 1, or 0 when it has none (yet). */
static int mct_take(uint64_t id, uint64_t *ns) {
    pthread_mutex_lock(&mct_mu);
    int found = mct_pull(&mct.done, id, ns);
    if (mct.debug) fprintf(stderr, "mct: take %llu: %s\n", (unsigned long long)id, found ? "found" : "none");
    pthread_mutex_unlock(&mct_mu);
    return found;
}

/* CUPTI's clock, the one of the kernel records' timestamps (0 when not open). */
static uint64_t mct_now(void) {
    uint64_t t = 0;
    if (mct.open) mct.timestamp(&t);
    return t;
}

/* Window mode: from now on keep only kernel records that started at or after `from`. */
static void mct_arm(uint64_t from) {
    pthread_mutex_lock(&mct_mu);
    mct.armed = from;
    pthread_mutex_unlock(&mct_mu);
}

/* CUPTI's id of `stream` in `ctx` (per_thread: the per-thread default stream), into *id; 0 on success. */
static int mct_stream(CUcontext ctx, CUstream stream, int per_thread, uint32_t *id) {
    return mct.open && mct.stream_id && mct.stream_id(ctx, stream, (uint8_t)per_thread, id) == CUPTI_SUCCESS ? 0 : -1;
}

/* The one record of kernel `name` (mangled) that started at or after `from` and ended by `to`,
 * on CUPTI stream `stream` unless it is ~0u: 1 and its duration into *ns; 0 none; -1 several. */
static int mct_take_window(const char *name, uint64_t from, uint64_t to, uint32_t stream, uint64_t *ns) {
    uint64_t h = mct_hash(name);
    int found = 0;
    pthread_mutex_lock(&mct_mu);
    uint64_t first = mct.runs_next > MCT_RUNS ? mct.runs_next - MCT_RUNS : 0;
    for (uint64_t i = first; i < mct.runs_next; ++i) {
        const mct_run *run = &mct.runs[i % MCT_RUNS];
        if (run->name_hash != h || run->start < from || run->end > to || (stream != ~0u && run->stream != stream))
            continue;
        *ns = run->end - run->start;
        found++;
    }
    pthread_mutex_unlock(&mct_mu);
    if (mct.debug) fprintf(stderr, "mct: window %s %llu..%llu: %d\n", name, (unsigned long long)from,
                           (unsigned long long)to, found);
    return found > 1 ? -1 : found;
}

/* How many kernel records window mode has kept so far (the ring's count): with mct_take_since, the records that
 * came after a point, whatever their timestamps say. */
static uint64_t mct_seq(void) {
    pthread_mutex_lock(&mct_mu);
    uint64_t n = mct.runs_next;
    pthread_mutex_unlock(&mct_mu);
    return n;
}

/* The records of kernel `name` kept since mct_seq() gave `seq`: how many, and the duration, start and end of the
 * one that ended last (the latest launch's; the GPU's timestamps order its own records) into *ns, *start, *end. */
static int mct_take_since(const char *name, uint64_t seq, uint64_t *ns, uint64_t *start, uint64_t *end) {
    uint64_t h = mct_hash(name);
    int found = 0;
    pthread_mutex_lock(&mct_mu);
    uint64_t first = mct.runs_next > MCT_RUNS && seq < mct.runs_next - MCT_RUNS ? mct.runs_next - MCT_RUNS : seq;
    for (uint64_t i = first; i < mct.runs_next; ++i) {
        const mct_run *run = &mct.runs[i % MCT_RUNS];
        if (run->name_hash != h) continue;
        if (found++ && run->end <= *end) continue; /* an earlier-ending record of the name: keep the latest */
        *ns = run->end - run->start;
        *start = run->start;
        *end = run->end;
    }
    pthread_mutex_unlock(&mct_mu);
    return found;
}

/* Forget every waiting record (after a batch whose launches did not all run). */
static void mct_forget(void) {
    pthread_mutex_lock(&mct_mu);
    mct.ids.count = mct.kernels.count = mct.done.count = 0;
    pthread_mutex_unlock(&mct_mu);
}

/* How many kernel records and correlation records of ours came so far. */
static void mct_seen(uint64_t *kernels, uint64_t *ids) {
    pthread_mutex_lock(&mct_mu);
    *kernels = mct.kernels_seen;
    *ids = mct.ids_seen;
    pthread_mutex_unlock(&mct_mu);
}

/* Records CUPTI dropped for want of buffer space, over all contexts (0 when it cannot say). */
static uint64_t mct_dropped(void) {
    size_t n = 0;
    if (mct.open && mct.dropped_records && mct.dropped_records(NULL, 0, &n) == CUPTI_SUCCESS) return n;
    return 0;
}

#endif
