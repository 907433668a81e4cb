"""Chunk codecs shared by the writer and the reader: zstd, byte shuffle, and a small thread pool.

zstd releases the GIL, so chunks are compressed and decompressed on several cores; each
thread keeps its own (de)compressor because zstd contexts are not thread-safe.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

import numpy as np
import zstandard

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
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="mneme-snapshot",
                                                          initializer=_mark_pool_thread)  # fmt: skip
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
