"""Each example program of the original Mneme's repository, as a counterpart making the same calls, runs on host recordings.

The counterparts live in `original_examples/` (its README maps each to its original). Each runs
as a user runs the original: `python script.py ...` in a fresh folder, the host backend exposing
four devices for the scripts that start four workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mneme.core.pipeline import parse_pipeline
from mneme.recorded_execution import RecordedExecution
from .conftest import ROOT

HERE = Path(__file__).parent / "original_examples"


def run_script(name: str, args: list[str], cwd: Path) -> dict:
    env = dict(
        os.environ, MNEME_HOST_DEVICES="4", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, str(HERE / name), *args], cwd=cwd, capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def record(saxpy_db) -> tuple[str, str]:
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    return str(saxpy_db), record_id


def test_cuda_tune_threads_stores_a_fraction_as_max_threads_without_launch_bounds_and_gets_results(record, tmp_path):
    db, rid = record
    out = run_script(
        "cuda_vec_add_tune_threads.py", ["--record-db", db, "--record-id", rid, "--num-trials", "6"], tmp_path
    )
    assert out["baseline_runs"] == 5 + 2
    assert len(out["trials"]) == 6
    fractions = [t for t in out["trials"] if not t["config"]["set_launch_bounds"]]
    assert all(0.0 <= t["config"]["max_threads"] <= 1.0 for t in fractions)
    assert not any("invalid configuration" in t["error"] for t in fractions)  # no fraction reaches the core
    for trial in out["trials"]:
        assert trial["verified"] or trial["error"] or not trial["failed"]  # a failure says why
        parse_pipeline(trial["config"]["passes"])  # 120-draw pipelines are LLVM pipelines
    assert any(t["verified"] for t in out["trials"])
    assert (tmp_path / "results").is_dir()


def test_hip_tune_threads_runs_at_module_level_on_four_workers(record, tmp_path):
    db, rid = record
    out = run_script("hip_vec_add_tune_threads.py", [db, rid, "8"], tmp_path)
    assert out["baseline_verified"] and len(out["trials"]) == 8
    assert {t["gpu_id"] for t in out["trials"]} <= {0, 1, 2, 3}
    assert any(t["verified"] for t in out["trials"])


def test_bezier_tune_generates_pipelines_submits_the_exhaustive_space_and_exports_the_best(record, tmp_path):
    db, rid = record
    out = run_script(
        "bezier_surface_tune.py",
        ["--record-db", db, "--record-id", rid, "--pipelines", "2", "-o", "tuned.json"],
        tmp_path,
    )
    assert len(out["generated"]) == 2 + 5
    for text in out["generated"][:2]:
        parse_pipeline(text)
        assert text.count("(") == text.count(")") and len(text.split(",")) >= 60  # ~N(120, 20) passes
    assert len(out["outcomes"]) == (2 + 5) * 2 * 2 * 2
    assert all(o["verified"] for o in out["outcomes"] if o["passes"].startswith("default<"))
    exported = json.loads((tmp_path / "tuned.json").read_text())
    assert exported and out["best_speedup"] > 0


def test_minife_tune_maps_real_fractions_to_launches_with_launch_bounds_and_verifies(record, tmp_path):
    db, rid = record
    out = run_script("minife_tune.py", ["--record-db", db, "--record-id", rid, "--trials", "5"], tmp_path)
    assert len(out["outcomes"]) == 5
    for o in out["outcomes"]:
        assert o["block"] % 64 == 0 and o["block"] <= o["max_threads"] <= 1024 and 1 <= o["grid"] <= 4096 * 4 // 64
    # saxpy is a grid-stride loop: every launch computes every element, so every variant verifies
    assert all(o["verified"] for o in out["outcomes"]) and out["best"] > 0


def test_wsm5_tune_evaluates_all_eight_switch_settings_verified(record, tmp_path):
    db, rid = record
    out = run_script("wsm5_tune.py", ["--record-db", db, "--record-id", rid], tmp_path)
    assert len(out["results"]) == 8 and all(r["verified"] for r in out["results"])
    assert out["total_runs"] == 8 * 6


def test_wsm5_tune_passes_evaluates_every_default_level_with_every_switch(record, tmp_path):
    db, rid = record
    out = run_script("wsm5_tune_passes.py", ["--record-db", db, "--record-id", rid], tmp_path)
    passes = sorted({r["config"]["passes"] for r in out["results"]})
    assert passes == ["default<O1>", "default<O2>", "default<O3>", "default<Os>", "default<Oz>"]
    assert len(out["results"]) == 40 and all(r["verified"] for r in out["results"])
