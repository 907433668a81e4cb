"""Snapshot format version 2: LZ4 chunks (plain and of byte-shuffled data), written and read.

Files are built here byte by byte from docs/formats.md with the system's liblz4 (no Mneme
writer), and written by SnapshotWriter; both read back exactly, and the version rules hold.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest
import xxhash

from mneme.core.errors import CorruptFileError, UsageError
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotWriter, codec
from mneme.core.snapshot.format import ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW

pytestmark = pytest.mark.skipif(not codec.lz4_available(), reason="needs liblz4.so.1: the system's LZ4 library")

ADDR, OTHER = 0x7F12_3400_0000, 0x7F12_3500_0000


def xxh(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def string(text: str) -> bytes:
    return struct.pack("<I", len(text)) + text.encode()


def lz4_block(data: bytes) -> bytes:
    """One LZ4 block straight from liblz4 (LZ4_compress_default), not through Mneme's codec."""
    lib = ctypes.CDLL("liblz4.so.1")
    out = ctypes.create_string_buffer(len(data) + len(data) // 255 + 16)
    n = lib.LZ4_compress_default(data, out, len(data), len(out))
    assert n > 0
    return out.raw[:n]


def hand_built(values: np.ndarray, version: int) -> bytes:
    """A prologue of one 3-chunk region: LZ4, LZ4 of byte planes, raw (docs/formats.md, version 2)."""
    data = bytearray()

    def block(tag: bytes, payload: bytes, seq=[0]) -> None:  # noqa: B006 - the running sequence number
        head = tag + struct.pack("<IQQ", seq[0], len(payload), xxh(payload))
        data.extend(head + struct.pack("<Q", xxh(head)) + payload)
        seq[0] += 1

    head = b"MNEMESNP" + struct.pack("<IIB3xI", version, 64, 0, 0) + bytes(range(16)) + bytes(16)
    data += head + struct.pack("<Q", xxh(head))
    block(b"META", string("s") + string("d") + string("hand-written"))
    block(b"ARGS", struct.pack("<IIQ", 0, 0, 0))
    raw, chunk = values.tobytes(), 4096
    block(b"REGN", struct.pack("<QQQQBBBB4xd", ADDR, len(raw), chunk, 3, 4, 10, 0, 0, 0.0))  # lz4 region, f32
    pieces = [raw[o : o + chunk] for o in range(0, len(raw), chunk)]
    block(b"CHNK", struct.pack("<QIB3x", 0, len(pieces[0]), 4) + lz4_block(pieces[0]))
    whole = len(pieces[1]) // 4 * 4
    planes = b"".join(pieces[1][j:whole:4] for j in range(4)) + pieces[1][whole:]
    block(b"CHNK", struct.pack("<QIB3x", chunk, len(pieces[1]), 5) + struct.pack("<B7x", 4) + lz4_block(planes))
    block(b"CHNK", struct.pack("<QIB3x", 2 * chunk, len(pieces[2]), 0) + pieces[2])
    block(b"END ", struct.pack("<QQQ", 6, 1, 0))
    return bytes(data)


@pytest.fixture
def values():
    return (np.arange(2900, dtype=np.float32) * np.float32(0.25)).astype(np.float32)  # 11600 bytes


def test_a_hand_built_version_2_file_of_lz4_chunks_reads_back(tmp_path, values):
    path = tmp_path / "p.mneme"
    path.write_bytes(hand_built(values, version=2))
    with Snapshot.open(path, verify=True) as snap:
        assert snap.version == 2 and snap.region(ADDR).encoding == "lz4"
        assert [c.encoding for c in snap.chunk_index(ADDR).chunks] == [ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW]
        assert snap.read_region(ADDR) == values.tobytes()


def test_lz4_in_a_file_that_says_version_1_is_refused_naming_the_version(tmp_path, values):
    path = tmp_path / "p.mneme"
    path.write_bytes(hand_built(values, version=1))
    with pytest.raises(CorruptFileError, match="needs snapshot format version 2, but the header says 1") as info:
        Snapshot.open(path)
    assert str(path) in str(info.value) and "REGN" in str(info.value)


def test_the_writer_picks_lz4_of_byte_planes_for_floats_and_writes_version_2_only_when_needed(tmp_path):
    field = (np.sin(np.arange(50_000, dtype=np.float32) * 1e-3) * 1000).astype(np.float32)
    text = b"the same words again " * 3000
    noise = np.random.default_rng(3).integers(0, 256, 9000, dtype=np.uint8)
    lz, zs = tmp_path / "lz4.mneme", tmp_path / "zstd.mneme"
    for path, encoding in ((lz, "lz4"), (zs, "zstd")):
        with SnapshotWriter(path, "prologue", chunk_size=1 << 16) as w:
            w.add_region(ADDR, field, encoding=encoding, policy=RegionPolicy("f32"))
            w.add_region(OTHER, text, encoding=encoding)
            w.add_region(OTHER + (1 << 20), noise, encoding=encoding)
    with Snapshot.open(lz, verify=True) as snap, Snapshot.open(zs) as zsnap:
        assert (snap.version, zsnap.version) == (2, 1)
        assert [r.encoding for r in snap.regions] == ["lz4", "lz4", "lz4"]
        assert set(c.encoding for c in snap.chunk_index(ADDR).chunks) == {ENC_LZ4_SHUFFLE}
        assert set(c.encoding for c in snap.chunk_index(OTHER).chunks) == {ENC_LZ4}
        assert set(c.encoding for c in snap.chunk_index(OTHER + (1 << 20)).chunks) == {ENC_RAW}
        assert snap.read_region(ADDR) == field.tobytes() and snap.read_region(OTHER) == text
        assert snap.read_region(OTHER + (1 << 20)) == noise.tobytes()
        assert snap.region(ADDR).stored_size < 0.7 * field.nbytes  # the byte planes compress
        assert snap.region(OTHER).stored_size < len(text) // 20


def test_by_default_lz4_regions_are_written_in_256_kib_chunks_and_the_others_in_4_mib(tmp_path):
    field = np.cos(np.arange((5 << 20) // 4 + 100, dtype=np.float32) * 1e-4).astype(np.float32)
    after = field.copy()
    after[-10:] = 0
    pro, epi = tmp_path / "DeviceState.prologue.s.d.mneme", tmp_path / "DeviceState.epilogue.s.d.mneme"
    with SnapshotWriter(pro, "prologue") as w:
        w.add_region(ADDR, field, encoding="lz4", policy=RegionPolicy("f32"))
        w.add_region_stream(
            OTHER, field.nbytes, (field[i : i + 1000] for i in range(0, field.size, 1000)), encoding="lz4"
        )
        w.add_region(OTHER + (8 << 20), field, encoding="zstd")
        w.add_region(OTHER + (16 << 20), field)
    with Snapshot.open(pro, verify=True) as p:
        sizes = [(r.encoding, r.chunk_size, r.num_chunks) for r in p.regions]
        assert sizes == [("lz4", 256 << 10, 21), ("lz4", 256 << 10, 21), ("zstd", 4 << 20, 2), ("raw", 4 << 20, 2)]
        assert all(p.read_region(r.addr) == field.tobytes() for r in p.regions)
        with SnapshotWriter(epi, "epilogue") as w:
            w.add_diff_region(ADDR, p, after)  # its base has other chunk boundaries
        with Snapshot.open(epi, base=p, verify=True) as e:
            assert (e.region(ADDR).chunk_size, e.read_region(ADDR)) == (4 << 20, after.tobytes())


def test_an_epilogue_keeps_both_its_base_id_and_version_2_in_the_rewritten_header(tmp_path):
    before = np.arange(20_000, dtype=np.float32)
    after = before.copy()
    after[7] = -1
    pro, epi = tmp_path / "DeviceState.prologue.s.d.mneme", tmp_path / "DeviceState.epilogue.s.d.mneme"
    with SnapshotWriter(pro, "prologue", chunk_size=1 << 14) as w:
        w.add_region(ADDR, before, encoding="lz4", policy=RegionPolicy("f32"))
    with Snapshot.open(pro) as p:
        with SnapshotWriter(epi, "epilogue", chunk_size=1 << 14) as w:
            w.add_diff_region(ADDR, p, after)
            w.add_region(OTHER, after, encoding="lz4")
        with Snapshot.open(epi, base=p, verify=True) as e:
            assert e.version == 2 and e.base_id == p.snapshot_id
            assert e.read_region(ADDR) == after.tobytes() == e.read_region(OTHER)


@pytest.mark.parametrize("kind", ["floats", "text", "zeros", "noise"])
def test_the_python_fallback_decodes_what_liblz4_encodes(kind):
    rng = np.random.default_rng(9)
    data = {
        "floats": codec.shuffle(rng.standard_normal(30_000).astype(np.float32).tobytes(), 4),
        "text": b"abcabcabd" * 5000 + b"tail",
        "zeros": bytes(70_000),
        "noise": rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes(),
    }[kind]
    block = lz4_block(data)
    assert codec.lz4_decode_python(block, len(data)) == data == codec.lz4_decompress(block, len(data))


def test_a_cut_or_wrongly_sized_lz4_block_is_an_error_in_both_decoders():
    data = b"abcabcabd" * 3000 + bytes(range(200))
    block = lz4_block(data)
    for decode in (codec.lz4_decompress, codec.lz4_decode_python):
        for cut in (1, 7, len(block) // 2, len(block) - 1):
            with pytest.raises(ValueError):
                decode(block[:cut], len(data))
        with pytest.raises(ValueError):
            decode(block, len(data) + 1)
        with pytest.raises(ValueError):
            decode(block, len(data) - 1)


def test_without_liblz4_lz4_files_still_read_and_writing_lz4_is_refused_with_a_hint(tmp_path, monkeypatch, values):
    path = tmp_path / "p.mneme"
    path.write_bytes(hand_built(values, version=2))
    monkeypatch.setattr(codec, "lz4_library", lambda: None)  # as on a machine without liblz4.so.1
    with Snapshot.open(path, verify=True) as snap:
        assert snap.read_region(ADDR) == values.tobytes()  # through the Python decoder
    target = tmp_path / "new.mneme"
    with pytest.raises(UsageError, match="liblz4.so.1.*apt install liblz4-1"):
        with SnapshotWriter(target, "prologue") as w:
            w.add_region(ADDR, values, encoding="lz4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.mneme"]  # nothing left behind


def test_an_lz4_body_that_does_not_decode_is_reported_with_its_block(tmp_path, values):
    raw = bytearray(hand_built(values, version=2))
    # Chunk 0's body becomes a match pointing before the output start; the checksums are recomputed.
    pos = 64
    while raw[pos : pos + 4] != b"CHNK":
        pos += 32 + struct.unpack_from("<Q", raw, pos + 8)[0]
    size = struct.unpack_from("<Q", raw, pos + 8)[0]
    body_at = pos + 32 + 16
    raw[body_at : body_at + 4] = bytes([0x0F, 0xFF, 0xFF, 0x00])  # no literals, offset 0xFFFF
    payload = bytes(raw[pos + 32 : pos + 32 + size])
    raw[pos + 16 : pos + 24] = struct.pack("<Q", xxh(payload))
    raw[pos + 24 : pos + 32] = struct.pack("<Q", xxh(bytes(raw[pos : pos + 24])))
    path = tmp_path / "p.mneme"
    path.write_bytes(bytes(raw))
    with Snapshot.open(path) as snap, pytest.raises(CorruptFileError, match="LZ4 data does not decode") as info:
        snap.read_region(ADDR)
    assert "CHNK" in str(info.value) and "chunk 0" in str(info.value)


def test_a_padded_block_decodes_only_when_told_to_stop_at_its_size():
    data = b"fatbin entry " * 500
    padded = lz4_block(data) + bytes(8)  # a fatbin entry's payload may be padded after its block
    assert codec.lz4_decode_python(padded, len(data), stop_at_size=True) == data
    with pytest.raises(ValueError):  # a snapshot chunk must end with its block
        codec.lz4_decode_python(padded, len(data))
