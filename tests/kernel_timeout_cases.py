"""A kernel that loops forever on any backend, and what a time limit must do with it (issue 24).

Shared by the host tests (tests/core/test_kernel_timeout.py) and the GPU test
(tests/gpu/test_cuda_kernel_timeout.py): the IR is written here, so the GPU machine needs no clang.
With 32 threads per block the kernel writes each thread's index and returns; with more, it spins
on a flag in device memory that stays set.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mneme import capture
from mneme.core.types import ExperimentConfiguration
from mneme.core.workers import AsyncReplayExecutor

SPIN_IF_WIDE = """\
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @spin_if_wide(ptr %flag, ptr %out) {
entry:
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %wide = icmp ugt i32 %n, 32
  br i1 %wide, label %spin, label %done
spin:
  %f = load volatile i32, ptr %flag, align 4
  %set = icmp ne i32 %f, 0
  br i1 %set, label %spin, label %done
done:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %p = getelementptr inbounds i32, ptr %out, i32 %t
  store i32 %t, ptr %p, align 4
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @spin_if_wide, !"kernel", i32 1}
"""


def record(folder: Path, backend: str) -> Path:
    """Capture the kernel's well-behaved launch (1 block of 32 threads); returns the database."""
    folder.mkdir(parents=True, exist_ok=True)
    ir_path = folder / "spin_if_wide.ll"
    ir_path.write_text(SPIN_IF_WIDE)
    flag, out = np.ones(1, dtype=np.int32), np.zeros(64, dtype=np.int32)
    return capture.capture(ir_path, "spin_if_wide", 1, 32, [flag, out], folder / "rec", backend=backend)


def pool_kills_a_kernel_past_the_limit(folder: Path, backend: str, monkeypatch) -> None:
    """A tuning worker whose kernel overstays is killed and replaced; the trial is a timeout."""
    db = record(folder, backend)
    monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "1")
    # the experiment's own timeout is far away: only the kernel's limit can end the spin soon
    with AsyncReplayExecutor(db, iterations=1, results_db_dir=folder / "pool", backend=backend, timeout=300) as pool:
        first = pool.worker_pids[0]
        start = time.monotonic()
        hung = pool.evaluate(ExperimentConfiguration(grid=(1, 1, 1), block=(64, 1, 1)))
        waited = time.monotonic() - start
        assert hung.failed and hung.error_kind == "timeout", hung.error
        assert "ran past its time limit" in hung.error and "killed and replaced" in hung.error, hung.error
        assert waited < 60
        good = pool.evaluate(ExperimentConfiguration(grid=(1, 1, 1), block=(32, 1, 1)))
        assert good.ok, good.error
        assert pool.worker_pids[0] != first


def replay_stops_a_kernel_past_the_limit(folder: Path, backend: str) -> None:
    """`mneme replay --timeout` ends a spinning kernel: not verified (exit 3), one line, no hang."""
    db = record(folder, backend)
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mneme",
            "replay",
            "-rdb",
            str(db),
            "--backend",
            backend,
            "--block-dim-x",
            "64",
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert time.monotonic() - start < 90
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "time limit" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def capture_stops_a_kernel_past_the_limit(folder: Path, backend: str) -> None:
    """`mneme capture --timeout` of a spinning launch fails with a timeout, one line, no hang."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spin_if_wide.ll").write_text(SPIN_IF_WIDE)
    spec = folder / "spin.yaml"
    spec.write_text(
        "ir: spin_if_wide.ll\nkernel: spin_if_wide\ngrid: 1\nblock: 64\nargs:\n"
        "  - {ones: {dtype: int32, shape: [1]}}\n  - {zeros: {dtype: int32, shape: [64]}}\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mneme",
            "capture",
            str(spec),
            "-o",
            str(folder / "out"),
            "--backend",
            backend,
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert time.monotonic() - start < 90
    assert proc.returncode != 0 and "timed out" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
