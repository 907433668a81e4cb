"""Chunk codecs shared by the writer and the reader: zstd, LZ4, byte shuffle, and a small thread pool.

zstd releases the GIL, so chunks are compressed and decompressed on several cores; each
thread keeps its own (de)compressor because zstd contexts are not thread-safe. LZ4 comes
from the system's liblz4.so.1 through ctypes (which also releases the GIL); without it,
LZ4 blocks still decode, slowly, in Python, and writing them is refused with an install hint.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import logging
import os
import threading

import numpy as np
import zstandard

from mneme.core.native_loader import NativeLoader

log = logging.getLogger(__name__)
_local = threading.local()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads: a pool copied from the parent would
    # accept work and never run it. The child starts its own on first use.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def workers() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers(), thread_name_prefix="mneme-snapshot", initializer=_mark_pool_thread
            )
        return _pool


def in_pool() -> bool:
    """True on a pool thread: work started there runs inline (waiting on the pool could deadlock)."""
    return getattr(_local, "pool_thread", False)


def _mark_pool_thread() -> None:
    _local.pool_thread = True


def compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level)
    return cache[level]


def decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "decompressor", None)
    if dctx is None:
        dctx = _local.decompressor = zstandard.ZstdDecompressor()
    return dctx


def shuffle(data, size: int) -> bytes:
    """Byte planes of `size`-byte elements (plane j: byte j of every element), then the tail bytes."""
    raw = np.frombuffer(data, np.uint8)
    whole = len(raw) // size * size
    planes = raw[:whole].reshape(-1, size).T.tobytes()
    return planes + raw[whole:].tobytes() if whole < len(raw) else planes


def unshuffle(data, size: int, out) -> None:
    """Inverse of `shuffle`, written into `out` (a writable buffer of the same length)."""
    src, dst = np.frombuffer(data, np.uint8), np.frombuffer(out, np.uint8)
    whole = len(dst) // size * size
    rows, count = dst[:whole].reshape(-1, size), whole // size
    for j in range(size):  # one strided column at a time: several times faster than a transposed copy
        rows[:, j] = src[j * count : (j + 1) * count]
    dst[whole:] = src[whole:]


def ordered(func, items, depth: int):
    """Map `func` over `items` on the pool, yielding results in order with at most `depth` in flight."""
    if depth <= 1 or in_pool():
        for item in items:
            yield func(item)
        return
    executor, pending = pool(), []
    try:
        for item in items:
            pending.append(executor.submit(func, item))
            if len(pending) >= depth:
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()
    finally:
        for fut in pending:
            fut.cancel()


# -- LZ4 blocks (docs/formats.md, chunk encodings 4 and 5) -------------------------------------
LZ4_MAX_INPUT = 0x7E000000  # LZ4_MAX_INPUT_SIZE: larger inputs are stored another way
LZ4_INSTALL_HINT = "install liblz4 (Debian/Ubuntu: apt install liblz4-1; Fedora: dnf install lz4-libs)"
_LZ4_MALFORMED = "LZ4 data does not decode (malformed block, or it decodes to more bytes than expected)"


_LZ4_BLOCK = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
#: liblz4 by its soname (the soname is its ABI): the block functions Mneme uses.
LZ4 = NativeLoader(
    "liblz4",
    lambda: "liblz4.so.1",
    {
        "LZ4_compress_default": (ctypes.c_int, _LZ4_BLOCK),
        "LZ4_decompress_safe": (ctypes.c_int, _LZ4_BLOCK),
        "LZ4_compressBound": (ctypes.c_int, [ctypes.c_int]),
    },
    remedy=LZ4_INSTALL_HINT,
)


def lz4_library():
    """The system's liblz4 with the block functions Mneme uses, or None (the reason is logged once)."""
    lib, why = LZ4.try_load()
    if lib is None and not _lz4_reported:
        _lz4_reported.append(why)
        log.debug("%s", why)
    return lib


_lz4_reported: list[str] = []


def lz4_available() -> bool:
    """True when LZ4 blocks can be written (and read at native speed)."""
    return lz4_library() is not None


def writable_encoding(encoding: str) -> str:
    """`encoding`, or "zstd" in place of "lz4" where liblz4 is missing (LZ4 files stay readable, not writable)."""
    if encoding == "lz4" and not lz4_available():
        _warn_no_lz4()
        return "zstd"
    return encoding


@functools.lru_cache(maxsize=1)
def _warn_no_lz4() -> None:  # once per process
    log.warning("liblz4.so.1 is missing: snapshots are compressed with zstd instead (%s)", LZ4_INSTALL_HINT)


def _address(buffer) -> tuple[np.ndarray, int]:
    """A NumPy view keeping `buffer` alive, and the address of its first byte (no copy, read-only is fine)."""
    view = np.frombuffer(buffer, np.uint8)
    return view, view.ctypes.data


def lz4_compress(data) -> bytes | None:
    """One LZ4 block of `data` (fast mode), or None when the input is too large for LZ4.

    Raises RuntimeError when liblz4 is missing: writing LZ4 needs it.
    """
    lib = lz4_library()
    if lib is None:
        raise RuntimeError(
            f"the LZ4 encoding needs the system's liblz4.so.1, which is not installed; "
            f"{LZ4_INSTALL_HINT}, or choose zstd"
        )
    n = memoryview(data).nbytes
    if n > LZ4_MAX_INPUT:
        return None
    _src, src = _address(data)  # the views keep the buffers alive during the call
    out = bytearray(lib.LZ4_compressBound(n) or 1)
    _dst, dst = _address(out)
    got = lib.LZ4_compress_default(src, dst, n, len(out))
    if got <= 0 and n:
        raise RuntimeError(f"liblz4 failed to compress {n} bytes")
    return bytes(memoryview(out)[:got])


def lz4_decompress_into(data, out) -> None:
    """Decode one LZ4 block that must decode to exactly `len(out)` bytes into `out` (writable).

    Raises ValueError when the block is malformed or decodes to another length.
    """
    lib, size = lz4_library(), memoryview(out).nbytes
    if lib is None:
        memoryview(out).cast("B")[:] = lz4_decode_python(data, size)
        return
    _src, src = _address(data)
    dst_view = np.frombuffer(out, np.uint8)
    if not dst_view.flags.writeable:
        raise ValueError("the LZ4 output buffer is read-only")
    n = memoryview(data).nbytes
    if n == 0:
        if size:
            raise ValueError(_LZ4_MALFORMED)
        return
    got = lib.LZ4_decompress_safe(src, dst_view.ctypes.data, n, size)
    if got < 0:
        raise ValueError(_LZ4_MALFORMED)
    if got != size:
        raise ValueError(f"LZ4 data decodes to {got} bytes, expected {size}")


def lz4_decompress(data, size: int) -> bytes:
    """One LZ4 block that must decode to exactly `size` bytes."""
    out = bytearray(size)
    lz4_decompress_into(data, out)
    return bytes(out)


def _lz4_length(src, i: int, length: int) -> tuple[int, int]:
    """An LZ4 token's 4-bit length, extended by 255-continued bytes from `src[i:]` when it is 15."""
    if length == 15:
        while True:
            if i >= len(src):
                raise ValueError("LZ4 data ends inside a length")
            extra = src[i]
            i += 1
            length += extra
            if extra != 255:
                break
    return length, i


def lz4_decode_python(data, size: int, *, stop_at_size: bool = False) -> bytes:
    """Decode one LZ4 block of `size` decoded bytes in Python: the fallback without liblz4 (slow).

    `stop_at_size`: stop once `size` bytes are out, ignoring what follows (a fatbin entry's
    payload may be padded after its block); snapshot chunks must end exactly with the block.
    """
    src = bytes(data)
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        literals, i = _lz4_length(src, i, token >> 4)
        if i + literals > n:
            raise ValueError("LZ4 literals run past the end of the block")
        out += src[i : i + literals]
        i += literals
        if i == n or (stop_at_size and len(out) >= size):  # the last sequence has literals only
            break
        if i + 2 > n:
            raise ValueError("LZ4 data ends inside a match offset")
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        length, i = _lz4_length(src, i, token & 15)
        length += 4
        start = len(out) - offset
        if offset == 0 or start < 0:
            raise ValueError(f"LZ4 match offset {offset} points before the start of the output")
        if len(out) + length > size:
            raise ValueError(f"LZ4 data decodes to more than {size} bytes")
        while length > 0:  # overlapping matches repeat the last `offset` bytes
            piece = out[start : start + min(length, offset)]
            out += piece
            start += len(piece)
            length -= len(piece)
    if len(out) != size:
        raise ValueError(f"LZ4 data decodes to {len(out)} bytes, expected {size}")
    return bytes(out)


# -- what a valid zstd chunk is -----------------------------------------------------------------
# Both readers (this one and the native snapio.c) accept exactly one standard zstd frame that
# spans the whole body, whose declared content size (when present) is the chunk's raw length.
# Checked before decompressing, so a frame header's claim never sizes an allocation.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_BLOCK_MAX = 128 << 10  # the largest block content the format allows (RFC 8878, Block_Maximum_Size)
DECODE_PIECE = 4 << 20  # bytes a streamed decode or check produces at a time


def zstd_frame_problem(data, length: int) -> str | None:
    """Why `data` is not one zstd frame of `length` bytes spanning all of `data`; None when it is."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < 6 or bytes(view[:4]) != ZSTD_MAGIC:
        return "is not a zstd frame (bad magic number)"
    try:
        params = zstandard.get_frame_parameters(view)
        pos = zstandard.frame_header_size(view)
    except zstandard.ZstdError as exc:
        return f"has a bad zstd frame header ({exc})"
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size != length:
        return f"zstd frame declares {params.content_size} bytes, the chunk holds {length}"
    most = 0  # the most bytes the blocks can decode to: raw and RLE blocks say, others hold <= 128 KiB
    while True:  # the blocks' headers give the frame's compressed size, as ZSTD_findFrameCompressedSize does
        if pos + 3 > n:
            return "zstd frame is truncated"
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 3:
            return "zstd frame has a reserved block type"
        most += size if kind < 2 else ZSTD_BLOCK_MAX
        pos += 3 + (1 if kind == 1 else size)
        if header & 1:
            break
    pos += 4 if params.has_checksum else 0
    if pos > n:
        return "zstd frame is truncated"
    if pos != n:
        return f"{n - pos} bytes follow the zstd frame (trailing data or a second frame)"
    if most < length:
        return f"zstd frame's blocks decode to at most {most} bytes, the chunk holds {length}"
    return None


def zstd_decode_into(data, out) -> int:
    """Decode one zstd frame into `out` (a writable buffer) in pieces, with no buffer of its own;
    the bytes written, at most len(out) + 1 (one more tells a frame longer than `out`)."""
    view = memoryview(out).cast("B")
    reader = decompressor().stream_reader(data, read_across_frames=False)
    pos = 0
    while pos < len(view):
        got = reader.readinto(view[pos : pos + DECODE_PIECE])
        if not got:
            return pos
        pos += got
    return pos + len(reader.read(1))


def zstd_decoded_length(data, limit: int) -> int:
    """Bytes one zstd frame decodes to (up to `limit` + 1), decoding in pieces into one small buffer."""
    reader = decompressor().stream_reader(data, read_across_frames=False)
    piece = bytearray(min(DECODE_PIECE, limit + 1))
    total = 0
    while total <= limit:
        got = reader.readinto(piece)
        if not got:
            break
        total += got
    return total
