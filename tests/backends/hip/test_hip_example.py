"""examples/hip_vecadd: its HIP sources through `mneme-cc` and clang-19, then the embedded IR
captured, replayed verified and tuned on the host backend (no AMD GPU needed).

The commands are those CMake's HIP language runs for this project (compile each `.hip` with
clang++ -x hip --offload-arch, link with --hip-link); CMake itself is not run here: Debian's
HIP 5.2 CMake package points CMake at /usr/include and another clang's headers, which breaks
host compiles (see examples/hip_vecadd/README.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from irbuild import hip_available, rocm_bitcode_dir

from mneme import capture
from paths import ROOT

EXAMPLE = ROOT / "examples" / "hip_vecadd"
MNEME = [sys.executable, "-m", "mneme"]
KERNELS = {"_Z6vecaddPKfS0_Pfi": "kernels.hip", "_Z4axpyIfEvT_PKS0_PS0_i": "main.hip"}

pytestmark = [
    pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1]),
    pytest.mark.skipif(shutil.which("clang++-19") is None, reason="needs clang-19"),
]


@pytest.fixture(scope="module")
def vecadd_app(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("hip_vecadd_build")
    launcher = (
        [shutil.which("mneme-cc")] if shutil.which("mneme-cc") else [sys.executable, "-m", "mneme.instrument.launcher"]
    )
    flags = [
        "-x",
        "hip",
        "--offload-arch=gfx90a",
        "--rocm-path=/usr",
        f"--rocm-device-lib-path={rocm_bitcode_dir()}",
        f"-I{EXAMPLE}",
        "-O2",
        "-std=c++17",
    ]
    for source in ("kernels.hip", "main.hip"):
        built = subprocess.run(
            [*launcher, "clang++-19", *flags, "-c", str(EXAMPLE / source), "-o", source + ".o"],
            cwd=build,
            capture_output=True,
            text=True,
        )
        assert built.returncode == 0, built.stdout + built.stderr
        assert "mneme-cc: warning" not in built.stdout + built.stderr
    linked = subprocess.run(
        ["clang++-19", "--hip-link", "--rocm-path=/usr", "kernels.hip.o", "main.hip.o", "-o", "vecadd"],
        cwd=build,
        capture_output=True,
        text=True,
    )
    if linked.returncode != 0:
        pytest.skip(f"cannot link a HIP program here (libamdhip64): {linked.stderr.strip()[:200]}")
    return build / "vecadd"


def test_the_executable_lists_both_kernels_for_gfx90a_with_their_sources(vecadd_app):
    out = subprocess.run(
        [*MNEME, "ir", "list", "--json", str(vecadd_app)], capture_output=True, text=True, check=True
    ).stdout
    rows = {r["kernel"]: r for r in map(json.loads, out.splitlines())}
    assert set(rows) == set(KERNELS)
    for kernel, source in KERNELS.items():
        assert rows[kernel]["arch"] == "gfx90a" and rows[kernel]["language"] == "hip"
        assert Path(rows[kernel]["source"]) == EXAMPLE / source


def test_the_embedded_ir_captures_replays_verified_and_tunes_on_the_host(vecadd_app, tmp_path):
    from click.testing import CliRunner

    from mneme.core.cli import cli
    from mneme.core.executor import BaseExecutor

    ir = tmp_path / "axpy.bc"
    subprocess.run(
        [*MNEME, "ir", "extract", str(vecadd_app), "axpy<float>", "-o", str(ir)], check=True, capture_output=True
    )
    n = 5000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    outputs = {}
    db = capture.capture(
        ir,
        "_Z4axpyIfEvT_PKS0_PS0_i",
        (n + 255) // 256,
        256,
        [np.float32(2.0), x, y, n],
        tmp_path / "db",
        backend="host",
        outputs=outputs,
    )
    np.testing.assert_array_equal(outputs[2], 2.0 * x + y)
    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error
    args = [
        "tune",
        "-rdb",
        db,
        "--sampler",
        "random",
        "--trials",
        2,
        "--seed",
        3,
        "--results",
        tmp_path / "run",
        "--space",
        "quick",
        "-o",
        "axes=x",
        "--retime-top",
        "1",
        "--retime-repeats",
        "1",
    ]
    tuned = CliRunner().invoke(cli, [str(a) for a in args])
    assert tuned.exit_code == 0, tuned.output
