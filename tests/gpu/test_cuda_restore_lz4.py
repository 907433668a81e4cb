"""LZ4 snapshot regions restored by decoding on the device (`mneme_cuda.devdecode`, `kernels/lz4.cu`).

Every case writes a real snapshot with Mneme's writer (liblz4), restores it through the device
decoder and compares the device bytes with the data written; the host reader's restore of the
same file is the cross-check where the two paths could differ.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from mneme.core.errors import CorruptFileError
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotType, SnapshotWriter, codec
from mneme.core.snapshot.format import ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW, checksum

pytest.importorskip("mneme_cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not codec.lz4_available(), reason="needs liblz4.so.1")]

BASE = 0x240000000000
MiB, KiB = 1 << 20, 1 << 10


@pytest.fixture(scope="module")
def space(cuda_device):
    cuda_device.reserve(BASE, 1 << 30)
    cuda_device.map(BASE, 512 * MiB)
    assert cuda_device._native() is not None, "the native snapshot reader is missing: run scripts/gpu-suite --prepare"
    return BASE


def mixed_bytes(size: int, seed: int) -> np.ndarray:
    """Zero runs, short and long repeated patterns (matches overlapping their output), noise, counters."""
    rng = np.random.default_rng(seed)
    parts, total = [], 0
    while total < size:
        kind = rng.integers(0, 5)
        n = int(rng.integers(1, 300 * KiB))
        if kind == 0:
            part = np.zeros(n, np.uint8)
        elif kind == 1:
            period = int(rng.choice([1, 2, 3, 7, 16, 17, 511, 512, 513, 700, 4096, 40000]))
            part = np.resize(rng.integers(0, 256, period, dtype=np.uint8), n)
        elif kind == 2:
            part = rng.integers(0, 256, n, dtype=np.uint8)
        elif kind == 3:
            part = (np.arange(n) // int(rng.integers(1, 50))).astype(np.uint8)
        else:
            part = rng.integers(0, 3, n, dtype=np.uint8)
        parts.append(part)
        total += n
    return np.concatenate(parts)[:size]


def write(path, addr: int, data: np.ndarray, chunk: int, policy=None) -> None:
    with SnapshotWriter(path, SnapshotType.PROLOGUE, static_hash="t", dynamic_hash="t", chunk_size=chunk) as w:
        w.set_args(b"")
        w.add_region(addr, data, encoding="lz4", policy=policy)


def restore_on_device(device, snapshot, addr: int, dst: int | None = None) -> int:
    device.restore_decode = "device"
    try:
        size = device.write_snapshot_region(snapshot, addr, dst)
    finally:
        device.restore_decode = None
    assert device.last_restore == "device-decode"
    return size


CASES = {
    # name: (data, policy, chunk size)
    "f32 field, 256 KiB chunks": (
        lambda: np.cumsum(np.random.default_rng(1).standard_normal(20 * MiB + 3)).astype(np.float32),
        "f32",
        256 * KiB,
    ),
    "f32 field, 4 MiB chunks": (
        lambda: (np.sin(np.arange(24 * MiB, dtype=np.float32) * 1e-4) * 300).astype(np.float32),
        "f32",
        4 * MiB,
    ),
    "f64, odd size": (lambda: np.linspace(0, 1, 3 * MiB + 7).astype(np.float64), "f64", 256 * KiB),
    "f16": (lambda: np.linspace(-2, 2, 5 * MiB + 1).astype(np.float16), "f16", 64 * KiB),
    "mixed bytes": (lambda: mixed_bytes(90 * MiB + 5, 3), None, 256 * KiB),
    "mixed bytes, 1 MiB chunks": (lambda: mixed_bytes(40 * MiB + 1, 4), None, MiB),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lz4_regions_decode_on_the_device_bit_exact(cuda_device, space, tmp_path, name):
    make, dtype, chunk = CASES[name]
    values = make()
    data = values.view(np.uint8).reshape(-1)
    policy = RegionPolicy(dtype) if dtype else None
    write(tmp_path / "p.mneme", space, data, chunk, policy)
    with Snapshot.open(tmp_path / "p.mneme") as snapshot:
        encodings = {c.encoding for c in snapshot.chunk_index(space).chunks}
        assert encodings & {ENC_LZ4, ENC_LZ4_SHUFFLE}, encodings
        if dtype == "f32":  # the writer picks byte planes for these fields (for others whichever is smaller)
            assert ENC_LZ4_SHUFFLE in encodings
        cuda_device.fill(space, data.nbytes, 0xA5)
        assert restore_on_device(cuda_device, snapshot, space) == data.nbytes
        got = np.frombuffer(cuda_device.read(space, data.nbytes), np.uint8)
        bad = np.flatnonzero(got != data)
        assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[0]}; chunk encodings {encodings}"


def test_a_region_with_raw_chunks_among_lz4_ones_and_another_destination(cuda_device, space, tmp_path):
    rng = np.random.default_rng(5)
    data = mixed_bytes(30 * MiB, 6)
    data[5 * MiB : 9 * MiB] = rng.integers(0, 256, 4 * MiB, dtype=np.uint8)  # noise: stored raw
    write(tmp_path / "p.mneme", space, data, 256 * KiB)
    with Snapshot.open(tmp_path / "p.mneme") as snapshot:
        encodings = [c.encoding for c in snapshot.chunk_index(space).chunks]
        assert ENC_RAW in encodings and {ENC_LZ4, ENC_LZ4_SHUFFLE} & set(encodings)
        other = cuda_device.alloc(data.nbytes + 64)
        try:
            restore_on_device(cuda_device, snapshot, space, dst=other.addr + 1)  # an odd destination
            assert cuda_device.read(other.addr + 1, data.nbytes) == data.tobytes()
        finally:
            cuda_device.free(other)


def test_an_odd_destination_of_byte_planes_unshuffles_bytewise(cuda_device, space, tmp_path):
    values = (np.cos(np.arange(3 * MiB, dtype=np.float32) * 1e-3) * 77).astype(np.float32)
    write(tmp_path / "p.mneme", space, values, 256 * KiB, RegionPolicy("f32"))
    with Snapshot.open(tmp_path / "p.mneme") as snapshot:
        other = cuda_device.alloc(values.nbytes + 64)
        try:
            restore_on_device(cuda_device, snapshot, space, dst=other.addr + 3)
            assert cuda_device.read(other.addr + 3, values.nbytes) == values.tobytes()
        finally:
            cuda_device.free(other)


def test_device_and_host_decoding_restore_the_same_bytes(cuda_device, space, tmp_path):
    values = (np.cumsum(np.random.default_rng(8).standard_normal(8 * MiB)) * 0.01).astype(np.float32)
    write(tmp_path / "p.mneme", space, values, 256 * KiB, RegionPolicy("f32"))
    with Snapshot.open(tmp_path / "p.mneme") as snapshot:
        restore_on_device(cuda_device, snapshot, space)
        on_device = cuda_device.read(space, values.nbytes)
        cuda_device.fill(space, values.nbytes, 0)
        cuda_device.restore_decode = "host"
        try:
            cuda_device.write_snapshot_region(snapshot, space)
        finally:
            cuda_device.restore_decode = None
        assert cuda_device.last_restore == "native"
        assert cuda_device.read(space, values.nbytes) == on_device == values.tobytes()


def _break_chunk(path, index: int) -> None:
    """Make chunk `index`'s LZ4 block undecodable (a match before the output's start), checksums recomputed."""
    raw = bytearray(path.read_bytes())
    with Snapshot.open(path) as snapshot:
        chunk = snapshot.chunk_index(BASE).chunks[index]
    body = chunk.payload_at + 16 + (8 if chunk.encoding == ENC_LZ4_SHUFFLE else 0)
    raw[body : body + 4] = bytes([0x0F, 0xFF, 0xFF, 0x00])  # no literals, offset 0xFFFF
    head = chunk.payload_at - 32
    raw[head + 16 : head + 24] = struct.pack(
        "<Q", checksum(bytes(raw[chunk.payload_at : chunk.payload_at + chunk.payload_size]))
    )
    raw[head + 24 : head + 32] = struct.pack("<Q", checksum(bytes(raw[head : head + 24])))
    path.write_bytes(bytes(raw))


def test_an_undecodable_chunk_is_the_host_readers_error_and_the_device_stays_usable(cuda_device, space, tmp_path):
    data = mixed_bytes(6 * MiB, 9)
    path = tmp_path / "p.mneme"
    write(path, space, data, 256 * KiB)
    with Snapshot.open(path) as snapshot:
        lz4_chunks = [i for i, c in enumerate(snapshot.chunk_index(space).chunks) if c.encoding == ENC_LZ4]
    _break_chunk(path, lz4_chunks[3])
    with Snapshot.open(path) as snapshot:
        cuda_device.restore_decode = "device"
        try:
            with pytest.raises(CorruptFileError, match="LZ4 data does not decode") as info:
                cuda_device.write_snapshot_region(snapshot, space)
        finally:
            cuda_device.restore_decode = None
    assert "CHNK" in str(info.value)
    write(tmp_path / "q.mneme", space, data, 256 * KiB)  # the next restore on the same device works
    with Snapshot.open(tmp_path / "q.mneme") as snapshot:
        restore_on_device(cuda_device, snapshot, space)
    assert cuda_device.read(space, data.nbytes) == data.tobytes()


def test_a_corrupt_payload_is_caught_by_its_checksum_before_the_device_sees_it(cuda_device, space, tmp_path):
    data = mixed_bytes(3 * MiB, 10)
    path = tmp_path / "p.mneme"
    write(path, space, data, 256 * KiB)
    with Snapshot.open(path) as snapshot:
        chunk = snapshot.chunk_index(space).chunks[2]
    raw = bytearray(path.read_bytes())
    raw[chunk.payload_at + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    with Snapshot.open(path) as snapshot, pytest.raises(CorruptFileError, match="checksum"):
        restore_on_device(cuda_device, snapshot, space)


def _prologue_of_every_kind(path, base: int) -> dict[int, np.ndarray]:
    """Regions restored by each path under "auto": a large LZ4 region (on the device), small LZ4, zstd and
    raw regions (on the host), an empty one and a one-byte one. Returns {address: data}."""
    field = (np.sin(np.arange(68 * MiB + 3, dtype=np.float32) * 1e-4) * 300).astype(np.float32)  # 272 MiB
    regions = {
        base: (field, "lz4", "f32"),
        base + 288 * MiB: (mixed_bytes(5 * MiB + 1, 11), "lz4", "u8"),
        base + 296 * MiB: (np.linspace(0, 1, 2 * MiB + 5).astype(np.float64), "zstd", "f64"),
        base + 316 * MiB: (np.random.default_rng(12).integers(0, 256, 9 * MiB + 7, dtype=np.uint8), "raw", "u8"),
        base + 336 * MiB: (np.zeros(0, np.uint8), "lz4", "u8"),
        base + 337 * MiB: (np.array([7], np.uint8), "raw", "u8"),
    }
    with SnapshotWriter(path, SnapshotType.PROLOGUE, static_hash="t", dynamic_hash="t") as w:
        w.set_args(b"")
        for addr, (data, encoding, dtype) in regions.items():
            w.add_region(addr, data, encoding=encoding, policy=RegionPolicy(dtype))
    return {addr: data for addr, (data, _, _) in regions.items()}


def test_every_region_of_a_prologue_restores_in_one_pass_by_each_path(cuda_device, space, tmp_path):
    regions = _prologue_of_every_kind(tmp_path / "p.mneme", space)
    with Snapshot.open(tmp_path / "p.mneme") as snapshot:
        assert snapshot.region(space).chunk_size == 256 * KiB  # the writer's default for LZ4
        cuda_device.fill(space, 340 * MiB, 0xAB)
        assert cuda_device.write_snapshot_regions(snapshot) == sum(d.nbytes for d in regions.values())
        assert cuda_device.last_restore == "device-decode+native"
        for addr, data in regions.items():
            assert cuda_device.read(addr, data.nbytes) == data.tobytes(), hex(addr)
        # Some regions, elsewhere: the pairs say where each goes.
        picked = [space + 288 * MiB, space + 316 * MiB, space]
        others = [cuda_device.alloc(regions[addr].nbytes + 16) for addr in picked]
        try:
            targets = [(addr, other.addr + 5) for addr, other in zip(picked, others)]
            assert cuda_device.write_snapshot_regions(snapshot, targets) == sum(regions[a].nbytes for a in picked)
            for addr, dst in targets:
                assert cuda_device.read(dst, regions[addr].nbytes) == regions[addr].tobytes(), hex(addr)
        finally:
            for other in others:
                cuda_device.free(other)


def test_a_corrupt_chunk_in_the_middle_of_a_one_pass_restore_names_its_block_and_the_next_restore_works(
    cuda_device, space, tmp_path
):
    path = tmp_path / "p.mneme"
    regions = _prologue_of_every_kind(path, space)
    with Snapshot.open(path) as snapshot:
        chunk = snapshot.chunk_index(space + 316 * MiB).chunks[1]  # the raw region's second chunk
    raw = bytearray(path.read_bytes())
    raw[chunk.payload_at + 100] ^= 0x01
    path.write_bytes(bytes(raw))
    with Snapshot.open(path) as snapshot, pytest.raises(CorruptFileError, match="checksum") as info:
        cuda_device.write_snapshot_regions(snapshot)
    assert chunk.block in str(info.value)
    _prologue_of_every_kind(path, space)
    with Snapshot.open(path) as snapshot:
        cuda_device.write_snapshot_regions(snapshot)
    for addr, data in regions.items():
        assert cuda_device.read(addr, data.nbytes) == data.tobytes(), hex(addr)
