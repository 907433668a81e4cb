"""Bad snapshots: each is a clear error naming the file and the block, and nothing on disk changes."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from mneme.core.errors import CorruptFileError, FormatError, SchemaVersionError
from mneme.core.snapshot import VERSION, MemStateRef, RegionPolicy, Snapshot, SnapshotWriter

A, B, C = 0x7000_0000, 0x7100_0000, 0x7200_0000
CHUNK = 1 << 14


def blocks(path) -> list[tuple[bytes, int, int]]:
    """(tag, header offset, payload size) of every block, walked as docs/formats.md describes."""
    data, pos, found = path.read_bytes(), 64, []
    while pos < len(data):
        tag, _seq, size = struct.unpack_from("<4sIQ", data, pos)
        found.append((tag, pos, size))
        pos += 32 + size
    return found


def state(folder):
    """A prologue and a diff epilogue holding every kind of block and chunk encoding."""
    rng = np.random.default_rng(7)
    smooth = np.sin(np.linspace(0, 20, 3 * CHUNK // 4, dtype=np.float32))
    noise = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    pro = folder / "DeviceState.prologue.s.d.mneme"
    with SnapshotWriter(pro, "prologue", static_hash="s", dynamic_hash="d", chunk_size=CHUNK) as w:
        w.set_args(b"\x00" * 16, [(0, 8), (8, 8)])
        w.add_region(A, noise)  # raw chunk
        w.add_region(B, smooth, encoding="zstd", policy=RegionPolicy("f32"))  # shuffled zstd chunks
        w.add_region(C, np.zeros(CHUNK, np.uint8), encoding="zstd", policy=RegionPolicy("u8"))  # plain zstd
        w.add_global("gCount", b"\x03\x00\x00\x00")
    after = smooth.copy()
    after[10] = 42.0
    epi = folder / "DeviceState.epilogue.s.d.mneme"
    with Snapshot.open(pro) as p, SnapshotWriter(epi, "epilogue", chunk_size=CHUNK) as w:
        w.add_diff_region(B, p, after, policy=RegionPolicy("f32", 1e-6))
    return pro, epi


def fingerprint(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def read_everything(path, base=None):
    with Snapshot.open(path, base=base, verify=True) as snap:
        for region in snap.regions:
            snap.read_region(region.addr)


@pytest.fixture
def files(tmp_path):
    pro, epi = state(tmp_path)
    read_everything(pro)
    with Snapshot.open(pro) as p:
        read_everything(epi, base=p)
    return tmp_path, pro, epi


def flip(path, offset, bit=0x10):
    data = bytearray(path.read_bytes())
    data[offset] ^= bit
    path.write_bytes(bytes(data))


def expect_error(folder, path, kind, *needles, base=None):
    before = fingerprint(folder)
    with pytest.raises(kind) as info:
        read_everything(path, base=base)
    message = str(info.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message, message
    assert fingerprint(folder) == before  # reading never changes anything on disk
    return message


@pytest.mark.parametrize("content", [b"", b"hello, world\n" * 10, b"MNEMESN", bytes(range(256)) * 4])
def test_not_a_snapshot_is_refused_by_its_magic(tmp_path, content):
    path = tmp_path / "x.mneme"
    path.write_bytes(content)
    expect_error(tmp_path, path, CorruptFileError, "not a Mneme snapshot")


def test_newer_version_is_refused_naming_both_versions(files):
    folder, pro, _ = files
    data = bytearray(pro.read_bytes())
    data[8:12] = struct.pack("<I", VERSION + 1)
    pro.write_bytes(bytes(data))
    message = expect_error(
        folder, pro, SchemaVersionError, f"version {VERSION + 1}", f"version {VERSION} ", "upgrade Mneme"
    )
    assert "newer" in message


@pytest.mark.parametrize("where", ["header", "block header", "chunk payload", "before END", "END payload", "last byte"])
def test_truncated_file_names_the_block_and_says_truncated(files, where):
    folder, pro, _ = files
    layout = blocks(pro)
    chunk = next(b for b in layout if b[0] == b"CHNK")
    end = layout[-1]
    cut = {
        "header": 40,
        "block header": layout[2][1] + 10,
        "chunk payload": chunk[1] + 32 + 100,
        "before END": end[1],
        "END payload": end[1] + 40,
        "last byte": pro.stat().st_size - 1,
    }[where]
    pro.write_bytes(pro.read_bytes()[:cut])
    message = expect_error(folder, pro, CorruptFileError, "truncated")
    if where != "header":
        assert "block #" in message


def blocks_of(path, tag, nth=0):
    return [b for b in blocks(path) if b[0] == tag][nth]


@pytest.mark.parametrize(
    ("target", "block_name"),
    [
        ("META", "META"),
        ("ARGS", "ARGS"),
        ("REGN", "REGN"),
        ("GLOB", "GLOB"),
        ("END ", "END"),
        ("raw CHNK", "CHNK"),
        ("zstd CHNK", "CHNK"),
        ("shuffled CHNK", "CHNK"),
        ("CHNK prefix", "CHNK"),
    ],
)
def test_bit_flip_in_a_prologue_block_names_the_block(files, target, block_name):
    folder, pro, _ = files
    layout = blocks(pro)
    chunks = [b for b in layout if b[0] == b"CHNK"]
    regn = [b for b in layout if b[0] == b"REGN"]
    pick = {
        "raw CHNK": chunks[0],  # region A: noise, stored raw
        "shuffled CHNK": next(c for c in chunks if c[1] > regn[1][1]),  # region B
        "zstd CHNK": next(c for c in chunks if c[1] > regn[2][1]),  # region C
        "CHNK prefix": chunks[0],
    }.get(target) or blocks_of(pro, target.encode())
    _, pos, size = pick
    offset = pos + 32 + (2 if target == "CHNK prefix" else size // 2)
    flip(pro, offset)
    message = expect_error(folder, pro, CorruptFileError, f"{block_name} at byte {pos}")
    assert "block #" in message


def test_bit_flip_in_a_block_header_is_caught(files):
    folder, pro, _ = files
    _, pos, _ = blocks_of(pro, b"REGN", 1)
    flip(pro, pos + 9)  # payload size field
    expect_error(folder, pro, CorruptFileError, "block #", f"at byte {pos}", "header checksum")


def test_bit_flip_in_the_file_header_is_caught(files):
    folder, pro, _ = files
    flip(pro, 30)  # inside the snapshot id
    expect_error(folder, pro, CorruptFileError, "file header", "checksum")


def test_bit_flip_in_a_diff_chunk_is_caught(files):
    folder, pro, epi = files
    _, pos, size = blocks_of(epi, b"CHNK")
    flip(epi, pos + 32 + size - 1)
    with Snapshot.open(pro) as p:
        expect_error(folder, epi, CorruptFileError, f"CHNK at byte {pos}", "region 0x71000000", base=p)


def test_diff_epilogue_without_its_prologue_says_how_to_open_it(files):
    folder, _, epi = files
    message = expect_error(folder, epi, FormatError, "REGN at byte", "0x71000000", "base=prologue")
    assert "diff" in message


def test_diff_epilogue_against_another_prologue_is_refused(files):
    folder, _, epi = files
    other = folder / "other.prologue.mneme"
    with SnapshotWriter(other, "prologue", chunk_size=CHUNK) as w:  # same layout, other contents
        w.add_region(B, np.ones(3 * CHUNK // 4, np.float32))
    with Snapshot.open(other) as o:
        expect_error(folder, epi, FormatError, "recorded against prologue id", str(other), base=o)


def test_diff_epilogue_against_changed_prologue_bytes_is_refused(files, tmp_path):
    folder, pro, epi = files
    # Rewrite the prologue with other bytes but the same id, as a buggy recorder might.
    data = bytearray(pro.read_bytes())
    epi_header = epi.read_bytes()[40:56]
    assert data[24:40] == epi_header
    with Snapshot.open(pro) as p:
        smooth = np.frombuffer(p.read_region(B), np.float32).copy()
    smooth[0] += 1
    fake = tmp_path / "fake.mneme"
    with SnapshotWriter(fake, "prologue", chunk_size=CHUNK) as w:
        w.add_region(B, smooth)
    raw = bytearray(fake.read_bytes())
    raw[24:40] = data[24:40]  # same id; header checksum fixed below
    import xxhash

    raw[56:64] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(raw[:56])))
    fake.write_bytes(bytes(raw))
    with Snapshot.open(fake) as f:
        expect_error(folder, epi, FormatError, "other prologue bytes", base=f)


def test_mem_state_ref_of_a_diff_epilogue_whose_prologue_is_gone(files):
    _, pro, epi = files
    pro.unlink()
    with MemStateRef(epi, "k", "epilogue") as ref, pytest.raises(FormatError, match="base=prologue"):
        ref.snapshot.read_region(B)


def test_stray_bytes_after_end_are_refused(files):
    folder, pro, _ = files
    pro.write_bytes(pro.read_bytes() + b"\x00" * 5)
    expect_error(folder, pro, CorruptFileError, "stray bytes follow the END block")


def small_state(folder):
    """A small prologue and diff epilogue with every block kind and chunk encoding."""
    pro = folder / "DeviceState.prologue.s.d.mneme"
    steps = np.arange(3072, dtype=np.float32)  # 12 KiB; compresses best byte-shuffled
    with SnapshotWriter(pro, "prologue", static_hash="s", dynamic_hash="d", chunk_size=4096) as w:
        w.set_args(b"\x01" * 12, [(0, 8), (8, 4)])
        w.add_region(A, np.random.default_rng(1).integers(0, 256, 40, dtype=np.uint8))  # raw
        w.add_region(B, steps, encoding="zstd", policy=RegionPolicy("f32"))  # byte-shuffled zstd
        w.add_region(C, bytes(4096), encoding="zstd")  # plain zstd
        w.add_global("g", b"\x02\x03")
    after = steps.copy()
    after[3] = 7.0
    epi = folder / "DeviceState.epilogue.s.d.mneme"
    with Snapshot.open(pro) as p, SnapshotWriter(epi, "epilogue", chunk_size=4096) as w:
        w.add_diff_region(B, p, after, policy=RegionPolicy("f32", 1e-6))  # one run in chunk 0
    return pro, epi


def test_every_single_bit_flip_anywhere_is_an_error_never_a_silent_read(tmp_path):
    pro, epi = small_state(tmp_path)
    for path in (pro, epi):
        original = path.read_bytes()
        for offset in range(len(original)):
            damaged = bytearray(original)
            damaged[offset] ^= 1 << (offset % 8)
            path.write_bytes(bytes(damaged))
            base = None
            try:
                if path == epi:
                    base = Snapshot.open(pro)
                with pytest.raises((CorruptFileError, FormatError)):
                    read_everything(path, base=base)
            finally:
                if base is not None:
                    base.close()
        path.write_bytes(original)


def test_every_truncation_is_an_error(tmp_path):
    pro, epi = small_state(tmp_path)
    for path, step in ((epi, 1), (pro, 3)):  # every length of one file, every third of the other
        original = path.read_bytes()
        for length in range(0, len(original), step):
            path.write_bytes(original[:length])
            with pytest.raises(CorruptFileError):
                read_everything(path)
        path.write_bytes(original)
