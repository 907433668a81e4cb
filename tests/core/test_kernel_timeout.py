"""The time limit of kernel runs, kept from outside the process that runs them (kernel_clock, issue 24):
on the host backend here; tests/gpu/test_cuda_kernel_timeout.py runs the same cases on CUDA."""

from __future__ import annotations

from kernel_timeout_cases import (
    capture_stops_a_kernel_past_the_limit,
    pool_kills_a_kernel_past_the_limit,
    record,
    replay_stops_a_kernel_past_the_limit,
)

from mneme.core import kernel_clock


def test_a_tuning_worker_whose_kernel_overstays_is_killed_and_the_trial_is_a_timeout(tmp_path, monkeypatch):
    pool_kills_a_kernel_past_the_limit(tmp_path, "host", monkeypatch)


def test_replay_kills_its_child_when_the_kernel_overstays(tmp_path):
    replay_stops_a_kernel_past_the_limit(tmp_path, "host")


def test_capture_of_a_kernel_that_overstays_fails_with_a_timeout(tmp_path):
    capture_stops_a_kernel_past_the_limit(tmp_path, "host")


def test_windows_reach_the_supervisor_with_the_budget_of_their_runs(monkeypatch):
    seen = []
    monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "2")
    kernel_clock.supervise(seen.append)
    try:
        with kernel_clock.running(3):
            assert kernel_clock.supervised()
            with kernel_clock.running():  # nested: one window
                pass
        assert not kernel_clock.supervised()
        monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "0")  # no limit: nothing to watch
        with kernel_clock.running():
            assert not kernel_clock.supervised()
    finally:
        kernel_clock.supervise(None)
    assert seen == [6.0, 0.0]


def test_the_spinning_kernel_behaves_at_its_recorded_launch(tmp_path):
    assert record(tmp_path, "host").exists()


def test_a_tuning_run_records_kernels_that_overstay_as_timeouts_and_finishes(tmp_path):
    import os
    import subprocess
    import sys

    from mneme.core.tuning.report import open_results

    db = record(tmp_path / "spin", "host")
    results = tmp_path / "tune"
    env = {**os.environ, "MNEME_LIMIT_TIMEOUT_SECONDS": "1"}
    # the baseline (32 threads) runs; every other block size of the space spins
    command = [
        "tune",
        "-rdb",
        db,
        "--space",
        "launch",
        "-o",
        "axes=x",
        "--trials",
        3,
        "--seed",
        1,
        "--retime-top",
        0,
        "--results",
        results,
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", *map(str, command)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store, _ = open_results(results)
    records = [r for r in store.records() if r.status != "infeasible"]
    assert len(records) >= 3 and all(r.state != "RUNNING" for r in records), records  # every trial finished, stored
    wide = [r for r in records if r.params["block_x"] > 5]  # log2 of the block: more than 32 threads spin
    assert wide, "the seed should draw a block that spins"
    for r in wide:
        assert r.status == "failed" and r.result["error_kind"] == "timeout", r
        assert "ran past its time limit" in r.result["error"], r.result["error"]
    assert store.baseline  # the recorded configuration's result is kept too
