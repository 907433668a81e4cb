"""Resource exhaustion and OS failures are reported as what they are (issue 36): running out of memory
names the cap it hit and the input, an OS error names the file, and neither is "unexpected" with exit 1;
IR refused at capture, a grid beyond every GPU and a recorded address range at 0 are invalid input (2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mneme import capture
from paths import ROOT

CLI = [sys.executable, "-m", "mneme"]
SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
SAXPY = "ir: saxpy.ll\nkernel: saxpy\ngrid: 1\nblock: 32\n"


def _mneme(*args, env=None, cwd=None):
    return subprocess.run(
        [*CLI, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "MNEME_HOST_THREADS": "1", **(env or {})},
    )


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saxpy")
    return capture.capture(
        SAXPY_IR,
        "saxpy",
        2,
        128,
        [256, np.float32(2.0), np.ones(256, np.float32), np.ones(256, np.float32)],
        folder / "rec",
        backend="host",
    )


def test_running_out_of_memory_names_the_cap_and_the_input_and_exits_2(tmp_path):
    shutil.copyfile(SAXPY_IR, tmp_path / "saxpy.ll")  # a description's IR lies in its folder
    spec = tmp_path / "big.yaml"  # 3.2 GB of zeros: under buffer_bytes, over a 1 GiB memory cap
    spec.write_text(SAXPY + "args: [64, 1.0, {zeros: {shape: [800000000]}}, {zeros: {shape: [64]}}]\n")
    proc = _mneme(
        "capture",
        spec,
        "-o",
        tmp_path / "out",
        "--backend",
        "host",
        env={"MNEME_LIMIT_WORKER_DATA_BYTES": str(1 << 30)},
    )
    assert proc.returncode == 2, proc.stderr
    assert "out of memory" in proc.stderr and "MNEME_LIMIT_WORKER_DATA_BYTES" in proc.stderr
    assert str(spec) in proc.stderr and "unexpected" not in proc.stderr


def test_an_os_error_names_the_file_and_is_not_unexpected(saxpy_db, tmp_path):
    target = tmp_path / "missing-folder" / "variant.ll"
    proc = _mneme("replay", "-rdb", saxpy_db, "--output-ll", target)
    assert proc.returncode == 2, proc.stderr
    assert str(target) in proc.stderr and "unexpected" not in proc.stderr


def test_ir_refused_at_capture_exits_2_naming_the_ir_field(tmp_path):
    text = SAXPY_IR.read_text()
    entry = text.index("{", text.index("define dso_local void @saxpy")) + 1
    evil = tmp_path / "evil.ll"
    evil.write_text(
        text[:entry] + "\n  %r = call i32 @system(ptr null)" + text[entry:] + "\ndeclare i32 @system(ptr)\n"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        SAXPY.replace("saxpy.ll", evil.name) + "args: [64, 1.0, {zeros: {shape: [64]}}, {zeros: {shape: [64]}}]\n"
    )
    proc = _mneme("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert proc.returncode == 2, proc.stderr
    assert "field 'ir'" in proc.stderr and "system" in proc.stderr


def test_a_grid_of_2_31_blocks_at_capture_exits_2(tmp_path):
    shutil.copyfile(SAXPY_IR, tmp_path / "saxpy.ll")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        SAXPY.replace("grid: 1", "grid: [2147483648]")
        + "args: [64, 1.0, {zeros: {shape: [64]}}, {zeros: {shape: [64]}}]\n"
    )
    proc = _mneme("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert proc.returncode == 2, proc.stderr
    assert "2147483648" in proc.stderr and "grid" in proc.stderr


@pytest.mark.parametrize("vaddr", ["0x0", "0x1000", "0xffffffffffff0000"])
def test_a_database_whose_address_range_is_not_a_user_range_exits_2(saxpy_db, tmp_path, vaddr):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(saxpy_db.parent, folder)
    db = folder / saxpy_db.name
    data = json.loads(db.read_text())
    data["VAddr"] = vaddr
    db.write_text(json.dumps(data))
    proc = _mneme("replay", "-rdb", db)
    assert proc.returncode == 2, proc.stderr
    assert "VAddr" in proc.stderr and "user address range" in proc.stderr
