"""A snapshot's declared sizes never size memory the file cannot back (issue 36): `snapshot verify`
of a 128 KiB file whose zstd chunk decodes to 4 GiB checks it in pieces, and a compressed chunk
claiming more than its encoding can expand is a corrupt file when it is opened, before any read."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
import snapshot_corpus as corpus

from mneme.core.errors import CorruptFileError
from mneme.core.snapshot import Snapshot, SnapshotWriter, writer
from mneme.core.snapshot.format import ENC_LZ4, ENC_ZSTD

ADDR = 0x7000_0000


class _Claim:
    """A piece of `n` bytes that is never materialised (the writer's encoder is replaced)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def _write(path, raw: int, enc: int, body: bytes, monkeypatch) -> None:
    monkeypatch.setattr(writer, "_encode", lambda piece, element, level: (enc, (body,)))
    with SnapshotWriter(path, "prologue", static_hash="s", dynamic_hash="d") as w:
        w.set_args(b"\0" * 8)
        w.version = max(w.version, 2)
        w._add_region(ADDR, raw, iter([_Claim(raw)]), raw, "zstd", None)


def test_verify_of_a_128_KiB_file_declaring_a_4_GiB_chunk_stays_within_256_MiB(tmp_path, monkeypatch):
    raw = (1 << 32) - (128 << 10)
    path = tmp_path / "p.mneme"
    _write(path, raw, ENC_ZSTD, corpus.rle_bomb(raw), monkeypatch)
    assert path.stat().st_size < 200 << 10
    cap = 256 << 20  # the reader before issue 36 needed 8.4 GB here
    probe = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
        "from mneme.core.snapshot import Snapshot; Snapshot.open(sys.argv[1]).verify(); print('verified')"
        % (cap + (1 << 30), resource.RLIM_INFINITY)
    )
    # RLIMIT_AS also counts the interpreter's and libraries' mappings: 1 GiB of headroom for those
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "verified" in proc.stdout, proc.stderr[-2000:]


def test_a_zstd_frame_whose_blocks_cannot_fill_the_chunk_is_refused_before_decoding(tmp_path, monkeypatch):
    import os

    import zstandard

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(os.urandom(1 << 20))  # raw blocks
    path = tmp_path / "p.mneme"
    _write(path, 64 << 20, ENC_ZSTD, frame, monkeypatch)  # 1 MiB of blocks for a 64 MiB chunk
    with pytest.raises(CorruptFileError, match="decode to at most"):
        Snapshot.open(path).verify()


@pytest.mark.parametrize("enc, body", [(ENC_LZ4, b"\x1f" + b"\0" * 15), (ENC_ZSTD, corpus.good())])
def test_a_chunk_claiming_more_than_its_encoding_can_expand_is_corrupt_when_opened(tmp_path, monkeypatch, enc, body):
    path = tmp_path / "p.mneme"
    _write(path, 1 << 30, enc, body, monkeypatch)
    with pytest.raises(CorruptFileError, match="claims to decode to"):
        Snapshot.open(path)


def test_a_large_zstd_chunk_reads_back_exactly_when_it_is_honest(tmp_path, monkeypatch):
    import zstandard

    data = bytes(range(256)) * (96 << 12)  # 96 MiB, decoded in pieces straight into the region's buffer
    path = tmp_path / "p.mneme"
    _write(path, len(data), ENC_ZSTD, zstandard.ZstdCompressor(level=1).compress(data), monkeypatch)
    with Snapshot.open(path) as snap:
        snap.verify()
        assert snap.read_region(ADDR) == data


def test_an_lz4_chunk_larger_than_one_lz4_block_can_be_is_corrupt_when_opened(tmp_path, monkeypatch):
    path = tmp_path / "p.mneme"  # 3 GiB: liblz4 takes sizes as C ints, so no LZ4 block decodes to it
    _write(path, 3 << 30, ENC_LZ4, b"\x1f" + b"\0" * (16 << 20), monkeypatch)
    with pytest.raises(CorruptFileError, match="larger than one LZ4 block"):
        Snapshot.open(path)
