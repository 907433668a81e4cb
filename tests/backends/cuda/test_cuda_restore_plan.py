"""The CPU side of the CUDA snapshot restore: the plan that fills staging buffers with whole chunks,
and regions decoded piece by piece through staging (a numpy array standing in for the device)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter

pytest.importorskip("mneme_cuda")
from mneme_cuda.memory import decode_pieces, restore_plan

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize(
    ("size", "chunk", "stage"),
    [
        (70 * MiB + 12345, 4 * MiB, 32 * MiB),  # more fills than staging buffers, a short last chunk
        (3 * MiB, 4 * MiB, 32 * MiB),  # one piece
        (10 * MiB, 64 * KiB, 32 * MiB),  # small chunks grouped into pieces of >= 1 MiB
        (100 * MiB, 48 * MiB, 32 * MiB),  # chunks larger than a staging buffer
        (8, 8, 32 * MiB),
    ],
)
def test_restore_plan_fills_each_staging_buffer_with_whole_chunks_and_covers_the_region(size, chunk, stage):
    plan = restore_plan(size, chunk, stage)
    cursor = 0
    for offset, length, pieces in plan:
        assert offset == cursor and 0 < length <= stage
        inner = 0
        for start, piece in pieces:
            assert start == inner and piece > 0
            if chunk <= stage:  # no chunk is split between pieces or fills
                assert (offset + start) % chunk == 0
                assert piece % chunk == 0 or offset + start + piece == size
            inner += piece
        assert inner == length
        cursor += length
    assert cursor == size
    if chunk < MiB:
        assert all(piece >= MiB for _, _, pieces in plan for _, piece in pieces[:-1])


def test_restore_plan_of_an_empty_region_is_empty():
    assert restore_plan(0, 4 * MiB, 32 * MiB) == []


def _snapshots(tmp_path: Path, size: int, chunk: int):
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, size, dtype=np.uint8)
    smooth = np.round(np.sin(np.arange(size // 4, dtype=np.float32) * 1e-3) * 100).astype(np.float32).view(np.uint8)
    changed = raw.copy()
    changed[size // 3 : size // 3 + 777] ^= 0x5A
    prologue_path = tmp_path / "DeviceState.prologue.a.b.mneme"
    with SnapshotWriter(prologue_path, SnapshotType.PROLOGUE, static_hash="a", dynamic_hash="b", chunk_size=chunk) as w:
        w.set_args(b"\0" * 8)
        w.add_region(0x10000000, raw, encoding="raw")
        w.add_region(0x20000000, smooth, encoding="zstd")
    epilogue_path = tmp_path / "DeviceState.epilogue.a.b.mneme"
    prologue = Snapshot.open(prologue_path)
    with SnapshotWriter(epilogue_path, SnapshotType.EPILOGUE, static_hash="a", dynamic_hash="b", chunk_size=chunk) as w:
        w.set_args(b"\0" * 8)
        w.add_diff_region(0x10000000, raw, changed)
    epilogue = Snapshot.open(epilogue_path, base=prologue)
    return [(prologue, 0x10000000, raw), (prologue, 0x20000000, smooth), (epilogue, 0x10000000, changed)]


@pytest.mark.parametrize("threads", [0, 4])
def test_regions_decoded_piece_by_piece_through_staging_equal_the_recorded_bytes(tmp_path, threads):
    """What `write_snapshot_region` does on the host side, with a numpy array standing in for the device."""
    stage_bytes = 1 * MiB
    pool = ThreadPoolExecutor(threads) if threads else None
    try:
        for snapshot, addr, expected in _snapshots(tmp_path, 5 * MiB + 4096 + 8, 128 * KiB):
            info = snapshot.region(addr)
            device = np.zeros(info.size, np.uint8)
            stage = np.empty(stage_bytes, np.uint8)
            for offset, length, pieces in restore_plan(info.size, info.chunk_size, stage_bytes, min_piece=256 * KiB):
                stage[:] = 0xEE  # stale bytes from the previous fill must all be overwritten
                decode_pieces(snapshot, addr, offset, stage, pieces, pool)
                device[offset : offset + length] = stage[:length]
            assert np.array_equal(device, expected), f"{snapshot.kind} region {addr:#x} ({info.encoding})"
    finally:
        if pool is not None:
            pool.shutdown()
