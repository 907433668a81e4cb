// A native writer of Mneme snapshot files, format versions 1 and 2 (docs/formats.md, "Snapshot").
//
// The recorder streams each region through it chunk by chunk from small pinned staging
// buffers: a chunk is copied into the writer, encoded (raw, zstd or LZ4, either of them of
// byte-shuffled data, or a diff against the prologue's bytes) on a few worker threads, and
// written in order. zstd and LZ4 come from libzstd.so.1 and liblz4.so.1, opened with dlopen at
// run time; without LZ4 the writer compresses with zstd, without either it stores chunks raw.
// A file is version 1 unless it holds LZ4 chunks (version 2), so older readers read the rest.
// Checksums are XXH3-64 through xxhash.h (header-only). The file is written under a temporary
// name in the destination folder and renamed over the final name only when complete; any write
// error removes the temporary file and is returned as an errno value.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mneme_snapshot {

enum Encoding : uint8_t { ENC_RAW = 0, ENC_ZSTD = 1, ENC_DIFF = 2, ENC_SHUFFLE = 3, ENC_LZ4 = 4, ENC_LZ4_SHUFFLE = 5 };

// The chunk size of LZ4 regions: small enough that a restore decodes thousands of them at once
// on the device (one warp each), large enough that they compress about as well as 4 MiB ones.
constexpr uint64_t LZ4_CHUNK_SIZE = 256u << 10;

// Which compressor the compressed regions (and a diff region's whole chunks) use.
enum Codec : uint8_t { CODEC_ZSTD = 0, CODEC_LZ4 = 1 };

// A region's verification policy (REGN dtype, norm, flags, threshold); the default is exact bytes.
struct Policy {
    uint8_t dtype = 0;  // docs/formats.md's dtype codes: 0 u8 .. 11 f64
    uint8_t norm = 0;   // 0 none, 1 L1, 2 L2, 3 Linf
    bool relative = false;
    double threshold = 0;
};

struct Options {
    int level = 1;            // zstd level (negative: faster, larger)
    bool compress = true;     // false: every chunk raw
    Codec codec = CODEC_ZSTD; // LZ4 decodes about 3x as fast (restore), stores a few percent more
    bool sync = true;         // fsync the file and its folder before and after the rename
    uint64_t chunk_size = 4u << 20;
    // The chunk size of regions whose chunks are LZ4 (not diffs): small chunks let a restore
    // decode them in parallel on the device (docs/formats.md). 0: chunk_size.
    uint64_t lz4_chunk_size = LZ4_CHUNK_SIZE;
};

// Whether libzstd.so.1 could be loaded (chunks are stored raw otherwise).
bool zstd_available();
// Whether liblz4.so.1 could be loaded (CODEC_LZ4 writers use zstd otherwise).
bool lz4_available();

// Worker threads shared by every writer of the process (at least 1).
void set_threads(int n);

class Writer {
public:
    // `kind`: 0 prologue, 1 epilogue. Nothing is created before open().
    Writer(std::string path, int kind, Options options = Options());
    ~Writer();  // removes the temporary file unless finish() succeeded
    Writer(const Writer &) = delete;
    Writer &operator=(const Writer &) = delete;

    // Creates the temporary file and writes the header and META. `base_id`: the prologue's
    // snapshot id for an epilogue with diff regions (16 bytes), or nullptr. 0 or an errno value.
    int open(const std::string &static_hash, const std::string &dynamic_hash, const std::string &producer,
             const uint8_t *base_id = nullptr);
    const uint8_t *snapshot_id() const { return id_; }

    int args(const void *buffer, size_t size, const std::vector<std::pair<uint32_t, uint32_t>> &layout);

    // A region of `size` bytes at `addr`, whose chunks follow with chunk(). `encoding`: ENC_RAW,
    // ENC_ZSTD (compressed with the options' codec, so an lz4 region for CODEC_LZ4), ENC_LZ4, or
    // ENC_DIFF (epilogues; chunk() then needs the prologue's bytes). `best`: a diff region all of
    // whose chunks were stored whole is relabelled as compressed when it ends.
    int begin_region(uint64_t addr, uint64_t size, Encoding encoding, const Policy &policy, bool best = false);
    // The next `n` bytes of the current region: a whole number of its chunks, or all that
    // remain; and the prologue's bytes at the same place for a diff region. Both are copied
    // before it returns.
    int chunk(const void *data, size_t n, const void *base = nullptr);
    int end_region();

    int global(const std::string &name, const void *data, size_t n);

    // END, then (optionally) fsync, rename over the final name. 0 or an errno value; after an
    // error nothing is left on disk.
    int finish();
    void abort();

    int error() const { return error_; }
    uint64_t bytes_written() const { return offset_; }
    uint64_t chunk_bytes() const { return chunk_bytes_; }  // raw bytes of every chunk, as passed

private:
    struct Region;
    int fail(int err);
    int write_all(const void *data, size_t n);
    int block(const char tag[4], const std::string &payload);
    int drain(size_t keep);
    int one_chunk(const char *data, size_t n, const char *base);

    std::string path_, tmp_;
    int kind_;
    Options options_;
    int fd_ = -1;
    int error_ = 0;
    bool finished_ = false;
    uint8_t id_[16] = {0};
    uint32_t sequence_ = 0;
    uint32_t version_ = 1;  // raised to 2 by the first region that may hold LZ4 chunks
    std::string header_;    // the 64-byte file header, rewritten at finish() when the version rose
    uint64_t offset_ = 0, chunk_bytes_ = 0;
    uint64_t regions_ = 0, globals_ = 0;
    std::shared_ptr<Region> region_;
    std::deque<std::future<std::string>> pending_;  // encoded CHNK blocks (header + payload), in file order
};

}  // namespace mneme_snapshot
