"""`mneme tune`, then `mneme replay --config best.json`, end to end on one backend.

The same commands and assertions run on the host backend in CI (tests/core/tuning/test_tune_end_to_end.py)
and on CUDA on the GPU machine (tests/gpu/test_cuda_tuning.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "mneme"]


def mneme(*args, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)


def tune_then_replay(tmp_path: Path, backend: str) -> None:
    """A short tuning run exports a best configuration that replays verified."""
    from mneme import capture

    db = capture.capture_spec(ROOT / "examples" / "saxpy" / "capture.yaml", tmp_path / "db", backend=backend)
    results = tmp_path / "results"
    tuned = mneme(
        "tune",
        "-rdb",
        db,
        "--backend",
        backend,
        "--space",
        "quick",
        "-o",
        "grid_stride=true",
        "--sampler",
        "optuna:tpe",
        "--seed",
        "3",
        "--trials",
        6,
        "--retime-top",
        1,
        "--retime-repeats",
        1,
        "--results",
        results,
        "--json",
    )
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-4000:]
    summary = json.loads(tuned.stdout)
    assert summary["counts"]["trials"] == 6
    assert summary["best"]["time"] > 0 and summary["baseline"]["time"] > 0
    best = results / "best.json"
    assert best.is_file()
    config = json.loads(best.read_text())
    replayed = mneme("replay", "-rdb", db, "--backend", backend, "--config", best, "--json")
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-4000:]
    report = json.loads(replayed.stdout)
    assert report["result"]["verified"] is True, report["result"].get("error")
    assert report["config"] == {k: config[k] for k in report["config"]}  # the exported configuration ran
