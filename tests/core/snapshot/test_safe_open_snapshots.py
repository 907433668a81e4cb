"""A snapshot from someone else: decompression is bounded by the chunk's raw length, and the Python and
native readers agree on what a valid zstd chunk is, on one corpus (issue 24)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from snapshot_corpus import RAW, corpus, write_snapshot

from mneme.core.errors import CorruptFileError
from mneme.core.snapshot import Snapshot

ADDR = 0x7000_0000
CASES = corpus()


@pytest.mark.parametrize("name, body, raw, valid", CASES, ids=[c[0] for c in CASES])
def test_the_python_reader_accepts_exactly_one_frame_of_the_declared_size(tmp_path, name, body, raw, valid):
    path = tmp_path / "DeviceState.prologue.s.d.mneme"
    write_snapshot(path, body, raw)
    with Snapshot.open(path) as snap:
        if valid:
            assert bytes(snap.read_region(ADDR)) == bytes(raw)
        else:
            with pytest.raises(CorruptFileError, match="CHNK|zstd"):
                snap.read_region(ADDR)


@pytest.mark.parametrize("name, body, raw, valid", CASES, ids=[c[0] for c in CASES])
def test_the_native_reader_agrees_with_the_python_reader_on_the_same_corpus(tmp_path, name, body, raw, valid):
    from mneme.core.snapshot import snapio

    if snapio.library() is None:
        pytest.skip("the native reader cannot be built here")
    path = tmp_path / "DeviceState.prologue.s.d.mneme"
    write_snapshot(path, body, raw)
    out = np.zeros(raw, np.uint8)
    with snapio.NativeDecoder(2) as decoder, Snapshot.open(path) as snap:
        if valid:
            decoder.read_range_into(snap, ADDR, 0, out)
            assert out.tobytes() == bytes(raw)
        else:
            with pytest.raises(CorruptFileError) as native:
                decoder.read_range_into(snap, ADDR, 0, out)
            with pytest.raises(CorruptFileError) as python:
                snap.read_region(ADDR)
            assert type(native.value) is type(python.value)


_VERIFY = (
    "import resource, sys\n"
    "from mneme.core.cli import main\n"
    "try:\n    main(['snapshot', 'verify', sys.argv[1]])\n"
    "except SystemExit as e:\n    code = e.code\n"
    "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def _verify(path):
    """(exit code, stderr, peak RSS in KiB) of `mneme snapshot verify PATH` in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", _VERIFY, str(path)], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr, int(proc.stdout.split("RSS")[1])


@pytest.mark.parametrize("name", ["declares-1TiB", "rle-bomb-2GiB"])
def test_verify_of_a_decompression_bomb_is_a_clean_error_in_little_memory(tmp_path, name):
    body = dict((c[0], c[1]) for c in CASES)[name]
    path = tmp_path / "DeviceState.prologue.s.d.mneme"
    write_snapshot(path, body, RAW)
    code, stderr, rss_kib = _verify(path)
    assert code == 3, stderr  # a corrupt snapshot does not verify (was 1 before issue 27)
    assert "Traceback" not in stderr and "MemoryError" not in stderr
    assert "zstd" in stderr
    # against the same command on a valid snapshot of the same declared size: the bomb's
    # gigabytes are never allocated (what the process imports is the same either way)
    valid_name, valid_body, valid_raw, _ = next(c for c in CASES if c[3])
    valid = tmp_path / "valid" / "DeviceState.prologue.s.d.mneme"
    valid.parent.mkdir()
    write_snapshot(valid, valid_body, valid_raw)
    valid_code, valid_stderr, baseline_kib = _verify(valid)
    assert valid_code == 0, valid_stderr
    assert rss_kib < baseline_kib + (128 << 10), f"{rss_kib} KiB against {baseline_kib} KiB for {valid_name}"
