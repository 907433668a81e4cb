// Snapshot restore on the device: decode LZ4 chunks (snapshot chunk encodings 4 and 5, see
// docs/formats.md) that were copied to the device as stored, then put byte-shuffled chunks back
// in element order. The host only reads and checks the stored bytes (their XXH3-64), so a
// compressed prologue crosses PCIe at its stored size and the decoding runs at device speed.
//
// Regenerate lz4.ptx (checked in; loaded through the driver JIT) with:
//   nvcc -ptx -arch=compute_75 -O3 -o lz4.ptx lz4.cu
//
// mneme_lz4_decode: one warp per chunk. Every lane parses the same sequence (the token bytes
// are read by all lanes at once, one transaction), then the warp copies the literals and the
// match together, 16 bytes a lane where it can. A match that overlaps its own output (offset
// below its length: runs of zeros, repeated patterns) is built once byte by byte for at least
// 512 bytes, a whole number of periods, then doubled in place until it is complete. Every read
// and write is bounds-checked against the chunk's stored and raw lengths; a malformed block
// stops that warp and counts a failure (status[0]) with the lowest failing chunk index
// (status[1]), and the host then decodes that chunk itself for a precise error message.
//
// mneme_unshuffle: one grid row per chunk, after the decode; byte-shuffled chunks (encoding 5)
// decoded their byte planes into scratch (`out`), which this writes to `dst` in element order.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

struct Chunk {
    u64 src;      // the chunk's body on the device (for encoding 5: its 8-byte header, then the LZ4 block)
    u64 out;      // where the block decodes to: the destination, or scratch for byte planes
    u64 dst;      // encoding 5: where the elements go
    u32 src_len;  // bytes of the body
    u32 raw_len;  // bytes it decodes to
    u32 index;    // the chunk's index in its region (reported on failure)
    u32 encoding; // 4: LZ4, 5: LZ4 of byte planes
};

#define PATTERN_MIN 512u  // bytes an overlapping match is built to before it doubles: 32 lanes x 16

// 16 bytes from any address, by aligned 4-byte loads and funnel shifts. Only words holding at
// least one of the 16 bytes are read, so nothing past the allocation is touched. `Input`: the
// stored block, which nothing writes during the kernel (read through the read-only cache);
// otherwise the chunk's own output, written by this warp.
template <bool Input>
__device__ __forceinline__ uint4 load16(const u8 *p) {
    u64 at = (u64)p;
    u32 shift = (u32)(at & 3) * 8;
    const u32 *w = (const u32 *)(at & ~3ull);
    u32 a, b, c, d, e = 0;
    if (Input) {
        a = __ldg(w);
        b = __ldg(w + 1);
        c = __ldg(w + 2);
        d = __ldg(w + 3);
        if (shift) e = __ldg(w + 4);
    } else {
        a = w[0];
        b = w[1];
        c = w[2];
        d = w[3];
        if (shift) e = w[4];
    }
    uint4 v;
    v.x = __funnelshift_r(a, b, shift);
    v.y = __funnelshift_r(b, c, shift);
    v.z = __funnelshift_r(c, d, shift);
    v.w = __funnelshift_r(d, e, shift);
    return v;
}

template <bool Input>
__device__ __forceinline__ u8 load1(const u8 *p) {
    return Input ? __ldg(p) : *p;
}

// Copy n bytes from src to dst (not overlapping, or src far enough behind) with the whole warp.
template <bool Input>
__device__ void warp_copy(u8 *dst, const u8 *src, u32 n, u32 lane) {
    u32 head = (u32)((16 - ((u64)dst & 15)) & 15);
    head = head < n ? head : n;
    if (lane < head) dst[lane] = load1<Input>(src + lane);
    dst += head;
    src += head;
    n -= head;
    u32 vectors = n >> 4;
    for (u32 v = lane; v < vectors; v += 32) *(uint4 *)(dst + 16 * v) = load16<Input>(src + 16 * v);
    u32 tail = n & 15, base = vectors << 4;
    if (lane < tail) dst[base + lane] = load1<Input>(src + base + lane);
}

// A length's extension bytes (after a nibble of 15): adds each byte while it is 255. False when
// the block ends first or the length passes `limit`.
__device__ __forceinline__ bool extend(const u8 *src, u32 src_len, u32 &ip, u32 &length, u32 limit) {
    u32 b;
    do {
        if (ip >= src_len) return false;
        b = __ldg(src + ip++);
        length += b;
        if (length > limit) return false;
    } while (b == 255);
    return true;
}

// Decode one LZ4 block of exactly raw_len bytes; false if it is malformed.
__device__ bool lz4_block(const u8 *src, u32 src_len, u8 *out, u32 raw_len, u32 lane) {
    u32 ip = 0, op = 0;
    for (;;) {
        if (ip >= src_len) return false;
        u32 token = __ldg(src + ip++);
        u32 literals = token >> 4;
        if (literals == 15 && !extend(src, src_len, ip, literals, raw_len)) return false;
        if (literals > src_len - ip || literals > raw_len - op) return false;
        warp_copy<true>(out + op, src + ip, literals, lane);
        ip += literals;
        op += literals;
        if (ip == src_len) break;  // the last sequence has literals only
        if (src_len - ip < 2) return false;
        u32 offset = __ldg(src + ip) | ((u32)__ldg(src + ip + 1) << 8);
        ip += 2;
        u32 length = token & 15;
        if (length == 15 && !extend(src, src_len, ip, length, raw_len)) return false;
        length += 4;
        if (offset == 0 || offset > op || length > raw_len - op) return false;
        __syncwarp();  // the literals (and earlier matches) are visible to every lane
        u8 *at = out + op;
        if (offset >= length) {
            warp_copy<false>(at, at - offset, length, lane);
        } else {
            // A period of `offset` bytes repeated: build a whole number of periods, at least
            // PATTERN_MIN bytes (or the match), then double what is there.
            u32 built;
            if (offset >= PATTERN_MIN) {
                built = offset;
                warp_copy<false>(at, at - offset, built, lane);
            } else {
                built = (PATTERN_MIN + offset - 1) / offset * offset;
                built = built < length ? built : length;
                for (u32 j = lane; j < built; j += 32) at[j] = at[(int)(j % offset) - (int)offset];
            }
            while (built < length) {
                __syncwarp();
                u32 n = length - built < built ? length - built : built;
                warp_copy<false>(at + built, at, n, lane);
                built += n;
            }
        }
        op += length;
        __syncwarp();
    }
    return op == raw_len;
}

extern "C" __global__ void mneme_lz4_decode(const Chunk *chunks, u32 n, u32 *status) {
    u32 warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= n) return;
    const Chunk c = chunks[warp];
    const u8 *src = (const u8 *)c.src;
    u32 len = c.src_len;
    bool ok = c.encoding == 4 || c.encoding == 5;
    if (c.encoding == 5) {  // u8 element size, 7 reserved bytes, then the block of byte planes
        u32 k = len >= 8 ? __ldg(src) : 0;
        ok = k == 2 || k == 4 || k == 8;
        src += 8;
        len -= ok ? 8 : 0;
    }
    ok = ok && lz4_block(src, len, (u8 *)c.out, c.raw_len, lane);
    if (!ok && lane == 0) {
        atomicAdd(status, 1u);
        atomicMin(status + 1, c.index);
    }
}

// out[i*k + j] = planes[j*(m/k) + i] for the first m = raw_len - raw_len % k bytes; the rest as is.
template <typename T>
__device__ void unshuffle(const Chunk &c, u32 k) {
    const u8 *planes = (const u8 *)c.out;
    u8 *dst = (u8 *)c.dst;
    u32 count = c.raw_len / k, m = count * k;
    u32 stride = gridDim.x * blockDim.x;
    bool aligned = ((u64)dst & (k - 1)) == 0;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        if (aligned) {
            T v = 0;
            for (u32 j = 0; j < k; j++) v |= (T)planes[(u64)j * count + i] << (8 * j);
            ((T *)dst)[i] = v;
        } else {
            for (u32 j = 0; j < k; j++) dst[(u64)i * k + j] = planes[(u64)j * count + i];
        }
    }
    u32 first = blockIdx.x * blockDim.x + threadIdx.x;
    if (first < c.raw_len - m) dst[m + first] = planes[m + first];
}

extern "C" __global__ void mneme_unshuffle(const Chunk *chunks) {
    const Chunk c = chunks[blockIdx.y];
    if (c.encoding != 5 || c.src_len < 8) return;
    u32 k = __ldg((const u8 *)c.src);  // checked by the decode, which counts a failure for any other size
    if (k == 2) unshuffle<unsigned short>(c, 2);
    else if (k == 4) unshuffle<u32>(c, 4);
    else if (k == 8) unshuffle<u64>(c, 8);
}
