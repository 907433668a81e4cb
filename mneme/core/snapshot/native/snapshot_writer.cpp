// The native snapshot writer (snapshot_writer.h): docs/formats.md's snapshot format, byte by byte.

#include "snapshot_writer.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace mneme_snapshot {
namespace {

const uint32_t LZ4_VERSION = 2;  // the first format version with the LZ4 encodings
const size_t DIFF_GRANULARITY = 1024;  // bytes: the resolution of the changed-run map, as Mneme's writer
const uint8_t PACK_RAW = 0, PACK_ZSTD = 1;

void put32(std::string &s, uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); }
void put64(std::string &s, uint64_t v) { s.append(reinterpret_cast<const char *>(&v), 8); }
void put_string(std::string &s, const std::string &v) {
    put32(s, (uint32_t)v.size());
    s += v;
}

uint64_t checksum(const void *p, size_t n) { return XXH3_64bits(p, n); }

// ---- zstd, loaded at run time: the recorder links nothing the application might not have ----

struct Zstd {
    using bound_t = size_t (*)(size_t);
    using create_t = void *(*)();
    using free_t = size_t (*)(void *);
    using compress_t = size_t (*)(void *, void *, size_t, const void *, size_t, int);
    using is_error_t = unsigned (*)(size_t);
    bound_t bound = nullptr;
    create_t create = nullptr;
    free_t release = nullptr;
    compress_t compress = nullptr;
    is_error_t is_error = nullptr;
    bool ok = false;
};

const Zstd &zstd() {
    static Zstd *z = [] {
        auto *z = new Zstd();
        void *lib = getenv("MNEME_SNAPSHOT_NO_ZSTD") ? nullptr : dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            z->bound = reinterpret_cast<Zstd::bound_t>(dlsym(lib, "ZSTD_compressBound"));
            z->create = reinterpret_cast<Zstd::create_t>(dlsym(lib, "ZSTD_createCCtx"));
            z->release = reinterpret_cast<Zstd::free_t>(dlsym(lib, "ZSTD_freeCCtx"));
            z->compress = reinterpret_cast<Zstd::compress_t>(dlsym(lib, "ZSTD_compressCCtx"));
            z->is_error = reinterpret_cast<Zstd::is_error_t>(dlsym(lib, "ZSTD_isError"));
            z->ok = z->bound && z->create && z->release && z->compress && z->is_error;
        }
        return z;
    }();
    return *z;
}

// One zstd frame of `n` bytes (content size set), or "" when zstd is missing or fails.
std::string compress(const void *src, size_t n, int level) {
    const Zstd &z = zstd();
    if (!z.ok || n == 0) return "";
    thread_local void *cctx = nullptr;  // contexts are not thread-safe: one per worker thread
    if (!cctx) cctx = z.create();
    if (!cctx) return "";
    std::string out(z.bound(n), '\0');
    size_t got = z.compress(cctx, &out[0], out.size(), src, n, level);
    if (z.is_error(got)) return "";
    out.resize(got);
    return out;
}

// ---- LZ4, loaded at run time as zstd is -----------------------------------------------------

struct Lz4 {
    using bound_t = int (*)(int);
    using compress_t = int (*)(const char *, char *, int, int);
    bound_t bound = nullptr;
    compress_t compress = nullptr;
    bool ok = false;
};

const Lz4 &lz4() {
    static Lz4 *z = [] {
        auto *z = new Lz4();
        void *lib = getenv("MNEME_SNAPSHOT_NO_LZ4") ? nullptr : dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            z->bound = reinterpret_cast<Lz4::bound_t>(dlsym(lib, "LZ4_compressBound"));
            z->compress = reinterpret_cast<Lz4::compress_t>(dlsym(lib, "LZ4_compress_default"));
            z->ok = z->bound && z->compress;
        }
        return z;
    }();
    return *z;
}

const size_t LZ4_MAX_INPUT = 0x7E000000;

// One LZ4 block of `n` bytes (fast mode), or "" when LZ4 is missing, fails, or `n` is too large.
std::string compress_lz4(const void *src, size_t n) {
    const Lz4 &z = lz4();
    if (!z.ok || n == 0 || n > LZ4_MAX_INPUT) return "";
    std::string out((size_t)z.bound((int)n), '\0');
    int got = z.compress(static_cast<const char *>(src), &out[0], (int)n, (int)out.size());
    if (got <= 0) return "";
    out.resize((size_t)got);
    return out;
}

// Byte planes of `k`-byte elements, then the tail bytes unchanged (docs/formats.md, encoding 3).
std::string shuffle(const unsigned char *src, size_t n, size_t k) {
    std::string out(n, '\0');
    size_t count = n / k, m = count * k;
    for (size_t j = 0; j < k; ++j) {
        char *plane = &out[j * count];
        for (size_t i = 0; i < count; ++i) plane[i] = (char)src[i * k + j];
    }
    memcpy(&out[m], src + m, n - m);
    return out;
}

// ---- worker threads shared by every writer ---------------------------------------------------

struct Pool {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    int started = 0, wanted = 4;

    void submit(std::function<void()> job) {
        std::lock_guard<std::mutex> lock(mu);
        while (started < wanted) {
            std::thread([this] { work(); }).detach();
            ++started;
        }
        jobs.push_back(std::move(job));
        cv.notify_one();
    }

    void work() {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock<std::mutex> lock(mu);
                cv.wait(lock, [this] { return !jobs.empty(); });
                job = std::move(jobs.front());
                jobs.pop_front();
            }
            job();
        }
    }
};

Pool *pool_ptr = nullptr;

Pool &pool() {
    static std::once_flag once;
    std::call_once(once, [] {
        pool_ptr = new Pool();  // never destroyed: writers may run while static destructors do
        // A forked child has none of the parent's threads: it starts its own pool.
        pthread_atfork(nullptr, nullptr, [] { pool_ptr = new Pool(); });
    });
    return *pool_ptr;
}

std::string chunk_prefix(uint64_t offset, uint32_t n, uint8_t encoding) {
    std::string s;
    put64(s, offset);
    put32(s, n);
    s.push_back((char)encoding);
    s.append(3, '\0');
    return s;
}

std::string block_bytes(const char tag[4], uint32_t sequence, const std::string &payload) {
    std::string head(tag, 4);
    put32(head, sequence);
    put64(head, payload.size());
    put64(head, checksum(payload.data(), payload.size()));
    put64(head, checksum(head.data(), 24));
    return head + payload;
}

}  // namespace

bool zstd_available() { return zstd().ok; }
bool lz4_available() { return lz4().ok; }

void set_threads(int n) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    p.wanted = n < 1 ? 1 : n;
}

struct Writer::Region {
    uint64_t addr, size, chunk_size, num_chunks, next = 0;
    Encoding encoding;
    Codec codec;                  // the compressor of its whole chunks
    Policy policy;
    size_t element;               // shuffle element size: the dtype's, 4 for bytes
    bool best;
    uint64_t block_offset;        // where the REGN block starts, to relabel it
    uint32_t sequence;
    std::atomic<int> shuffle{-1};  // -1 undecided, 0 plain zstd, 1 byte-shuffled: decided on chunk 0
    std::atomic<uint64_t> whole{0};  // chunks of a diff region stored whole
};

namespace {

const size_t ITEMSIZE[] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8};

std::string regn_payload(uint64_t addr, uint64_t size, uint64_t chunk_size, uint64_t num_chunks, uint8_t encoding,
                         const Policy &p) {
    std::string s;
    put64(s, addr);
    put64(s, size);
    put64(s, chunk_size);
    put64(s, num_chunks);
    s.push_back((char)encoding);
    s.push_back((char)p.dtype);
    s.push_back((char)p.norm);
    s.push_back((char)(p.relative ? 1 : 0));
    s.append(4, '\0');
    double t = p.threshold;
    s.append(reinterpret_cast<const char *>(&t), 8);
    return s;
}

// The smallest whole encoding of one chunk: raw, or the codec's block of it or of its byte planes.
std::string encode_whole(uint64_t offset, const unsigned char *data, size_t n, size_t element,
                         std::atomic<int> &shuffle_choice, bool first, const Options &o) {
    std::string best = chunk_prefix(offset, (uint32_t)n, ENC_RAW);
    bool lz = o.codec == CODEC_LZ4;  // the region chose it only where liblz4 loaded
    if (!o.compress || !(lz ? lz4_available() : zstd_available()) || n == 0)
        return best.append(reinterpret_cast<const char *>(data), n);
    auto pack = [&](const void *src) { return lz ? compress_lz4(src, n) : compress(src, n, o.level); };
    int choice = shuffle_choice.load();
    std::string plain, planes;
    if (choice != 1) plain = pack(data);
    if (choice != 0 && element > 1 && n >= element) {
        std::string z = pack(shuffle(data, n, element).data());
        if (!z.empty()) {
            planes.push_back((char)element);
            planes.append(7, '\0');
            planes += z;
        }
    }
    if (first) shuffle_choice.store(!planes.empty() && (plain.empty() || planes.size() < plain.size()) ? 1 : 0);
    size_t raw_size = n;
    if (!plain.empty() && plain.size() < raw_size && (planes.empty() || plain.size() <= planes.size()))
        return chunk_prefix(offset, (uint32_t)n, lz ? ENC_LZ4 : ENC_ZSTD) + plain;
    if (!planes.empty() && planes.size() < raw_size)
        return chunk_prefix(offset, (uint32_t)n, lz ? ENC_LZ4_SHUFFLE : ENC_SHUFFLE) + planes;
    return best.append(reinterpret_cast<const char *>(data), n);
}

// A diff chunk (changed 1 KiB runs XOR-ed against the prologue), or the chunk whole when more
// than half of it changed.
std::string encode_diff(uint64_t offset, const unsigned char *data, const unsigned char *base, size_t n,
                        size_t element, std::atomic<int> &shuffle_choice, bool first, const Options &o,
                        std::atomic<uint64_t> &whole) {
    std::vector<std::pair<uint32_t, uint32_t>> runs;
    size_t changed = 0;
    for (size_t at = 0; at < n; at += DIFF_GRANULARITY) {
        size_t len = std::min(DIFF_GRANULARITY, n - at);
        if (memcmp(data + at, base + at, len) == 0) continue;
        if (!runs.empty() && runs.back().first + runs.back().second == at)
            runs.back().second += (uint32_t)len;
        else
            runs.emplace_back((uint32_t)at, (uint32_t)len);
        changed += len;
    }
    if (changed * 2 > n) {
        whole.fetch_add(1);
        return encode_whole(offset, data, n, element, shuffle_choice, first, o);
    }
    std::string xored;
    xored.reserve(changed);
    for (auto &r : runs)
        for (uint32_t i = 0; i < r.second; ++i) xored.push_back((char)(data[r.first + i] ^ base[r.first + i]));
    uint8_t packing = PACK_RAW;
    if (o.compress && !xored.empty()) {  // the XOR bytes are packed with zstd (the format has no LZ4 packing)
        std::string z = compress(xored.data(), xored.size(), o.level);
        if (!z.empty() && z.size() < xored.size()) {
            packing = PACK_ZSTD;
            xored.swap(z);
        }
    }
    std::string s = chunk_prefix(offset, (uint32_t)n, ENC_DIFF);
    put32(s, (uint32_t)runs.size());
    s.push_back((char)packing);
    s.append(3, '\0');
    put64(s, checksum(base, n));
    for (auto &r : runs) {
        put32(s, r.first);
        put32(s, r.second);
    }
    return s + xored;
}

}  // namespace

Writer::Writer(std::string path, int kind, Options options)
    : path_(std::move(path)), kind_(kind), options_(options) {}

Writer::~Writer() {
    if (!finished_) abort();
}

int Writer::fail(int err) {
    if (!error_) error_ = err ? err : EIO;
    abort();
    return error_;
}

void Writer::abort() {
    for (auto &f : pending_)
        if (f.valid()) f.wait();  // workers still read the job's own copy only; wait, then drop
    pending_.clear();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (!tmp_.empty()) unlink(tmp_.c_str());
    tmp_.clear();
    finished_ = true;
}

int Writer::write_all(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return fail(errno);
        }
        if (w == 0) return fail(EIO);
        p += w;
        n -= (size_t)w;
        offset_ += (uint64_t)w;
    }
    return 0;
}

int Writer::block(const char tag[4], const std::string &payload) {
    if (error_) return error_;
    std::string b = block_bytes(tag, sequence_++, payload);
    return write_all(b.data(), b.size());
}

int Writer::open(const std::string &static_hash, const std::string &dynamic_hash, const std::string &producer,
                 const uint8_t *base_id) {
    if (fd_ >= 0 || finished_) return fail(EINVAL);
    if (getrandom(id_, sizeof id_, 0) != (ssize_t)sizeof id_) {  // no entropy source: time, pid and address
        uint64_t a = (uint64_t)time(nullptr) ^ ((uint64_t)getpid() << 32), b = (uint64_t)(uintptr_t)this;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        b ^= (uint64_t)ts.tv_nsec;
        a = XXH3_64bits_withSeed(&b, 8, a);
        memcpy(id_, &a, 8);
        memcpy(id_ + 8, &b, 8);
    }
    size_t slash = path_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
    std::string name = slash == std::string::npos ? path_ : path_.substr(slash + 1);
    char suffix[64];
    uint32_t r;
    memcpy(&r, id_, 4);
    snprintf(suffix, sizeof suffix, ".%d.%08x.tmp", (int)getpid(), r);
    tmp_ = dir + "/." + name + suffix;
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        int err = errno;
        tmp_.clear();
        return fail(err);
    }
    std::string head("MNEMESNP", 8);
    put32(head, version_);
    put32(head, 64);
    head.push_back((char)kind_);
    head.append(3, '\0');
    put32(head, 0);
    head.append(reinterpret_cast<const char *>(id_), 16);
    if (base_id)
        head.append(reinterpret_cast<const char *>(base_id), 16);
    else
        head.append(16, '\0');
    put64(head, checksum(head.data(), 56));
    header_ = head;
    if (write_all(head.data(), head.size())) return error_;
    std::string meta;
    put_string(meta, static_hash);
    put_string(meta, dynamic_hash);
    put_string(meta, producer);
    return block("META", meta);
}

int Writer::args(const void *buffer, size_t size, const std::vector<std::pair<uint32_t, uint32_t>> &layout) {
    if (fd_ < 0 || region_) return fail(EINVAL);
    std::string s;
    put32(s, (uint32_t)layout.size());
    put32(s, 0);
    for (auto &p : layout) {
        if ((uint64_t)p.first + p.second > size) return fail(EINVAL);
        put32(s, p.first);
        put32(s, p.second);
    }
    put64(s, size);
    s.append(static_cast<const char *>(buffer), size);
    return block("ARGS", s);
}

int Writer::begin_region(uint64_t addr, uint64_t size, Encoding encoding, const Policy &policy, bool best) {
    if (fd_ < 0 || region_ || error_) return error_ ? error_ : fail(EINVAL);
    if (policy.dtype > 11 || policy.norm > 3 || (encoding == ENC_DIFF && kind_ != 1) || encoding == ENC_SHUFFLE ||
        encoding > ENC_LZ4)
        return fail(EINVAL);
    // The codec of this region's whole chunks: LZ4 when asked for (ENC_LZ4, or CODEC_LZ4) and loaded.
    bool lz = (encoding == ENC_LZ4 || (encoding != ENC_RAW && options_.codec == CODEC_LZ4)) && lz4_available() &&
              options_.compress;
    if (encoding == ENC_ZSTD || encoding == ENC_LZ4) encoding = lz ? ENC_LZ4 : ENC_ZSTD;
    uint64_t cs = encoding == ENC_LZ4 && options_.lz4_chunk_size ? options_.lz4_chunk_size : options_.chunk_size;
    if (cs < 8 || cs % 8 || cs > (1ull << 32) - 8) return fail(EINVAL);
    if (lz) version_ = LZ4_VERSION;
    auto r = std::make_shared<Region>();
    r->addr = addr;
    r->size = size;
    r->chunk_size = cs;
    r->num_chunks = (size + cs - 1) / cs;
    r->encoding = encoding;
    r->codec = lz ? CODEC_LZ4 : CODEC_ZSTD;
    r->policy = policy;
    r->element = ITEMSIZE[policy.dtype] > 1 ? ITEMSIZE[policy.dtype] : 4;
    r->best = best && encoding == ENC_DIFF;
    r->block_offset = offset_;
    r->sequence = sequence_;
    if (block("REGN", regn_payload(addr, size, cs, r->num_chunks, encoding, policy))) return error_;
    region_ = r;
    ++regions_;
    return 0;
}

int Writer::chunk(const void *data, size_t n, const void *base) {
    if (!region_ || error_) return error_ ? error_ : fail(EINVAL);
    Region &r = *region_;
    uint64_t left = r.size - std::min(r.size, r.next * r.chunk_size);
    if (n == 0 || n > left || (n < left && n % r.chunk_size) || (r.encoding == ENC_DIFF && !base))
        return fail(EINVAL);
    const char *d = static_cast<const char *>(data), *b = static_cast<const char *>(base);
    for (size_t off = 0; off < n; off += r.chunk_size) {
        size_t len = (size_t)std::min<uint64_t>(r.chunk_size, n - off);
        if (int e = one_chunk(d + off, len, b ? b + off : nullptr)) return e;
    }
    return 0;
}

int Writer::one_chunk(const char *data, size_t n, const char *base) {
    Region &r = *region_;
    uint64_t offset = r.next * r.chunk_size;
    bool first = r.next == 0;
    ++r.next;
    chunk_bytes_ += n;
    uint32_t sequence = sequence_++;
    // The job owns copies: the caller reuses its (staging) buffers as soon as this returns.
    auto own = std::make_shared<std::string>(data, n);
    auto own_base = std::make_shared<std::string>();
    if (r.encoding == ENC_DIFF) own_base->assign(base, n);
    std::shared_ptr<Region> region = region_;
    Options o = options_;
    o.codec = r.codec;
    if (r.encoding == ENC_RAW) o.compress = false;
    auto task = std::make_shared<std::packaged_task<std::string()>>([=] {
        const unsigned char *d = reinterpret_cast<const unsigned char *>(own->data());
        std::string payload =
            region->encoding == ENC_DIFF
                ? encode_diff(offset, d, reinterpret_cast<const unsigned char *>(own_base->data()), n,
                              region->element, region->shuffle, first, o, region->whole)
                : encode_whole(offset, d, n, region->element, region->shuffle, first, o);
        return block_bytes("CHNK", sequence, payload);
    });
    pending_.push_back(task->get_future());
    pool().submit([task] { (*task)(); });
    int depth;
    {
        Pool &p = pool();
        std::lock_guard<std::mutex> lock(p.mu);
        depth = p.wanted + 2;  // bounded: each job holds a copy of its chunk (and of its base)
    }
    return drain((size_t)depth);
}

int Writer::drain(size_t keep) {
    while (pending_.size() > keep) {
        std::string b = pending_.front().get();
        pending_.pop_front();
        if (error_) continue;
        if (write_all(b.data(), b.size())) return error_;
    }
    return error_;
}

int Writer::end_region() {
    if (!region_ || error_) return error_ ? error_ : fail(EINVAL);
    Region &r = *region_;
    if (r.next != r.num_chunks) return fail(EINVAL);
    if (drain(0)) return error_;
    if (r.best && r.num_chunks && r.whole.load() == r.num_chunks) {
        // Every chunk was stored whole: say so in the REGN block (same size, same sequence number).
        std::string b = block_bytes("REGN", r.sequence,
                                    regn_payload(r.addr, r.size, r.chunk_size, r.num_chunks,
                                                 r.codec == CODEC_LZ4 ? ENC_LZ4 : ENC_ZSTD, r.policy));
        if (pwrite(fd_, b.data(), b.size(), (off_t)r.block_offset) != (ssize_t)b.size()) return fail(errno);
    }
    region_.reset();
    return 0;
}

int Writer::global(const std::string &name, const void *data, size_t n) {
    if (fd_ < 0 || region_ || name.empty()) return error_ ? error_ : fail(EINVAL);
    std::string s;
    put_string(s, name);
    s.append(static_cast<const char *>(data), n);
    ++globals_;
    return block("GLOB", s);
}

int Writer::finish() {
    if (error_) return error_;
    if (fd_ < 0 || region_) return fail(EINVAL);
    std::string end;
    put64(end, sequence_);
    put64(end, regions_);
    put64(end, globals_);
    if (block("END ", end)) return error_;
    if (version_ != 1) {  // the header was written as version 1; this file holds LZ4 chunks
        memcpy(&header_[8], &version_, 4);
        uint64_t sum = checksum(header_.data(), 56);
        memcpy(&header_[56], &sum, 8);
        if (pwrite(fd_, header_.data(), header_.size(), 0) != (ssize_t)header_.size()) return fail(errno);
    }
    if (options_.sync && fsync(fd_) != 0) return fail(errno);
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return fail(errno);
    if (rename(tmp_.c_str(), path_.c_str()) != 0) return fail(errno);
    tmp_.clear();
    if (options_.sync) {
        size_t slash = path_.rfind('/');
        std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
        int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    finished_ = true;
    return 0;
}

}  // namespace mneme_snapshot

// ---- a C interface, for tests and tools that write snapshots from host buffers ---------------

using mneme_snapshot::Writer;

#define SNAPSHOT_EXPORT extern "C" __attribute__((visibility("default")))

// A writer for `path` (0 prologue, 1 epilogue), opened; nullptr with *err set on failure.
// `level`: zstd level; `compress` 0: every chunk raw, 1: zstd, 2: LZ4 (zstd where liblz4 is
// missing); `chunk_size` 0: 4 MiB, and 256 KiB for LZ4 regions; any other: every region's.
SNAPSHOT_EXPORT void *mneme_snapshot_open(const char *path, int kind, int level, int compress, uint64_t chunk_size,
                                          const char *static_hash, const char *dynamic_hash, const char *producer,
                                          const void *base_id, int *err) {
    mneme_snapshot::Options o;
    o.level = level;
    o.compress = compress != 0;
    o.codec = compress == 2 ? mneme_snapshot::CODEC_LZ4 : mneme_snapshot::CODEC_ZSTD;
    if (chunk_size) o.chunk_size = o.lz4_chunk_size = chunk_size;
    auto *w = new Writer(path, kind, o);
    int e = w->open(static_hash ? static_hash : "", dynamic_hash ? dynamic_hash : "", producer ? producer : "",
                    static_cast<const uint8_t *>(base_id));
    if (err) *err = e;
    if (e) {
        delete w;
        return nullptr;
    }
    return w;
}

SNAPSHOT_EXPORT void mneme_snapshot_id(void *w, void *out16) {
    memcpy(out16, static_cast<Writer *>(w)->snapshot_id(), 16);
}

SNAPSHOT_EXPORT int mneme_snapshot_args(void *w, const void *buffer, uint64_t size, const uint32_t *layout,
                                        uint64_t num_args) {
    std::vector<std::pair<uint32_t, uint32_t>> table;
    for (uint64_t i = 0; i < num_args; ++i) table.emplace_back(layout[2 * i], layout[2 * i + 1]);
    return static_cast<Writer *>(w)->args(buffer, size, table);
}

// A whole region from host memory; `base` (the prologue's bytes) for a diff region (encoding 2).
SNAPSHOT_EXPORT int mneme_snapshot_region(void *handle, uint64_t addr, const void *data, uint64_t size,
                                          const void *base, int encoding, int dtype, int norm, int relative,
                                          double threshold, int best) {
    auto *w = static_cast<Writer *>(handle);
    mneme_snapshot::Policy p;
    p.dtype = (uint8_t)dtype;
    p.norm = (uint8_t)norm;
    p.relative = relative != 0;
    p.threshold = threshold;
    if (int e = w->begin_region(addr, size, (mneme_snapshot::Encoding)encoding, p, best != 0)) return e;
    if (size)
        if (int e = w->chunk(data, size, base)) return e;
    return w->end_region();
}

SNAPSHOT_EXPORT int mneme_snapshot_global(void *w, const char *name, const void *data, uint64_t n) {
    return static_cast<Writer *>(w)->global(name ? name : "", data, n);
}

// Finishes and frees the writer: 0, or an errno value (nothing is left on disk then).
SNAPSHOT_EXPORT int mneme_snapshot_finish(void *handle) {
    auto *w = static_cast<Writer *>(handle);
    int e = w->error() ? w->error() : w->finish();
    delete w;
    return e;
}

SNAPSHOT_EXPORT void mneme_snapshot_threads(int n) { mneme_snapshot::set_threads(n); }

SNAPSHOT_EXPORT int mneme_snapshot_zstd_available() { return mneme_snapshot::zstd_available() ? 1 : 0; }

SNAPSHOT_EXPORT int mneme_snapshot_lz4_available() { return mneme_snapshot::lz4_available() ? 1 : 0; }
