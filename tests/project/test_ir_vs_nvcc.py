"""benchmarks/ir_vs_nvcc.py sets nvcc's code and the IR variant side by side, from one mneme-cc build."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
pytestmark = pytest.mark.skipif(NVCC is None or shutil.which("clang-19") is None, reason="needs nvcc and clang-19")


def test_each_kernel_gets_nvccs_and_the_ir_variants_counts_from_one_build(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "ir_vs_nvcc.py"),
            "--sets",
            "corpus",
            "--units",
            "saxpy,math_funcs",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["kernel"]: r for r in json.loads(out.read_text())}
    saxpy = rows["saxpy"]
    for side in ("nvcc", "mneme"):  # the grid-stride saxpy: two global loads, one fused multiply-add, one store
        assert (saxpy[side]["ld.global"], saxpy[side]["fma"], saxpy[side]["st.global"]) == (2, 1, 1)
        assert saxpy[side]["registers"] > 0
    math = rows["math_funcs"]
    # sqrtf: nvcc's sqrt.rn, and the IR variant's too (the numerics finalize reads from nvcc's PTX); neither
    # flushes denormals (powf's rcp.approx.ftz is libdevice's own, not -ftz)
    assert math["nvcc"].get("sqrt.rn") == math["mneme"].get("sqrt.rn") == 1
    assert math["mneme"].get("ftz", 0) == math["nvcc"].get("ftz", 0) == 2  # rcp.approx.ftz, ex2.approx.ftz
    assert "| saxpy | `saxpy` |" in done.stdout
