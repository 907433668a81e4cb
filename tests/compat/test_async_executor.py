"""`mneme.async_executor` as the original Mneme API documents it: worker i on device i, submit/evaluate/shutdown."""

from __future__ import annotations

import os
import re
import queue
import signal
import time

import pytest

from mneme.async_executor import AsyncReplayExecutor, EvalFuture, TuneWorkerHandle
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import RecordedExecution


def test_worker_i_runs_on_device_i_and_futures_give_original_results(saxpy_db, tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_HOST_DEVICES", "2")  # the host backend exposes two devices
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    executor = AsyncReplayExecutor(
        record_db=str(saxpy_db), record_id=record_id, iterations=1, results_db_dir=str(tmp_path), num_workers=2
    )
    try:
        assert [w.device_id for w in executor.workers] == [0, 1]
        futures = [
            executor.submit(ExperimentConfiguration(grid=dim3(4096 // t), block=dim3(t))) for t in (64, 128, 256, 512)
        ]
        assert all(isinstance(f, EvalFuture) for f in futures)
        results = [f.result(timeout=300) for f in futures]
        assert all(isinstance(r, ExperimentResult) and r.verified for r in results)
        assert {r.gpu_id for r in results} <= {0, 1}
        assert all(len(r.exec_time) == 1 + 2 for r in results)
        bad = executor.evaluate(
            ExperimentConfiguration(grid=dim3(16), block=dim3(256), set_launch_bounds=True, max_threads=128)
        )
        assert bad.failed and not bad.verified and bad.error
    finally:
        executor.shutdown()
    late = executor.evaluate(ExperimentConfiguration(grid=dim3(1), block=dim3(1)))  # after shutdown: failed, no raise
    assert late.failed and not late.executed and late.error


def test_tune_worker_handle_serves_futures_from_the_shared_queue_and_survives_a_worker_death(saxpy_db, tmp_path):
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    jobs: queue.Queue = queue.Queue()
    handle = TuneWorkerHandle(0, jobs, str(saxpy_db), record_id, 0, 200, str(tmp_path))
    try:
        first = EvalFuture(1, ExperimentConfiguration(grid=dim3(64), block=dim3(256)))
        jobs.put(first)
        assert first.result(timeout=300).verified and handle.current is None
        doomed = EvalFuture(2, ExperimentConfiguration(grid=dim3(32), block=dim3(512)))
        jobs.put(doomed)
        deadline = time.monotonic() + 60
        while handle.current is not doomed and not doomed.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(handle._process.pid, signal.SIGKILL)  # dies with the job in flight (200 timed runs)
        lost = doomed.result(timeout=300)  # the current original: a failed result naming the crash, no raise
        assert lost.failed and not lost.executed and re.search("worker 0 on device 0 died .*SIGKILL", lost.error)
        after = EvalFuture(3, ExperimentConfiguration(grid=dim3(128), block=dim3(128)))
        jobs.put(after)
        result = after.result(timeout=300)  # served by the restarted worker
        assert result.verified and result.gpu_id == 0 and len(result.exec_time) == 200 + 2
    finally:
        handle.join()
    assert not handle._process.is_alive() and (tmp_path / "Worker-0.log").exists()
