"""The GPU suite's sweeps (benchmarks/gpu/sweeps/manifest.txt) hold together before a GPU sees them: every
capture description captures on the host backend, and each space has the 30-80 points that keep an
exhaustive sweep under a minute on an H100; the GPU benchmarks of issue 39 start (their CPU-side parts)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mneme import capture as cap
from mneme.core.recording import load_recording
from mneme.core.tuning.space import load_space, parse_options

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "benchmarks" / "gpu" / "sweeps"


def manifest() -> list[tuple[str, str, dict]]:
    entries = []
    for line in (SWEEPS / "manifest.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        desc, space, *rest = shlex.split(line)
        options = [rest[i + 1] for i in range(0, len(rest), 2) if rest[i] == "-o"]
        entries.append((desc, space, parse_options(options)))
    return entries


def test_the_manifest_names_saxpy_and_at_least_six_more_kernels():
    names = [desc for desc, _, _ in manifest()]
    assert names[0] == "saxpy-16k.yaml" and len(set(names)) == len(names) >= 7
    assert all((SWEEPS / n).is_file() for n in names)


@pytest.mark.parametrize(("desc", "space", "options"), manifest(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_sweep_captures_on_the_host_and_its_space_has_30_to_80_points(tmp_path, desc, space, options):
    db = cap.capture_spec(SWEEPS / desc, tmp_path / "db", backend="host")
    rec = load_recording(db)
    found = load_space(space, rec, rec.select(None), options)
    points = sum(1 for _ in found.sample_exhaustive())
    assert 30 <= points <= 80, (desc, points)


def test_the_kernel_tuner_benchmark_plans_the_same_twelve_block_sizes_without_a_device():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu" / "bench_kernel_tuner.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    import json

    plan = json.loads(done.stdout)
    assert plan["n"] == 1 << 24 and plan["iterations"] == 7 and plan["mneme_space_points"] == 12
    assert len(plan["block_sizes"]) == 12 and "kernel_tuner" in plan
