"""The diff encoding of epilogue chunks: XOR against the prologue's bytes over the changed runs.

A run is a byte range of the chunk, in steps of `GRANULARITY`, where epilogue and prologue
differ; only the XOR of those runs is stored (zstd-compressed when that is smaller), so a
chunk in which a few bytes changed takes a few dozen bytes.
"""

from __future__ import annotations

import numpy as np

from mneme.core.snapshot.format import DIFF_HEADER, PACK_RAW, PACK_ZSTD, RUN, checksum

GRANULARITY = 1024  # bytes; the resolution of the changed-run map


def equal(a, b) -> bool:
    """Byte equality of two equally long bytes-like objects, at memcmp speed where possible."""
    if isinstance(a, (bytes, bytearray)):
        return a == b
    if isinstance(b, (bytes, bytearray)):
        return b == a
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    if x.size != y.size:
        return False
    full = x.size // 8 * 8
    if full and (x[:full].view(np.uint64) != y[:full].view(np.uint64)).any():
        return False
    return bool((x[full:] == y[full:]).all())


def changed_runs(base, data, granularity: int = GRANULARITY) -> list[tuple[int, int]]:
    """(offset, length) of the `granularity`-aligned ranges where `data` differs from `base`."""
    a, b = np.frombuffer(base, np.uint8), np.frombuffer(data, np.uint8)
    n = b.size
    if a.size != n:
        raise ValueError(f"base has {a.size} bytes, data {n}")
    full = n // granularity * granularity
    flags = []
    if full:
        a64, b64 = a[:full].view(np.uint64), b[:full].view(np.uint64)
        flags.append((a64 != b64).reshape(-1, granularity // 8).any(axis=1))
    if n > full:
        flags.append(np.array([not np.array_equal(a[full:], b[full:])]))
    if not flags:
        return []
    changed = np.concatenate(flags).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], changed, [0]))))
    starts, ends = edges[0::2] * granularity, np.minimum(edges[1::2] * granularity, n)
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def encode(base, data, compressor, runs: list[tuple[int, int]] | None = None) -> bytes:
    """The body of a diff chunk: DIFF header, run table, XOR bytes (raw or one zstd frame)."""
    if runs is None:
        runs = changed_runs(base, data)
    a, b = np.frombuffer(base, np.uint8), np.frombuffer(data, np.uint8)
    xor = np.concatenate([a[o : o + n] ^ b[o : o + n] for o, n in runs]) if runs else np.empty(0, np.uint8)
    packing, payload = PACK_RAW, xor.tobytes()
    if payload:
        packed = compressor.compress(payload)
        if len(packed) < len(payload):
            packing, payload = PACK_ZSTD, packed
    table = b"".join(RUN.pack(o, n) for o, n in runs)
    return DIFF_HEADER.pack(len(runs), packing, checksum(base)) + table + payload


def parse(body) -> tuple[list[tuple[int, int]], int, int, memoryview]:
    """Split a diff chunk body into (runs, packing, base checksum, payload); ValueError if malformed."""
    body = memoryview(body)
    if len(body) < DIFF_HEADER.size:
        raise ValueError("diff chunk shorter than its header")
    count, packing, base_sum = DIFF_HEADER.unpack_from(body)
    table_end = DIFF_HEADER.size + count * RUN.size
    if len(body) < table_end or packing not in (PACK_RAW, PACK_ZSTD):
        raise ValueError("diff chunk run table is malformed")
    runs = [RUN.unpack_from(body, DIFF_HEADER.size + i * RUN.size) for i in range(count)]
    return runs, packing, base_sum, body[table_end:]


def apply(out, runs: list[tuple[int, int]], xor) -> None:
    """XOR the stored run bytes into `out` (a writable buffer holding the base bytes)."""
    o, x = np.frombuffer(out, np.uint8), np.frombuffer(xor, np.uint8)
    pos = 0
    for offset, length in runs:
        np.bitwise_xor(o[offset : offset + length], x[pos : pos + length], out=o[offset : offset + length])
        pos += length


def check_runs(runs: list[tuple[int, int]], raw_length: int) -> int:
    """Total run length; ValueError when runs are unsorted, overlap or leave the chunk."""
    end = total = 0
    for offset, length in runs:
        if offset < end or length == 0 or offset + length > raw_length:
            raise ValueError(f"diff run ({offset}, {length}) is out of order or outside the {raw_length}-byte chunk")
        end = offset + length
        total += length
    return total
