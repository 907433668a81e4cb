"""Hostile zstd chunks for the snapshot readers: one corpus, read by the Python and the native reader.

Each entry is (name, zstd body, raw length, valid?). The bodies are hand-built frames (RFC 8878):
a header declaring a huge size, RLE blocks that expand 32768-fold, trailing garbage, two frames.
`write_snapshot` stores one as the single chunk of a region, with valid checksums.
"""

from __future__ import annotations

import struct

import zstandard

RAW = 64


def _block(kind: int, size: int, last: bool, body: bytes) -> bytes:
    header = (size << 3) | (kind << 1) | int(last)
    return struct.pack("<I", header)[:3] + body


def declared_frame(declared: int, raw: int = RAW) -> bytes:
    """A single-segment frame declaring `declared` bytes, holding `raw` zero bytes in one RLE block."""
    return b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + struct.pack("<Q", declared) + _block(1, raw, True, b"\0")


def rle_bomb(total: int = 2 << 30) -> bytes:
    """A frame without a content size: `total` zero bytes in 128 KiB RLE blocks (~4 bytes each)."""
    block = 128 << 10
    count = total // block
    blocks = b"".join(_block(1, block, i == count - 1, b"\0") for i in range(count))
    return b"\x28\xb5\x2f\xfd" + bytes([0x00, 0x38]) + blocks  # window descriptor 0x38: 128 KiB


def good(raw: int = RAW) -> bytes:
    return zstandard.ZstdCompressor().compress(bytes(raw))


def corpus() -> list[tuple[str, bytes, int, bool]]:
    one = good()
    return [
        ("good", one, RAW, True),
        ("good-without-size", zstandard.ZstdCompressor(write_content_size=False).compress(bytes(RAW)), RAW, True),
        ("declares-1TiB", declared_frame(1 << 40), RAW, False),
        ("declares-more", declared_frame(RAW + 1), RAW, False),
        ("rle-bomb-2GiB", rle_bomb(), RAW, False),
        ("trailing-garbage", one + b"garbage", RAW, False),
        ("second-frame", one + good(0), RAW, False),
        ("two-frames", good(RAW // 2) + good(RAW // 2), RAW, False),
        ("skippable-first", b"\x50\x2a\x4d\x18" + struct.pack("<I", 0) + one, RAW, False),
        ("truncated", one[:-3], RAW, False),
        ("not-zstd", b"\0" * 16, RAW, False),
    ]


def write_snapshot(path, body: bytes, raw: int, addr: int = 0x7000_0000, monkeypatch=None) -> None:
    """A prologue whose region at `addr` is one zstd chunk with `body` (checksums computed as a writer does)."""
    from mneme.core.snapshot import SnapshotWriter, writer
    from mneme.core.snapshot.format import ENC_ZSTD

    original = writer._encode
    writer._encode = lambda piece, element, level: (ENC_ZSTD, (body,))
    try:
        with SnapshotWriter(path, "prologue", static_hash="s", dynamic_hash="d") as w:
            w.set_args(b"\0" * 8)
            w.add_region(addr, bytes(raw), encoding="zstd")
    finally:
        writer._encode = original
