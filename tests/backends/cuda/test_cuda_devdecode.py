"""The host side of restoring LZ4 regions on the device (mneme_cuda.devdecode, the native reader's stored mode).

What the device runs is tested on the GPU (tests/gpu/test_cuda_restore_lz4.py); here, on real
snapshot files: which regions qualify, how chunks are packed into staging fills, the chunk
table the kernels read, and that the native reader hands over each payload exactly as stored,
checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from mneme.core.errors import CorruptFileError, UsageError
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotWriter, codec, snapio
from mneme.core.snapshot.format import ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW

devdecode = pytest.importorskip("mneme_cuda.devdecode")
needs_lz4 = pytest.mark.skipif(not codec.lz4_available(), reason="needs liblz4.so.1")

A, B, C = 0x7000_0000, 0x7100_0000, 0x7200_0000
CHUNK = 1 << 16


@pytest.fixture
def state(tmp_path):
    """LZ4 regions (floats: byte planes; bytes with noise: plain LZ4 and raw chunks) and a zstd region."""
    rng = np.random.default_rng(3)
    floats = (np.sin(np.arange(20 * CHUNK // 4 + 3, dtype=np.float32) * 1e-3) * 1000).round().astype(np.float32)
    mixed = np.zeros(12 * CHUNK + 5, np.uint8)
    mixed[::7] = 3
    mixed[4 * CHUNK : 6 * CHUNK] = rng.integers(0, 256, 2 * CHUNK, dtype=np.uint8)  # incompressible: raw chunks
    path = tmp_path / "p.mneme"
    with SnapshotWriter(path, "prologue", chunk_size=CHUNK) as w:
        w.set_args(b"")
        if codec.lz4_available():
            w.add_region(A, floats, encoding="lz4", policy=RegionPolicy("f32"))
            w.add_region(B, mixed, encoding="lz4")
        w.add_region(C, floats, encoding="zstd")
    return path, floats, mixed


@needs_lz4
def test_lz4_regions_qualify_and_zstd_ones_do_not(state):
    path, _, _ = state
    with Snapshot.open(path) as snap:
        assert devdecode.RegionPlan.of(snap.chunk_index(A).chunks).eligible()
        mixed = snap.chunk_index(B).chunks
        assert {ENC_RAW, ENC_LZ4} <= {c.encoding for c in mixed} and devdecode.RegionPlan.of(mixed).eligible()
        assert not devdecode.RegionPlan.of(snap.chunk_index(C).chunks).eligible()


@needs_lz4
def test_fills_hold_every_chunk_once_in_order_within_their_limits(state):
    path, _, _ = state
    with Snapshot.open(path) as snap:
        chunks = snap.chunk_index(B).chunks
        fill_bytes = CHUNK + CHUNK // 2  # a raw chunk's payload takes most of a fill
        fills = devdecode.plan(chunks, fill_bytes, 1 << 30).fills
        assert len(fills) > 1
        assert [i for fill in fills for i in range(fill.start, fill.stop)] == list(range(len(chunks)))
        for fill in fills:
            assert fill.size <= fill_bytes
            mine = chunks[fill.start : fill.stop]
            ends = [(int(at), int(at) + c.payload_size) for at, c in zip(fill.at, mine)]
            assert all(at % devdecode.ALIGN == 0 for at, _ in ends)
            assert all(end <= nxt for (_, end), (nxt, _) in zip(ends, ends[1:]))  # payloads never overlap
            assert ends[-1][1] <= fill.table_at
            assert list(fill.lz4) == [i for i, c in enumerate(mine) if c.encoding != ENC_RAW]


@needs_lz4
def test_byte_planes_are_bounded_by_the_scratch_and_a_chunk_too_large_refuses_the_plan(state):
    path, _, _ = state
    with Snapshot.open(path) as snap:
        chunks = snap.chunk_index(A).chunks
        shuffled = sum(c.encoding == ENC_LZ4_SHUFFLE for c in chunks)
        assert shuffled >= 5
        fills = devdecode.plan(chunks, 1 << 30, 2 * CHUNK).fills
        for fill in fills:
            planes = [c.length for c in chunks[fill.start : fill.stop] if c.encoding == ENC_LZ4_SHUFFLE]
            assert sum(-(-n // devdecode.PLANE_ALIGN) * devdecode.PLANE_ALIGN for n in planes) <= 2 * CHUNK
        assert len(fills) >= shuffled // 2
        assert devdecode.plan(chunks, 1 << 30, CHUNK - 1) is None  # a chunk's planes do not fit the scratch
        assert devdecode.plan(chunks, max(c.payload_size for c in chunks) - 1, 1 << 30) is None


@needs_lz4
def test_the_tables_point_each_chunk_at_its_payload_body_and_destination(state):
    path, _, _ = state
    with Snapshot.open(path) as snap:
        chunks = snap.chunk_index(B).chunks
        plan = devdecode.plan(chunks, 1 << 30, 1 << 30)
        (fill,) = plan.fills
        slot, scratch, dst = 0x10_0000_0000, 0x20_0000_0000, 0x30_0000_0000
        rows = devdecode.table(plan, fill, slot, scratch, dst)
        lz4 = [(i, c, int(fill.at[i])) for i, c in enumerate(chunks) if c.encoding != ENC_RAW]
        assert len(rows) == len(lz4) and fill.size == fill.table_at + 40 * len(lz4)
        for row, (index, chunk, at) in zip(rows, lz4):
            assert row["src"] == slot + at + 16 and row["src_len"] == chunk.payload_size - 16
            assert row["raw_len"] == chunk.length and row["index"] == index and row["encoding"] == chunk.encoding
            assert row["out"] == row["dst"] == dst + chunk.offset  # plain LZ4 decodes in place
        raws = devdecode.raw_copies(plan, fill, 0x5000, dst)
        expected = [
            (dst + c.offset, 0x5000 + int(fill.at[i]) + 16, c.length)
            for i, c in enumerate(chunks)
            if c.encoding == ENC_RAW
        ]
        assert raws == expected and raws
        assert devdecode.unshuffle_grid(plan, fill) == (0, 0)
        reader = devdecode.reader_table(plan, fill, 0x5000, snapio.ENTRY_DTYPE, snapio.STORED)
        assert list(reader["file_offset"]) == [c.payload_at for c in chunks]
        assert list(reader["checksum"]) == [c.payload_sum for c in chunks]
        assert list(reader["dest"]) == [0x5000 + int(at) for at in fill.at] and set(reader["mode"]) == {snapio.STORED}

        floats = devdecode.plan(snap.chunk_index(A).chunks, 1 << 30, 1 << 30)
        planes = devdecode.table(floats, floats.fills[0], slot, scratch, dst)
        shuffled = planes[planes["encoding"] == ENC_LZ4_SHUFFLE]
        assert list(shuffled["out"]) == [scratch + i * CHUNK for i in range(len(shuffled))]  # byte planes: scratch
        assert list(shuffled["dst"]) == [dst + i * CHUNK for i in range(len(shuffled))]
        assert devdecode.unshuffle_grid(floats, floats.fills[0])[1] == len(planes)


@needs_lz4
def test_the_native_reader_hands_over_payloads_as_stored_and_checks_them(state, tmp_path):
    if snapio.library() is None:
        pytest.skip("needs a C compiler and xxhash.h: the native reader cannot be built here")
    path, _, _ = state
    raw = path.read_bytes()
    with snapio.NativeDecoder(2) as decoder, Snapshot.open(path) as snap:
        region = snap.chunk_index(B)
        plan = devdecode.plan(region.chunks, 1 << 30, 1 << 30)
        (fill,) = plan.fills
        buffer = np.zeros(fill.table_at, np.uint8)
        rows = devdecode.reader_table(plan, fill, int(buffer.ctypes.data), snapio.ENTRY_DTYPE, snapio.STORED)
        decoder.submit_stored(snap, region, region.chunks, rows).wait()
        for at, chunk in zip(fill.at, region.chunks):
            assert (
                buffer[at : at + chunk.payload_size].tobytes()
                == raw[chunk.payload_at : chunk.payload_at + chunk.payload_size]
            )
    broken = bytearray(raw)
    with Snapshot.open(path) as snap:
        victim = snap.chunk_index(B).chunks[1]
    broken[victim.payload_at + 20] ^= 1
    (tmp_path / "q.mneme").write_bytes(bytes(broken))
    with snapio.NativeDecoder(2) as decoder, Snapshot.open(tmp_path / "q.mneme") as snap:
        region = snap.chunk_index(B)
        out = np.zeros(victim.payload_size, np.uint8)
        rows = np.zeros(1, snapio.ENTRY_DTYPE)
        rows["file_offset"], rows["stored"], rows["checksum"] = (
            victim.payload_at,
            victim.payload_size,
            victim.payload_sum,
        )
        rows["dest"], rows["raw_length"], rows["encoding"] = out.ctypes.data, victim.length, victim.encoding
        rows["mode"] = snapio.STORED
        with pytest.raises(CorruptFileError, match="checksum") as info:
            decoder.submit_stored(snap, region, region.chunks[1:2], rows).wait()
        assert region.chunks[1].block in str(info.value)


def test_the_decode_place_is_chosen_by_argument_or_environment(monkeypatch):
    monkeypatch.delenv(devdecode.ENV, raising=False)
    assert devdecode.mode() == "auto"
    monkeypatch.setenv(devdecode.ENV, "host")
    assert devdecode.mode() == "host" and devdecode.mode("device") == "device"
    monkeypatch.setenv(devdecode.ENV, "gpu")
    with pytest.raises(UsageError, match="MNEME_CUDA_RESTORE_DECODE='gpu'"):
        devdecode.mode()
