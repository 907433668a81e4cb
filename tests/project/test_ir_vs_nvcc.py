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


def test_the_gpu_machine_takes_the_ir_and_cubin_prebuilt_here_and_only_for_these_sources(tmp_path):
    # bench_ir_vs_binary records the corpus kernels from one mneme-cc build each; the GPU machine has no clang,
    # so scripts/gpu-suite --prepare prebuilds them (bench_ir_vs_binary.py --prebuild sm_90)
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import bench_cuda_replay as replay

    (made,) = replay.prebuild("sm_90", tmp_path, sources=["saxpy"])
    ir_path, cubin_path, how = replay.mneme_cc_build("saxpy", "sm_90", tmp_path / "unused", prebuilt=tmp_path)
    assert ir_path == made and cubin_path.read_bytes()[:4] == b"\x7fELF" and "prebuilt" in how
    assert "@saxpy" in ir_path.read_text()
    (tmp_path / "sm_90" / "saxpy.key").write_text("built from other sources\n")  # a stale pair is not taken
    (tmp_path / "fresh").mkdir()
    ir_path, _cubin, how = replay.mneme_cc_build("saxpy", "sm_90", tmp_path / "fresh", prebuilt=tmp_path)
    assert "prebuilt" not in how and ir_path.parent == tmp_path / "fresh"
