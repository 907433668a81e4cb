"""docs/formats.md is enough to write a snapshot: files built here byte by byte, as a C recorder
would (struct + XXH3 + zstd, no Mneme writer), read back exactly."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash
import zstandard

from mneme.core.errors import CorruptFileError
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotType, compare

ADDR = 0x7F12_3400_0000


def xxh(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def string(text: str) -> bytes:
    return struct.pack("<I", len(text.encode())) + text.encode()


class Builder:
    """Writes blocks exactly as docs/formats.md lays them out."""

    def __init__(self, kind: int, snapshot_id: bytes, base_id: bytes = bytes(16)):
        head = b"MNEMESNP" + struct.pack("<IIB3xI", 1, 64, kind, 0) + snapshot_id + base_id
        self.data = bytearray(head + struct.pack("<Q", xxh(head)))
        self.seq = 0

    def block(self, tag: bytes, payload: bytes) -> None:
        head = tag + struct.pack("<IQQ", self.seq, len(payload), xxh(payload))
        self.data += head + struct.pack("<Q", xxh(head)) + payload
        self.seq += 1

    def region(self, addr, size, chunk_size, encoding, dtype=0, norm=0, flags=0, threshold=0.0):
        count = -(-size // chunk_size)
        self.block(
            b"REGN", struct.pack("<QQQQBBBB4xd", addr, size, chunk_size, count, encoding, dtype, norm, flags, threshold)
        )

    def chunk(self, offset: int, raw_length: int, encoding: int, body: bytes) -> None:
        self.block(b"CHNK", struct.pack("<QIB3x", offset, raw_length, encoding) + body)

    def end(self, regions: int, globals_: int) -> bytes:
        self.block(b"END ", struct.pack("<QQQ", self.seq, regions, globals_))
        return bytes(self.data)


def prologue_bytes(values: np.ndarray) -> bytes:
    raw = values.tobytes()
    b = Builder(0, bytes(range(16)))
    b.block(b"META", string("static01") + string("dynamic01") + string("hand-written test recorder"))
    args = struct.pack("<QQi", ADDR, ADDR + 4096, 7)  # two pointers and an int
    table = struct.pack("<II", 3, 0) + struct.pack("<IIIIII", 0, 8, 8, 8, 16, 4)
    b.block(b"ARGS", table + struct.pack("<Q", len(args)) + args)
    chunk = 4096
    b.region(ADDR, len(raw), chunk, encoding=1)
    for index, offset in enumerate(range(0, len(raw), chunk)):
        piece = raw[offset : offset + chunk]
        if index == 0:  # raw
            b.chunk(offset, len(piece), 0, piece)
        elif index == 1:  # zstd
            b.chunk(offset, len(piece), 1, zstandard.ZstdCompressor().compress(piece))
        else:  # byte-shuffled zstd, element size 4
            whole = len(piece) // 4 * 4
            planes = b"".join(piece[j:whole:4] for j in range(4)) + piece[whole:]
            body = struct.pack("<B7x", 4) + zstandard.ZstdCompressor().compress(planes)
            b.chunk(offset, len(piece), 3, body)
    b.block(b"GLOB", string("gCounter") + struct.pack("<i", 41))
    return b.end(regions=1, globals_=1)


def epilogue_bytes(before: bytes, after: bytes, chunk: int = 4096) -> bytes:
    b = Builder(1, bytes(range(16, 32)), base_id=bytes(range(16)))
    b.block(b"META", string("static01") + string("dynamic01") + string("hand-written test recorder"))
    b.block(b"ARGS", struct.pack("<II", 0, 0) + struct.pack("<Q", 0))
    # f32, relative, Linf, threshold 1e-6
    b.region(ADDR, len(after), chunk, encoding=2, dtype=10, norm=3, flags=1, threshold=1e-6)
    for offset in range(0, len(after), chunk):
        old, new = before[offset : offset + chunk], after[offset : offset + chunk]
        runs = []
        for start in range(0, len(new), 256):  # any run layout is valid; 256-byte steps here
            if old[start : start + 256] != new[start : start + 256]:
                runs.append((start, min(256, len(new) - start)))
        xor = b"".join(bytes(x ^ y for x, y in zip(old[o : o + n], new[o : o + n])) for o, n in runs)
        body = struct.pack("<IB3xQ", len(runs), 0, xxh(old))
        body += b"".join(struct.pack("<II", o, n) for o, n in runs) + xor
        b.chunk(offset, len(new), 2, body)
    b.block(b"GLOB", string("gCounter") + struct.pack("<i", 42))
    return b.end(regions=1, globals_=1)


@pytest.fixture
def values():
    return (np.arange(3000, dtype=np.float32) * np.float32(0.25)).astype(np.float32)  # 12000 bytes, 3 chunks


def test_hand_built_prologue_reads_back(tmp_path, values):
    path = tmp_path / "DeviceState.prologue.static01.dynamic01.mneme"
    path.write_bytes(prologue_bytes(values))
    with Snapshot.open(path, verify=True) as snap:
        assert snap.kind is SnapshotType.PROLOGUE and snap.version == 1
        assert (snap.static_hash, snap.dynamic_hash, snap.producer) == (
            "static01",
            "dynamic01",
            "hand-written test recorder",
        )
        assert snap.snapshot_id == bytes(range(16))
        assert snap.arg_layout == [(0, 8), (8, 8), (16, 4)] and snap.num_args == 3
        assert struct.unpack("<QQi", snap.args) == (ADDR, ADDR + 4096, 7)
        (info,) = snap.regions
        assert (info.addr, info.size, info.encoding, info.num_chunks) == (ADDR, values.nbytes, "zstd", 3)
        assert snap.read_region(ADDR) == values.tobytes()
        assert snap.globals == {"gCounter": struct.pack("<i", 41)}


def test_hand_built_diff_epilogue_reads_back_against_its_prologue(tmp_path, values):
    after = values.copy()
    after[5] = -1.0
    after[2999] = np.nan
    pro = tmp_path / "DeviceState.prologue.static01.dynamic01.mneme"
    epi = tmp_path / "DeviceState.epilogue.static01.dynamic01.mneme"
    pro.write_bytes(prologue_bytes(values))
    epi.write_bytes(epilogue_bytes(values.tobytes(), after.tobytes()))
    with Snapshot.open(pro) as p, Snapshot.open(epi, base=p, verify=True) as e:
        assert e.read_region(ADDR) == after.tobytes()
        assert e.region(ADDR).policy == RegionPolicy("f32", 1e-6, relative=True, norm="Linf")
        assert e.changed_runs(ADDR) == [(0, 256), (11776, 224)]
        report = compare(e, {ADDR: after}, actual_globals={"gCounter": struct.pack("<i", 42)})
        assert report.ok


def test_a_wrong_header_checksum_in_a_hand_built_file_is_caught(tmp_path, values):
    data = bytearray(prologue_bytes(values))
    data[16] = 1  # says epilogue, checksum not updated
    path = tmp_path / "p.mneme"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="file header"):
        Snapshot.open(path)
