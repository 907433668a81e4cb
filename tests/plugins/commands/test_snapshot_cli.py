"""`mneme snapshot info | verify | compare` on real snapshot files."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from mneme.core.cli import cli
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotWriter

A = 0x7000_0000


def write(path, data, kind="prologue", policy=None):
    with SnapshotWriter(path, kind, static_hash="abc", dynamic_hash="def") as w:
        w.set_args(b"\x00" * 8, [(0, 8)])
        w.add_region(A, data, encoding="zstd", policy=policy)
        w.add_global("gFlag", b"\x01")
    return path


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_info_shows_header_regions_and_policies(tmp_path):
    path = write(tmp_path / "e.mneme", np.zeros(10_000, np.float32), "epilogue", RegionPolicy("f32", 1e-5, True))
    result = run("snapshot", "info", str(path))
    assert result.exit_code == 0, result.output
    assert "epilogue" in result.output and "static abc" in result.output and "gFlag" in result.output
    assert "0x70000000" in result.output and "f32 rel 1e-05" in result.output


def test_verify_passes_a_good_file_and_fails_a_corrupt_one_in_one_line(tmp_path):
    good = write(tmp_path / "p.mneme", np.arange(50_000, dtype=np.float32))
    result = run("snapshot", "verify", str(good))
    assert result.exit_code == 0 and "ok" in result.output
    data = bytearray(good.read_bytes())
    data[-100] ^= 1  # inside the last chunk
    bad = tmp_path / "bad.mneme"
    bad.write_bytes(bytes(data))
    result = run("snapshot", "verify", str(bad))
    assert result.exit_code == 3  # not verified (was 1 before exit codes were made distinct, issue 27)
    assert "error:" in result.output and "bad.mneme" in result.output and "CHNK" in result.output
    assert "Traceback" not in result.output


def test_compare_reports_mismatches_and_exits_non_zero(tmp_path):
    x = np.linspace(0, 1, 20_000, dtype=np.float32)
    expected = write(tmp_path / "e.mneme", x, "epilogue", RegionPolicy("f32", 1e-6))
    same = write(tmp_path / "same.mneme", x + np.float32(1e-7), "epilogue")
    y = x.copy()
    y[100] += 1
    other = write(tmp_path / "other.mneme", y, "epilogue")
    assert run("snapshot", "compare", str(expected), str(same)).exit_code == 0
    result = run("snapshot", "compare", str(expected), str(other))
    assert result.exit_code == 3 and "region 0x70000000" in result.output and "first at +400" in result.output


def test_verify_of_a_diff_epilogue_needs_and_uses_base(tmp_path):
    x = np.arange(30_000, dtype=np.int32)
    pro = write(tmp_path / "p.mneme", x)
    y = x.copy()
    y[3] = 0
    epi = tmp_path / "e.mneme"
    with Snapshot.open(pro) as p, SnapshotWriter(epi, "epilogue") as w:
        w.add_diff_region(A, p, y)
    result = run("snapshot", "verify", str(epi))
    assert result.exit_code == 2 and "base=prologue"  # invalid input: --base is missing in result.output
    assert run("snapshot", "verify", "--base", str(pro), str(epi)).exit_code == 0
