"""The original-style example scripts run unchanged on a host recording, and agree with `mneme replay`.

`tune_launch_optuna.py` is the issue's script: a user SearchSpace, `RecordedExecution.from_json(db)[id]`,
`AsyncReplayExecutor(..., num_workers=1)`, `OptunaSamplingStrategy` iterated as `(config, trial)`,
`evaluate()`, `shutdown()`, without a `__main__` guard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mneme.mneme_types import ExperimentConfiguration
from mneme.recorded_execution import RecordedExecution
from .conftest import ROOT, run_mneme
from .original_files import write_original_recording

EXAMPLES = ROOT / "examples" / "original-api"


def run_example(name: str, db: Path, out: Path, *extra: str) -> list[dict]:
    (record_id,) = RecordedExecution.from_json(str(db)).keys()
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / name),
            "--record-db",
            str(db),
            "--record-id",
            record_id,
            "--results",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def replay(db: Path, config: dict, tmp_path: Path) -> dict:
    """`mneme replay --config` of the same configuration, as JSON."""
    path = tmp_path / f"config-{ExperimentConfiguration.from_dict(config).hash()[:12]}.json"
    path.write_text(json.dumps(ExperimentConfiguration.from_dict(config).to_core().to_dict()))
    done = run_mneme("replay", "-rdb", str(db), "--config", str(path), "--json", "--iterations", "1")
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)["result"]


def check_against_replay(db: Path, entries: list[dict], tmp_path: Path, count: int) -> None:
    for entry in entries[:count]:
        mine = entry["result"]
        theirs = replay(db, entry["config"], tmp_path)
        assert mine["verified"] == theirs["verified"]
        assert entry["variant"] == theirs["variant_hash"]


def test_optuna_script_runs_unchanged_and_agrees_with_replay(saxpy_db, tmp_path):
    entries = run_example("tune_launch_optuna.py", saxpy_db, tmp_path / "out", "--trials", "4")
    assert len(entries) >= 2 and all(e["result"]["verified"] for e in entries)
    assert all(len(e["result"]["exec_time"]) == 5 + 2 for e in entries)
    assert (tmp_path / "out" / "logs").is_dir()
    check_against_replay(saxpy_db, entries, tmp_path, 3)


def test_optuna_script_runs_on_an_original_database(saxpy_db, tmp_path):
    original = write_original_recording(saxpy_db, tmp_path / "original")
    entries = run_example("tune_launch_optuna.py", original, tmp_path / "out", "--trials", "2")
    assert entries and all(e["result"]["verified"] for e in entries)


def test_exhaustive_pipeline_search(saxpy_db, tmp_path):
    entries = run_example("exhaustive_pipelines.py", saxpy_db, tmp_path / "out", "--max-pipelines", "4")
    assert [e["config"]["passes"] for e in entries] == ["default<O0>", "default<O3>", "Os", "Oz"]
    assert all(e["result"]["executed"] for e in entries)
    check_against_replay(saxpy_db, entries, tmp_path, 2)


def test_thread_sweep(saxpy_db, tmp_path):
    entries = run_example("sweep_threads.py", saxpy_db, tmp_path / "out", "--max-threads", "256")
    assert [e["config"]["block"]["x"] for e in entries] == [32, 64, 128, 256]
    assert all(e["result"]["verified"] for e in entries)
    assert all(e["config"]["max_threads"] == 0 for e in entries)  # grounded in place
    check_against_replay(saxpy_db, entries, tmp_path, 2)


@pytest.mark.parametrize("name", ["tune_launch_optuna.py", "exhaustive_pipelines.py", "sweep_threads.py"])
def test_examples_use_only_the_original_api(name):
    text = (EXAMPLES / name).read_text()
    assert "mneme.core" not in text and "mneme.compat" not in text


def test_the_original_api_agrees_with_mneme_tune_on_its_configurations(saxpy_db, tmp_path):
    from mneme.async_executor import AsyncReplayExecutor
    from mneme.core.types import ExperimentConfiguration as CoreConfiguration

    results = tmp_path / "tune"
    done = run_mneme(
        "tune",
        "-rdb",
        str(saxpy_db),
        "--space",
        "launch",
        "--sampler",
        "random",
        "--trials",
        "3",
        "--seed",
        "1",
        "--results",
        str(results),
    )
    assert done.returncode == 0, done.stderr
    done = run_mneme("results", str(results), "--jsonl", str(tmp_path / "trials.jsonl"))
    assert done.returncode == 0, done.stderr
    trials = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    assert trials
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    executor = AsyncReplayExecutor(
        record_db=str(saxpy_db), record_id=record_id, iterations=2, results_db_dir=str(tmp_path / "mine"), num_workers=1
    )
    try:
        for trial in trials:
            core = CoreConfiguration.from_dict(trial["config"])
            mine = ExperimentConfiguration.from_core(core)
            assert mine.to_core().hash() == core.hash()  # the same experiment
            result = executor.evaluate(mine)
            assert result.verified == trial["result"]["verified"]
            assert result.mneme.variant_hash == trial["result"]["variant_hash"]
    finally:
        executor.shutdown()
