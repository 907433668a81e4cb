"""The time limit of kernel runs, kept from outside the process that runs them (kernel_clock, issue 24):
on the host backend here; tests/gpu/test_cuda_kernel_timeout.py runs the same cases on CUDA."""

from __future__ import annotations

from kernel_timeout_cases import (capture_stops_a_kernel_past_the_limit, pool_kills_a_kernel_past_the_limit, record,
                                  replay_stops_a_kernel_past_the_limit)

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
