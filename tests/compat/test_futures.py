"""Futures and executors as the current original behaves: config field, None on timeout, failed results, no raise."""

from __future__ import annotations

import threading

import pytest

from mneme.async_executor import AsyncReplayExecutor
from mneme.futures import EvalFuture
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.replay_executor import BaseExecutor


def test_future_carries_its_config_and_times_out_with_none():
    config = ExperimentConfiguration(grid=dim3(4), block=dim3(32))
    future = EvalFuture(7, config=config)
    assert (future.job_id, future.config, future.ir_revision, future.ir_data) == (7, config, 0, None)
    assert future.params == config.to_dict()
    assert future.result(timeout=0.05) is None and not future.done()
    threading.Timer(0.05, future.set_result, [ExperimentResult(verified=True)]).start()
    assert future.result(timeout=30).verified and future.done()


def test_an_error_alone_gives_a_failed_result_and_an_error_after_a_result_raises():
    failed = EvalFuture(1, config=None)
    failed.set_error("worker 0 on device 0 died (SIGKILL)")
    result = failed.result()
    assert isinstance(result, ExperimentResult)
    assert result.failed and not result.executed and "SIGKILL" in result.error
    late = EvalFuture(2, config=None)
    partial = ExperimentResult(executed=True)
    late.set_result(partial)
    late.set_error("lost while copying the epilogue")
    with pytest.raises(RuntimeError, match="epilogue"):
        late.result()
    assert partial.error == "lost while copying the epilogue"


def test_cancel_and_callbacks_follow_the_futures_state():
    seen = []
    future = EvalFuture(3, config=None)
    future.add_done_callback(lambda f: seen.append(f.job_id))
    assert future.cancel() and future.cancelled() and not future.set_running_or_notify_cancel()
    assert seen == [3] and future.result().failed
    taken = EvalFuture(4, config=None)
    assert taken.set_running_or_notify_cancel() and not taken.cancel()


def test_base_executor_infers_the_single_record_and_takes_warmup(saxpy_db):
    with BaseExecutor(str(saxpy_db), iterations=2, warmup=1) as executor:
        assert executor.record_id in executor.records and executor.iterations == 2
        result = executor.execute(ExperimentConfiguration(grid=dim3(64), block=dim3(256)))
        assert result.verified and len(result.exec_time) == 2 + 1
        bad = executor.execute(ExperimentConfiguration(grid=dim3(0), block=dim3(256)))
        assert bad.failed and "invalid configuration" in bad.error
    with pytest.raises(RuntimeError, match="no kernel instance 'nope'"):
        BaseExecutor(str(saxpy_db), "nope")


def test_async_executor_never_raises_for_a_configuration_value(saxpy_db, tmp_path):
    executor = AsyncReplayExecutor(str(saxpy_db), iterations=2, results_db_dir=str(tmp_path), warmup=1)
    try:
        # a fraction in max_threads with launch bounds off is unused: the experiment runs and verifies
        fraction = executor.evaluate(
            ExperimentConfiguration(grid=dim3(64), block=dim3(256), max_threads=0.37, min_blocks_per_sm=0.5)
        )
        assert fraction.verified and len(fraction.exec_time) == 2 + 1
        # with launch bounds on it is a bound no kernel can have: a failed result, not an exception
        bounded = executor.evaluate(
            ExperimentConfiguration(grid=dim3(64), block=dim3(256), set_launch_bounds=True, max_threads=0.37)
        )
        assert bounded.failed and not bounded.verified and bounded.error
        for config in (
            ExperimentConfiguration(grid=dim3(64), block=dim3(256), codegen_opt=9),
            ExperimentConfiguration(grid=dim3(64), block=dim3(0)),
            ExperimentConfiguration(grid=dim3(64), block=dim3(256), passes="function(bogus)"),
        ):
            result = executor.evaluate(config)
            assert isinstance(result, ExperimentResult) and result.failed and result.error
    finally:
        executor.shutdown()
