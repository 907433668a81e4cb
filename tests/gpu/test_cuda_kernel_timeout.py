"""A CUDA kernel looping forever ends at the time limit (issue 24): the tuning worker running it is
killed and replaced and the trial is a timeout; `mneme replay --timeout` kills its child and exits 3;
`mneme capture --timeout` fails likewise.
The same cases run on the host backend in tests/core/test_kernel_timeout.py."""

from __future__ import annotations

import pytest

from kernel_timeout_cases import (
    capture_stops_a_kernel_past_the_limit,
    pool_kills_a_kernel_past_the_limit,
    replay_stops_a_kernel_past_the_limit,
)


@pytest.mark.gpu
def test_a_tuning_worker_whose_cuda_kernel_overstays_is_killed_and_the_trial_is_a_timeout(tmp_path, monkeypatch):
    pool_kills_a_kernel_past_the_limit(tmp_path, "cuda", monkeypatch)


@pytest.mark.gpu
def test_replay_of_a_cuda_kernel_that_overstays_is_killed_and_not_verified(tmp_path):
    replay_stops_a_kernel_past_the_limit(tmp_path, "cuda")


@pytest.mark.gpu
def test_capture_of_a_cuda_kernel_that_overstays_fails_with_a_timeout(tmp_path):
    capture_stops_a_kernel_past_the_limit(tmp_path, "cuda")
