"""A capture description or tuning run from someone else: sizes are bounded before allocation, values
are checked with the field named, and results stay in the folder the user asked for (issue 24)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mneme import capture
from mneme.core.errors import MnemeError
from paths import ROOT

CLI = [sys.executable, "-m", "mneme"]
SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"


def _spec(tmp_path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    shutil.copyfile(SAXPY_IR, tmp_path / "saxpy.ll")  # a description's IR lies in its folder
    path.write_text(text.replace(f"ir: {SAXPY_IR}", "ir: saxpy.ll"))
    return path


def _saxpy(args: str, extra: str = "") -> str:
    return f"ir: {SAXPY_IR}\nkernel: saxpy\ngrid: 1\nblock: 32\n{extra}args:\n{args}"


@pytest.mark.parametrize(
    "args, field",
    [
        ("  - {scalar: 99999999999999999999999, dtype: int64}\n", "args[0]"),
        ("  - {scalar: 1, dtype: object}\n", "args[0].dtype"),
        ("  - {zeros: {dtype: object, shape: [4]}}\n", "args[0].zeros.dtype"),
        ("  - {zeros: {dtype: float32, shape: [100000, 100000, 300]}}\n", "args[0].zeros.shape"),
        ("  - {random: {dtype: float32, shape: [3000000000]}}\n", "args[0].random.shape"),
        ("  - {arange: {dtype: float64, start: 0, stop: 1.0e+13}}\n", "args[0].arange"),
        ("  - {ones: {dtype: float32, shape: [-5]}}\n", "args[0].ones.shape"),
        ("  - {file: {path: /dev/zero, dtype: float32}}\n", "args[0].file.path"),
        # found by the capture fuzz target: NumPy parses "6 64" as a record type and raises SyntaxError
        ("  - {scalar: 00537351101, dtype: 6 64}\n", "args[0].dtype"),
        ("  - {zeros: {dtype: 'f4,i4', shape: [4]}}\n", "args[0].zeros.dtype"),
    ],
)
def test_bad_or_huge_capture_arguments_are_refused_before_allocating(tmp_path, args, field):
    spec = capture.load_spec(_spec(tmp_path, _saxpy(args)))
    with pytest.raises(MnemeError, match=r"args\[0\]") as error:
        capture.build_args(spec, "spec.yaml", tmp_path)
    assert field in str(error.value) or "limit" in str(error.value)


@pytest.mark.parametrize(
    "extra, field",
    [
        ("shared_mem: lots\n", "shared_mem"),
        ("", "ir"),
        ("va_addr: nowhere\n", "va_addr"),
    ],
)
def test_bad_capture_fields_exit_with_an_error_naming_the_field(tmp_path, extra, field):
    text = _saxpy("  - 64\n  - 1.0\n  - {zeros: {shape: [64]}}\n  - {zeros: {shape: [64]}}\n", extra)
    if field == "ir":
        text = text.replace(f"ir: {SAXPY_IR}", "ir: 5")
    spec = _spec(tmp_path, text)
    proc = subprocess.run(
        [*CLI, "capture", str(spec), "-o", str(tmp_path / "out"), "--backend", "host"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode in (1, 2) and field in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_capture_description_alias_bomb_is_refused(tmp_path):
    bomb = "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 9 if p else ["1"] * 9) + "]\n"
        for p, c in zip([None, "a", "b", "c", "d", "e", "f", "g"], "abcdefgh")
    )
    with pytest.raises(MnemeError, match="alias"):
        capture.load_spec(_spec(tmp_path, bomb))


def test_a_grid_beyond_every_gpu_is_refused_by_capture(tmp_path):
    text = _saxpy("  - 64\n  - 1.0\n  - {zeros: {shape: [64]}}\n  - {zeros: {shape: [64]}}\n").replace(
        "grid: 1", "grid: [2147483648]"
    )
    proc = subprocess.run(
        [*CLI, "capture", str(_spec(tmp_path, text)), "-o", str(tmp_path / "out"), "--backend", "host"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "2147483648" in proc.stderr, proc.stderr


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_tune_without_results_keeps_a_hostile_kernel_name_inside_mneme_results(tmp_path):
    name = "../../../../x/k"
    ir = tmp_path / "k.ll"
    ir.write_text(SAXPY_IR.read_text().replace("@saxpy", f'@"{name}"'))
    db = capture.capture(
        ir,
        name,
        4,
        128,
        [512, np.float32(2.0), np.ones(512, np.float32), np.ones(512, np.float32)],
        tmp_path / "rec",
        backend="host",
    )
    work = tmp_path / "w" / "a" / "b" / "c"
    work.mkdir(parents=True)
    before = _files(tmp_path)
    subprocess.run(
        [*CLI, "tune", "-rdb", str(db), "--space", "quick", "-o", "axes=x", "--trials", "1", "--retime-top", "0"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=400,
        env=dict(os.environ, MNEME_HOST_THREADS="1"),
    )
    created = _files(tmp_path) - before
    outside = [p for p in created if not p.is_relative_to(work / "mneme-results")]
    assert not outside, outside
    assert any(p.name == "study.db" for p in created)
