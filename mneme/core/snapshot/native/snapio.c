/* snapio: decode the chunks of a Mneme snapshot file (docs/formats.md) on several threads.
 *
 * One call decodes a table of chunks into caller-owned memory (pinned staging buffers):
 * raw chunks are read in pieces that are hashed right after each read, while they are still
 * in cache; zstd, LZ4 (plain or of byte-shuffled data) and diff chunks are read whole, hashed
 * and decoded in place. Errors are reported per chunk, so the caller raises the same messages
 * as the Python reader. libzstd and liblz4 are opened at run time (dlopen): raw snapshots
 * decode on machines without them, and their chunks then report SNAPIO_NO_ZSTD / SNAPIO_NO_LZ4
 * for the caller to decode another way.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define EXPORT __attribute__((visibility("default")))

enum { ENC_RAW = 0, ENC_ZSTD = 1, ENC_DIFF = 2, ENC_SHUFFLE = 3, ENC_LZ4 = 4, ENC_LZ4_SHUFFLE = 5 };
enum {
    SNAPIO_OK = 0,
    SNAPIO_CHECKSUM = 1,     /* payload checksum mismatch */
    SNAPIO_TRUNCATED = 2,    /* the file ended inside the payload */
    SNAPIO_IO = 3,           /* read error; detail = errno */
    SNAPIO_ZSTD = 4,         /* zstd data does not decode; detail2 = libzstd's error name */
    SNAPIO_ZSTD_SIZE = 5,    /* zstd data decodes to detail bytes, expected detail2 */
    SNAPIO_SHUFFLE = 6,      /* shuffle element size detail is not 2, 4 or 8 */
    SNAPIO_DIFF_SHORT = 7,   /* diff chunk shorter than its header */
    SNAPIO_DIFF_TABLE = 8,   /* diff run table malformed */
    SNAPIO_DIFF_RUN = 9,     /* run (detail, detail2) out of order or outside the chunk */
    SNAPIO_DIFF_BASE = 10,   /* the base bytes' checksum differs from the recorded one */
    SNAPIO_DIFF_SIZE = 11,   /* diff holds detail bytes for runs of detail2 */
    SNAPIO_NO_ZSTD = 12,     /* libzstd.so.1 is not available */
    SNAPIO_ENCODING = 13,    /* unknown chunk encoding */
    SNAPIO_NOMEM = 14,
    SNAPIO_LZ4 = 15,         /* LZ4 data does not decode (malformed, or longer than expected) */
    SNAPIO_LZ4_SIZE = 16,    /* LZ4 data decodes to detail bytes, expected detail2 */
    SNAPIO_NO_LZ4 = 17,      /* liblz4.so.1 is not available */
    SNAPIO_ZSTD_FRAME = 18,  /* not one zstd frame spanning the body: detail = ZF_* kind, detail2 = its figure */
};
/* What is wrong with a zstd chunk's frame (SNAPIO_ZSTD_FRAME's detail); the Python reader checks the same. */
enum { ZF_MAGIC = 1, ZF_DECLARED = 2, ZF_TRAILING = 3, ZF_BAD = 4 };

/* One chunk to decode; the layout is mirrored by a ctypes Structure in snapio.py. */
typedef struct {
    uint64_t file_offset; /* where the CHNK payload (16-byte prefix included) starts */
    uint64_t stored;      /* payload bytes */
    uint64_t checksum;    /* XXH3-64 of the payload */
    uint64_t dest;        /* raw_length writable bytes */
    uint64_t base;        /* diff chunks: the base bytes; 0 when dest already holds them */
    uint32_t raw_length;
    uint32_t encoding;
    int32_t error;        /* out: SNAPIO_* */
    int32_t mode;         /* SNAPIO_DECODE, or SNAPIO_STORED: dest takes the payload as stored (checked) */
    uint64_t detail;      /* out: see the error codes */
    uint64_t detail2;
} snapio_chunk;

#define PREFIX 16
#define PIECE (512u << 10) /* raw reads: small enough to hash while in L2 */

/* -- libzstd, opened once at run time -------------------------------------------------- */
typedef void *(*zstd_create_fn)(void);
typedef size_t (*zstd_free_fn)(void *);
typedef size_t (*zstd_decompress_fn)(void *, void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);
typedef const char *(*zstd_error_name_fn)(size_t);
typedef size_t (*zstd_frame_size_fn)(const void *, size_t);
typedef unsigned long long (*zstd_content_size_fn)(const void *, size_t);

static struct {
    zstd_create_fn create;
    zstd_free_fn free;
    zstd_decompress_fn decompress;
    zstd_is_error_fn is_error;
    zstd_error_name_fn error_name;
    zstd_frame_size_fn frame_size;
    zstd_content_size_fn content_size;
    int ok;
} zstd;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static void zstd_open(void) {
    const char *names[] = {"libzstd.so.1", "libzstd.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) continue;
        zstd.create = (zstd_create_fn)dlsym(lib, "ZSTD_createDCtx");
        zstd.free = (zstd_free_fn)dlsym(lib, "ZSTD_freeDCtx");
        zstd.decompress = (zstd_decompress_fn)dlsym(lib, "ZSTD_decompressDCtx");
        zstd.is_error = (zstd_is_error_fn)dlsym(lib, "ZSTD_isError");
        zstd.error_name = (zstd_error_name_fn)dlsym(lib, "ZSTD_getErrorName");
        zstd.frame_size = (zstd_frame_size_fn)dlsym(lib, "ZSTD_findFrameCompressedSize");
        zstd.content_size = (zstd_content_size_fn)dlsym(lib, "ZSTD_getFrameContentSize");
        zstd.ok = zstd.create && zstd.free && zstd.decompress && zstd.is_error && zstd.error_name &&
                  zstd.frame_size && zstd.content_size;
        if (zstd.ok) return;
        dlclose(lib);
    }
}

EXPORT int snapio_has_zstd(void) {
    pthread_once(&zstd_once, zstd_open);
    return zstd.ok;
}

/* -- liblz4, opened once at run time ---------------------------------------------------- */
typedef int (*lz4_decompress_fn)(const char *, char *, int, int);

static struct {
    lz4_decompress_fn decompress;
    int ok;
} lz4;
static pthread_once_t lz4_once = PTHREAD_ONCE_INIT;

static void lz4_open(void) {
    const char *names[] = {"liblz4.so.1", "liblz4.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) continue;
        lz4.decompress = (lz4_decompress_fn)dlsym(lib, "LZ4_decompress_safe");
        lz4.ok = lz4.decompress != NULL;
        if (lz4.ok) return;
        dlclose(lib);
    }
}

EXPORT int snapio_has_lz4(void) {
    pthread_once(&lz4_once, lz4_open);
    return lz4.ok;
}

enum { SNAPIO_DECODE = 0, SNAPIO_STORED = 1 };

EXPORT int snapio_abi(void) { return 4; }

/* -- per-thread scratch, kept across calls (fresh memory is slow to fault in on a VM) --- */
typedef struct {
    void *dctx;
    uint8_t *payload, *plain;
    size_t payload_cap, plain_cap;
} scratch;

/* A submitted table of chunks; owned by the caller's handle until snapio_wait frees it. */
typedef struct batch {
    int fd;
    snapio_chunk *chunks;
    size_t n, next, done;
    int failed;
    struct batch *link; /* the queue of batches with chunks not yet taken */
} batch;

/* Persistent workers pull chunks from the queue in submission order, so the next staging
 * fill starts decoding while the last chunks of this one finish (no barrier per fill). */
typedef struct {
    int threads, started, stop;
    scratch *slots;
    pthread_t *ids;
    pthread_mutex_t mu;
    pthread_cond_t work, finished;
    batch *head, *tail;
} snapio_pool;

typedef struct {
    snapio_pool *pool;
    int slot;
} worker_arg;

static int decode_chunk(int fd, scratch *s, snapio_chunk *c);

static void *worker(void *p) {
    snapio_pool *pool = ((worker_arg *)p)->pool;
    scratch *s = &pool->slots[((worker_arg *)p)->slot];
    free(p);
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && !pool->head) pthread_cond_wait(&pool->work, &pool->mu);
        if (pool->stop) break;
        batch *b = pool->head;
        snapio_chunk *c = &b->chunks[b->next++];
        if (b->next == b->n && !(pool->head = b->link)) pool->tail = NULL;
        pthread_mutex_unlock(&pool->mu);
        int failed = decode_chunk(b->fd, s, c) != SNAPIO_OK;
        pthread_mutex_lock(&pool->mu);
        b->failed += failed;
        if (++b->done == b->n) pthread_cond_broadcast(&pool->finished);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

EXPORT snapio_pool *snapio_create(int threads) {
    if (threads < 1) threads = 1;
    snapio_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->slots = calloc((size_t)threads, sizeof *pool->slots);
    pool->ids = calloc((size_t)threads, sizeof *pool->ids);
    if (!pool->slots || !pool->ids) {
        free(pool->slots);
        free(pool->ids);
        free(pool);
        return NULL;
    }
    pool->threads = threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->finished, NULL);
    return pool;
}

/* Stop the workers (after the chunks already taken) and free everything; no batch may be pending. */
EXPORT void snapio_destroy(snapio_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->started; i++) pthread_join(pool->ids[i], NULL);
    for (int i = 0; i < pool->threads; i++) {
        scratch *s = &pool->slots[i];
        if (s->dctx) zstd.free(s->dctx);
        free(s->payload);
        free(s->plain);
    }
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->finished);
    free(pool->slots);
    free(pool->ids);
    free(pool);
}

/* Queue n chunks of fd for decoding; the table must stay alive until snapio_wait. NULL: out of memory. */
EXPORT batch *snapio_submit(snapio_pool *pool, int fd, snapio_chunk *chunks, size_t n) {
    batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->fd = fd;
    b->chunks = chunks;
    b->n = n;
    pthread_mutex_lock(&pool->mu);
    while (pool->started < pool->threads) { /* started on first use: a pool that never decodes costs no threads */
        worker_arg *arg = malloc(sizeof *arg);
        if (!arg) break;
        *arg = (worker_arg){pool, pool->started};
        if (pthread_create(&pool->ids[pool->started], NULL, worker, arg)) {
            free(arg);
            break;
        }
        pool->started++;
    }
    if (n) {
        if (pool->tail) pool->tail->link = b;
        else pool->head = b;
        pool->tail = b;
        pthread_cond_broadcast(&pool->work);
    }
    pthread_mutex_unlock(&pool->mu);
    if (n && pool->started == 0) { /* no thread could start: decode here */
        pthread_mutex_lock(&pool->mu);
        pool->head = pool->tail = NULL;
        pthread_mutex_unlock(&pool->mu);
        for (size_t i = 0; i < n; i++) b->failed += decode_chunk(fd, &pool->slots[0], &chunks[i]) != SNAPIO_OK;
        b->next = b->done = n;
    }
    return b;
}

/* Wait until every chunk of the batch is decoded, free it, and return how many failed. */
EXPORT int snapio_wait(snapio_pool *pool, batch *b) {
    pthread_mutex_lock(&pool->mu);
    while (b->done < b->n) pthread_cond_wait(&pool->finished, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    int failed = b->failed;
    free(b);
    return failed;
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (*cap >= need) return 1;
    uint8_t *p = realloc(*buf, need);
    if (!p) return 0;
    *buf = p;
    *cap = need;
    return 1;
}

/* Read exactly len bytes at off; 0, SNAPIO_TRUNCATED or SNAPIO_IO (errno in *err). */
static int read_at(int fd, uint8_t *dst, size_t len, uint64_t off, uint64_t *err) {
    while (len) {
        ssize_t got = pread(fd, dst, len, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            *err = (uint64_t)errno;
            return SNAPIO_IO;
        }
        if (got == 0) return SNAPIO_TRUNCATED;
        dst += got;
        off += (uint64_t)got;
        len -= (size_t)got;
    }
    return SNAPIO_OK;
}

static int fail(snapio_chunk *c, int error, uint64_t detail, uint64_t detail2) {
    c->error = error;
    c->detail = detail;
    c->detail2 = detail2;
    return error;
}

/* Read n bytes at off into dst in PIECEs, hashing each while it is in cache. */
static int read_hashed(int fd, snapio_chunk *c, uint8_t *dst, uint64_t n, uint64_t off, XXH3_state_t *state) {
    uint64_t err = 0;
    for (uint64_t done = 0; done < n; done += PIECE) {
        size_t len = n - done < PIECE ? (size_t)(n - done) : PIECE;
        int rc = read_at(fd, dst + done, len, off + done, &err);
        if (rc) return fail(c, rc, err, 0);
        XXH3_64bits_update(state, dst + done, len);
    }
    return SNAPIO_OK;
}

static int raw_chunk(int fd, snapio_chunk *c) {
    uint8_t prefix[PREFIX];
    if (c->stored < PREFIX || c->stored - PREFIX != c->raw_length) return fail(c, SNAPIO_CHECKSUM, 0, 0);
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    int rc = read_hashed(fd, c, prefix, PREFIX, c->file_offset, &state);
    if (!rc) rc = read_hashed(fd, c, (uint8_t *)(uintptr_t)c->dest, c->raw_length, c->file_offset + PREFIX, &state);
    if (rc) return rc;
    if (XXH3_64bits_digest(&state) != c->checksum) return fail(c, SNAPIO_CHECKSUM, 0, 0);
    return SNAPIO_OK;
}

/* The whole payload (prefix and body, `stored` bytes) into dest as it is in the file, hashed
 * piece by piece while in cache: for a device that decodes the chunk itself. */
static int stored_chunk(int fd, snapio_chunk *c) {
    if (c->stored < PREFIX) return fail(c, SNAPIO_CHECKSUM, 0, 0);
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    int rc = read_hashed(fd, c, (uint8_t *)(uintptr_t)c->dest, c->stored, c->file_offset, &state);
    if (rc) return rc;
    if (XXH3_64bits_digest(&state) != c->checksum) return fail(c, SNAPIO_CHECKSUM, 0, 0);
    return SNAPIO_OK;
}

/* Decompress one frame of exactly `want` bytes into dst. */
static int unzstd(scratch *s, snapio_chunk *c, uint8_t *dst, size_t want, const uint8_t *src, size_t len) {
    if (!snapio_has_zstd()) return fail(c, SNAPIO_NO_ZSTD, 0, 0);
    if (!s->dctx && !(s->dctx = zstd.create())) return fail(c, SNAPIO_NOMEM, 0, 0);
    /* Exactly one standard frame spanning the body, declaring (if anything) `want` bytes. */
    static const uint8_t magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (len < 6 || memcmp(src, magic, 4) != 0) return fail(c, SNAPIO_ZSTD_FRAME, ZF_MAGIC, 0);
    unsigned long long declared = zstd.content_size(src, len);
    if (declared == 0ULL - 2) return fail(c, SNAPIO_ZSTD_FRAME, ZF_BAD, 0);
    if (declared != 0ULL - 1 && declared != want) return fail(c, SNAPIO_ZSTD_FRAME, ZF_DECLARED, declared);
    size_t frame = zstd.frame_size(src, len);
    if (zstd.is_error(frame)) return fail(c, SNAPIO_ZSTD_FRAME, ZF_BAD, 0);
    if (frame != len) return fail(c, SNAPIO_ZSTD_FRAME, ZF_TRAILING, len - frame);
    size_t got = zstd.decompress(s->dctx, dst, want, src, len);
    if (zstd.is_error(got)) return fail(c, SNAPIO_ZSTD, 0, (uint64_t)(uintptr_t)zstd.error_name(got));
    if (got != want) return fail(c, SNAPIO_ZSTD_SIZE, got, want);
    return SNAPIO_OK;
}

/* Decode one LZ4 block of exactly `want` bytes into dst. */
static int unlz4(snapio_chunk *c, uint8_t *dst, size_t want, const uint8_t *src, size_t len) {
    if (!snapio_has_lz4()) return fail(c, SNAPIO_NO_LZ4, 0, 0);
    if (len == 0 || len > 0x7fffffff || want > 0x7fffffff) return fail(c, SNAPIO_LZ4, 0, 0);
    int got = lz4.decompress((const char *)src, (char *)dst, (int)len, (int)want);
    if (got < 0) return fail(c, SNAPIO_LZ4, 0, 0);
    if ((size_t)got != want) return fail(c, SNAPIO_LZ4_SIZE, (uint64_t)got, want);
    return SNAPIO_OK;
}

static void unshuffle(uint8_t *out, const uint8_t *planes, size_t n, unsigned k) {
    size_t count = n / k, whole = count * k;
    if (k == 4) {
        const uint8_t *p0 = planes, *p1 = p0 + count, *p2 = p1 + count, *p3 = p2 + count;
        for (size_t i = 0; i < count; i++) {
            out[4 * i] = p0[i];
            out[4 * i + 1] = p1[i];
            out[4 * i + 2] = p2[i];
            out[4 * i + 3] = p3[i];
        }
    } else {
        for (unsigned j = 0; j < k; j++)
            for (size_t i = 0; i < count; i++) out[i * k + j] = planes[j * count + i];
    }
    memcpy(out + whole, planes + whole, n - whole);
}

static uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t u64_at(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int diff_chunk(scratch *s, snapio_chunk *c, const uint8_t *body, size_t len) {
    uint8_t *dst = (uint8_t *)(uintptr_t)c->dest;
    if (len < 16) return fail(c, SNAPIO_DIFF_SHORT, 0, 0);
    uint64_t count = u32_at(body), packing = body[4], base_sum = u64_at(body + 8);
    uint64_t table_end = 16 + count * 8;
    if (len < table_end || packing > 1) return fail(c, SNAPIO_DIFF_TABLE, 0, 0);
    uint64_t end = 0, total = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t off = u32_at(body + 16 + 8 * i), n = u32_at(body + 20 + 8 * i);
        if (off < end || n == 0 || off + n > c->raw_length) return fail(c, SNAPIO_DIFF_RUN, off, n);
        end = off + n;
        total += n;
    }
    if (c->base && c->base != c->dest) memcpy(dst, (const void *)(uintptr_t)c->base, c->raw_length);
    if (XXH3_64bits(dst, c->raw_length) != base_sum) return fail(c, SNAPIO_DIFF_BASE, 0, 0);
    const uint8_t *xor = body + table_end;
    size_t stored = len - (size_t)table_end;
    if (packing == 1) {
        if (!grow(&s->plain, &s->plain_cap, total ? total : 1)) return fail(c, SNAPIO_NOMEM, 0, 0);
        int rc = unzstd(s, c, s->plain, total, xor, stored);
        if (rc) return rc;
        xor = s->plain;
    } else if (stored != total) {
        return fail(c, SNAPIO_DIFF_SIZE, stored, total);
    }
    const uint8_t *runs = body + 16;
    for (uint64_t i = 0, pos = 0; i < count; i++) {
        uint64_t off = u32_at(runs + 8 * i), n = u32_at(runs + 8 * i + 4);
        for (uint64_t b = 0; b < n; b++) dst[off + b] ^= xor[pos + b];
        pos += n;
    }
    return SNAPIO_OK;
}

static int decode_chunk(int fd, scratch *s, snapio_chunk *c) {
    c->error = SNAPIO_OK;
    if (c->mode == SNAPIO_STORED) return stored_chunk(fd, c);
    if (c->encoding == ENC_RAW) return raw_chunk(fd, c);
    if (c->encoding > ENC_LZ4_SHUFFLE) return fail(c, SNAPIO_ENCODING, c->encoding, 0);
    int lz = c->encoding == ENC_LZ4 || c->encoding == ENC_LZ4_SHUFFLE;
    if (lz && !snapio_has_lz4()) return fail(c, SNAPIO_NO_LZ4, 0, 0);
    if (!lz && c->encoding != ENC_DIFF && !snapio_has_zstd()) return fail(c, SNAPIO_NO_ZSTD, 0, 0);
    uint64_t err = 0;
    if (c->stored < PREFIX || !grow(&s->payload, &s->payload_cap, c->stored)) return fail(c, SNAPIO_NOMEM, 0, 0);
    int rc = read_at(fd, s->payload, c->stored, c->file_offset, &err);
    if (rc) return fail(c, rc, err, 0);
    if (XXH3_64bits(s->payload, c->stored) != c->checksum) return fail(c, SNAPIO_CHECKSUM, 0, 0);
    const uint8_t *body = s->payload + PREFIX;
    size_t len = c->stored - PREFIX;
    uint8_t *dst = (uint8_t *)(uintptr_t)c->dest;
    if (c->encoding == ENC_ZSTD) return unzstd(s, c, dst, c->raw_length, body, len);
    if (c->encoding == ENC_LZ4) return unlz4(c, dst, c->raw_length, body, len);
    if (c->encoding == ENC_DIFF) return diff_chunk(s, c, body, len);
    unsigned k = len >= 8 ? body[0] : 0; /* a body shorter than its header reads as element size 0 */
    if (k != 2 && k != 4 && k != 8) return fail(c, SNAPIO_SHUFFLE, k, 0);
    if (!grow(&s->plain, &s->plain_cap, c->raw_length ? c->raw_length : 1)) return fail(c, SNAPIO_NOMEM, 0, 0);
    if (lz) rc = unlz4(c, s->plain, c->raw_length, body + 8, len - 8);
    else rc = unzstd(s, c, s->plain, c->raw_length, body + 8, len - 8);
    if (rc) return rc;
    unshuffle(dst, s->plain, c->raw_length, k);
    return SNAPIO_OK;
}

/* Decode n chunks from fd on the pool's threads and wait; returns how many failed (-1: out of memory). */
EXPORT int snapio_decode(snapio_pool *pool, int fd, snapio_chunk *chunks, size_t n) {
    batch *b = snapio_submit(pool, fd, chunks, n);
    return b ? snapio_wait(pool, b) : -1;
}

/* -- a plain parallel read, no checks: the page-cache ceiling the restore is measured against -- */
typedef struct {
    int fd;
    uint8_t *dst;
    uint64_t offset, length, piece;
    atomic_uint_fast64_t next;
    atomic_int error;
} read_job;

static void *reader(void *p) {
    read_job *j = p;
    for (;;) {
        uint64_t at = atomic_fetch_add(&j->next, j->piece);
        if (at >= j->length) break;
        uint64_t n = j->length - at < j->piece ? j->length - at : j->piece, err = 0;
        int rc = read_at(j->fd, j->dst + at, (size_t)n, j->offset + at, &err);
        if (rc) atomic_store(&j->error, rc == SNAPIO_IO ? (int)err : -1);
    }
    return NULL;
}

/* Read [offset, offset + length) of fd into dst with `threads` threads in `piece`-byte reads; 0, errno or -1 (EOF). */
EXPORT int snapio_pread(int fd, uint64_t offset, uint64_t length, void *dst, int threads, uint64_t piece) {
    read_job j = {.fd = fd, .dst = dst, .offset = offset, .length = length, .piece = piece ? piece : (1u << 20)};
    atomic_init(&j.next, 0);
    atomic_init(&j.error, 0);
    if (threads < 1) threads = 1;
    pthread_t ids[threads];
    int started = 1;
    for (; started < threads; started++)
        if (pthread_create(&ids[started], NULL, reader, &j)) break;
    reader(&j);
    for (int t = 1; t < started; t++) pthread_join(ids[t], NULL);
    return atomic_load(&j.error);
}
