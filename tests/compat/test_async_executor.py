"""`mneme.async_executor` as the original Mneme API documents it: worker i on device i, submit/evaluate/shutdown."""

from __future__ import annotations

import pytest

from mneme.async_executor import AsyncReplayExecutor, EvalFuture
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import RecordedExecution


def test_worker_i_runs_on_device_i_and_futures_give_original_results(saxpy_db, tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_HOST_DEVICES", "2")  # the host backend exposes two devices
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    executor = AsyncReplayExecutor(record_db=str(saxpy_db), record_id=record_id, iterations=1,
                                   results_db_dir=str(tmp_path), num_workers=2)  # fmt: skip
    try:
        assert [w.device_id for w in executor.workers] == [0, 1]
        futures = [executor.submit(ExperimentConfiguration(grid=dim3(4096 // t), block=dim3(t)))
                   for t in (64, 128, 256, 512)]  # fmt: skip
        assert all(isinstance(f, EvalFuture) for f in futures)
        results = [f.result(timeout=300) for f in futures]
        assert all(isinstance(r, ExperimentResult) and r.verified for r in results)
        assert {r.gpu_id for r in results} <= {0, 1}
        assert all(len(r.exec_time) == 1 + 2 for r in results)
        bad = executor.evaluate(ExperimentConfiguration(grid=dim3(16), block=dim3(256), set_launch_bounds=True,
                                                        max_threads=128))  # fmt: skip
        assert bad.failed and not bad.verified and bad.error
    finally:
        executor.shutdown()
    with pytest.raises(RuntimeError):
        executor.submit(ExperimentConfiguration(grid=dim3(1), block=dim3(1)))
