"""The native snapshot reader (mneme.core.snapshot.snapio) decodes exactly what the Python reader does, and fails alike."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash

from mneme.core.errors import CorruptFileError, FormatError
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotWriter
from mneme.core.snapshot import codec, snapio
from mneme.core.snapshot.format import ENC_DIFF, ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW, ENC_SHUFFLE, ENC_ZSTD


A, B, C = 0x7000_0000, 0x7100_0000, 0x7200_0000
D, E = 0x7300_0000, 0x7400_0000  # LZ4 regions (snapshot format version 2), where liblz4 is installed
CHUNK = 1 << 16


@pytest.fixture(scope="module")
def decoder():
    if snapio.library() is None:
        pytest.skip("needs a C compiler and xxhash.h: the native reader cannot be built here")
    with snapio.NativeDecoder(4) as dec:
        yield dec


def write_state(folder):
    """A prologue with raw, plain-zstd and shuffled-zstd regions (partial last chunks) and a diff epilogue."""
    rng = np.random.default_rng(11)
    noise = rng.integers(0, 256, 5 * CHUNK + 123, dtype=np.uint8)
    smooth = (np.sin(np.arange(6 * CHUNK // 4 + 17, dtype=np.float32) * 1e-3) * 1000).round().astype(np.float32)
    counts = np.zeros(3 * CHUNK + 40, np.uint8)
    counts[::97] = 7
    pro = folder / "DeviceState.prologue.s.d.mneme"
    with SnapshotWriter(pro, "prologue", static_hash="s", dynamic_hash="d", chunk_size=CHUNK) as w:
        w.set_args(b"\x00" * 8)
        w.add_region(A, noise)
        w.add_region(B, smooth, encoding="zstd", policy=RegionPolicy("f32"))
        w.add_region(C, counts, encoding="zstd")
        if codec.lz4_available():
            w.add_region(D, smooth, encoding="lz4", policy=RegionPolicy("f32"))
            w.add_region(E, counts, encoding="lz4")
    after = smooth.copy()
    after[5] = 42.0  # a few bytes changed: a diff chunk
    after[2 * CHUNK // 4 : 3 * CHUNK // 4] = rng.standard_normal(CHUNK // 4)  # a chunk rewritten: stored whole
    epi = folder / "DeviceState.epilogue.s.d.mneme"
    with Snapshot.open(pro) as p, SnapshotWriter(epi, "epilogue", chunk_size=CHUNK) as w:
        w.add_diff_region(B, p, after, policy=RegionPolicy("f32", 1e-6))
    return pro, epi


@pytest.fixture
def state(tmp_path):
    return write_state(tmp_path)


def encodings(snap, addr):
    return {c.encoding for c in snap._region(addr).chunks}


def test_every_chunk_encoding_decodes_to_the_python_readers_bytes(decoder, state):
    pro, epi = state
    with Snapshot.open(pro) as p, Snapshot.open(epi, base=p) as e:
        assert encodings(p, A) == {ENC_RAW} and ENC_SHUFFLE in encodings(p, B) and ENC_ZSTD in encodings(p, C)
        assert ENC_DIFF in encodings(e, B) and len(encodings(e, B)) == 2
        if codec.lz4_available():
            assert ENC_LZ4_SHUFFLE in encodings(p, D) and ENC_LZ4 in encodings(p, E)
        for snap in (p, e):
            for region in snap.regions:
                out = np.full(region.size, 0xAB, np.uint8)
                decoder.read_range_into(snap, region.addr, 0, out)
                assert out.tobytes() == snap.read_region(region.addr), hex(region.addr)


@pytest.mark.parametrize(
    "offset, length", [(1, 10), (CHUNK - 3, 7), (CHUNK // 2, 3 * CHUNK), (4 * CHUNK + 5, CHUNK + 100)]
)
def test_ranges_that_cut_chunks_match_the_python_reader(decoder, state, offset, length):
    pro, epi = state
    with Snapshot.open(pro) as p, Snapshot.open(epi, base=p) as e:
        for snap, addr in ((p, A), (p, B), (e, B)):
            length_here = min(length, snap.region(addr).size - offset)
            out = np.zeros(length_here, np.uint8)
            decoder.read_range_into(snap, addr, offset, out)
            assert out.tobytes() == snap.read_range(addr, offset, length_here)


def chunk_payloads(path):
    """File offsets of every CHNK payload, walking the blocks as docs/formats.md describes."""
    data, pos, found = path.read_bytes(), 64, []
    while pos < len(data):
        tag, _seq, size = struct.unpack_from("<4sIQ", data, pos)
        if tag == b"CHNK":
            found.append(pos + 32)
        pos += 32 + size
    return found


def python_error(path, addr, base=None):
    with Snapshot.open(path, base=base) as snap, pytest.raises(FormatError) as info:
        snap.read_region(addr)
    return info.value


@pytest.mark.parametrize("which, addr", [(1, A), (0, B), (-1, C), (0, D), (-1, E)])  # raw, zstd and LZ4 chunks
def test_a_flipped_byte_names_the_file_and_block_like_the_python_reader(decoder, state, which, addr):
    pro, _ = state
    with Snapshot.open(pro) as snap:
        if addr not in snap:
            pytest.skip("needs liblz4.so.1: no LZ4 regions without it")
        at = snap.chunk_index(addr).chunks[which].payload_at + 17  # the first body byte after the 16-byte prefix
    data = bytearray(pro.read_bytes())
    data[at] ^= 0x10
    pro.write_bytes(bytes(data))
    expected = python_error(pro, addr)
    with Snapshot.open(pro) as snap, pytest.raises(CorruptFileError) as info:
        decoder.read_range_into(snap, addr, 0, np.zeros(snap.region(addr).size, np.uint8))
    assert str(info.value) == str(expected)
    assert str(pro) in str(info.value) and "payload checksum mismatch" in str(info.value)
    assert info.value.block == expected.block and info.value.block.startswith("block #")


@pytest.mark.skipif(not codec.lz4_available(), reason="needs liblz4.so.1")
@pytest.mark.parametrize("addr", [D, E])
def test_lz4_chunks_that_do_not_decode_fail_like_the_python_reader(decoder, state, addr):
    pro, _ = state
    with Snapshot.open(pro) as snap:
        chunk = snap.chunk_index(addr).chunks[0]
    data = bytearray(pro.read_bytes())
    body = chunk.payload_at + 16 + (8 if chunk.encoding == ENC_LZ4_SHUFFLE else 0)
    data[body : body + 4] = bytes([0x0F, 0xFF, 0xFF, 0x00])  # a match before the start of the output
    payload = bytes(data[chunk.payload_at : chunk.payload_at + chunk.payload_size])
    head = chunk.payload_at - 32
    data[head + 16 : head + 24] = struct.pack("<Q", xxhash.xxh3_64_intdigest(payload))
    data[head + 24 : head + 32] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(data[head : head + 24])))
    pro.write_bytes(bytes(data))
    expected = python_error(pro, addr)
    with Snapshot.open(pro) as snap, pytest.raises(CorruptFileError) as info:
        decoder.read_range_into(snap, addr, 0, np.zeros(snap.region(addr).size, np.uint8))
    assert str(info.value) == str(expected) and "LZ4 data does not decode" in str(info.value)


def test_a_diff_against_another_prologue_is_refused_like_the_python_reader(decoder, tmp_path):
    rng = np.random.default_rng(5)
    before, other = (rng.integers(0, 256, 2 * CHUNK, dtype=np.uint8) for _ in range(2))
    after = before.copy()
    after[100] ^= 1
    paths = {name: tmp_path / f"DeviceState.{name}.s.d.mneme" for name in ("prologue", "epilogue")}
    with SnapshotWriter(paths["prologue"], "prologue", static_hash="s", dynamic_hash="d", chunk_size=CHUNK) as w:
        w.set_args(b"")
        w.add_region(A, other)  # not the bytes the epilogue was diffed against
    with SnapshotWriter(paths["epilogue"], "epilogue", chunk_size=CHUNK) as w:
        w.add_diff_region(A, before, after)  # from bytes: no prologue id to check at open
    with Snapshot.open(paths["prologue"]) as p:
        expected = python_error(paths["epilogue"], A, base=p)
        with Snapshot.open(paths["epilogue"], base=p) as e, pytest.raises(FormatError) as info:
            decoder.read_range_into(e, A, 0, np.zeros(after.nbytes, np.uint8))
    assert str(info.value) == str(expected) and "other prologue bytes" in str(info.value)


def test_a_truncated_file_is_reported_with_its_block(decoder, state):
    pro, _ = state
    with Snapshot.open(pro) as snap:  # opened whole (the layout is checked at open), then cut short
        last = snap._region(C).chunks[-1]
        with open(pro, "r+b") as handle:
            handle.truncate(last.payload_at + 20)
        with pytest.raises(CorruptFileError) as info:
            decoder.read_range_into(snap, C, last.offset, np.zeros(last.length, np.uint8))
    assert last.block in str(info.value) and "truncated" in str(info.value)


def test_without_the_library_there_is_no_native_decoder(monkeypatch, tmp_path):
    monkeypatch.setenv("MNEME_SNAPIO", str(tmp_path / "missing.so"))
    monkeypatch.setenv("PATH", str(tmp_path))  # and no compiler to build it
    monkeypatch.delenv("CC", raising=False)
    snapio.LOADER.forget()
    try:
        assert snapio.native_decoder(2) is None
    finally:
        snapio.LOADER.forget()


def test_the_parallel_read_copies_the_file_bytes(decoder, state):
    pro, _ = state
    data = pro.read_bytes()
    out = np.zeros(len(data) - 100, np.uint8)
    with open(pro, "rb") as handle:
        snapio.read_parallel(handle.fileno(), 100, out.nbytes, int(out.ctypes.data), 4, piece=4096)
    assert out.tobytes() == data[100:]


def test_decodes_submitted_behind_each_other_all_land_and_a_failure_is_raised_by_its_own_wait(decoder, state):
    pro, _ = state
    at = chunk_payloads(pro)[2] + 17  # region A's third chunk
    data = bytearray(pro.read_bytes())
    data[at] ^= 1
    pro.write_bytes(bytes(data))
    with Snapshot.open(pro) as snap:
        size = snap.region(B).size
        outs = [np.zeros(size, np.uint8) for _ in range(3)]
        pending = [decoder.submit(snap, B, 0, int(o.ctypes.data), size) for o in outs]
        decoder.submit(snap, A, 0, int(outs[0].ctypes.data), 0).wait()  # an empty range is fine
        broken = np.zeros(snap.region(A).size, np.uint8)
        failing = decoder.submit(snap, A, 0, int(broken.ctypes.data), broken.nbytes)
        for p in pending:
            p.wait()
        with pytest.raises(CorruptFileError, match="payload checksum mismatch"):
            failing.wait()
        expected = snap.read_region(B)
    assert all(o.tobytes() == expected for o in outs)
