"""`mneme.async_executor` of the original Mneme API: a pool of worker processes, worker i on device i.

An adapter over `mneme.core.workers.AsyncReplayExecutor`. What it adds to the core is
the original's behaviour: one worker per device index, futures resolving to the
original's `ExperimentResult`, and workers that start from a script without a
`__main__` guard (the workers never import the user's script).
"""

from __future__ import annotations

import concurrent.futures

from mneme.compat.errors import as_runtime_error, runtime_errors
from mneme.compat.futures import EvalFuture
from mneme.compat.recorded_execution import mneme_database
from mneme.compat.replay_executor import WARMUP_RUNS, _core_config
from mneme.compat.spawn import main_hidden
from mneme.compat.types import ExperimentConfiguration, ExperimentResult
from mneme.core.errors import MnemeError
from mneme.compat.worker_handle import TuneWorkerHandle
from mneme.core.workers import TuneWorkerHandle as PoolWorker
from mneme.core.workers import pop

__all__ = ["AsyncReplayExecutor", "EvalFuture", "TuneWorkerHandle", "pop"]


class AsyncReplayExecutor:
    """Runs experiments of one recorded instance on `num_workers` worker processes (worker i on device i)."""

    def __init__(self, record_db: str, record_id: str, iterations: int, results_db_dir: str, num_workers: int = 1):
        from mneme.core.workers import AsyncReplayExecutor as Core

        self.record_db = record_db
        self.record_id = record_id
        self.iterations = iterations
        self.results_db_dir = results_db_dir
        self.num_workers = num_workers
        with runtime_errors():
            self._pool = Core(str(mneme_database(record_db)), record_id, iterations, results_db_dir, num_workers,
                              devices=list(range(num_workers)), warmup=WARMUP_RUNS, start=False)  # fmt: skip
            with main_hidden():
                self._pool.start()

    @property
    def workers(self) -> list[PoolWorker]:
        return self._pool.device_workers

    def submit(self, config: ExperimentConfiguration) -> EvalFuture:
        """Queue one experiment without waiting; the future resolves to an `ExperimentResult`."""
        future = EvalFuture(params=config.to_dict())
        with runtime_errors():
            inner = self._pool.submit(_core_config(config))

        def done(f: concurrent.futures.Future) -> None:
            if f.cancelled():
                future.cancel()
                future.set_running_or_notify_cancel()
            elif f.exception() is not None:
                exc = f.exception()
                future.set_exception(as_runtime_error(exc) if isinstance(exc, MnemeError) else exc)
            else:
                future.set_result(ExperimentResult.from_core(f.result()))

        inner.add_done_callback(done)
        return future

    def evaluate(self, config: ExperimentConfiguration) -> ExperimentResult:
        """Submit one experiment and wait for its result."""
        return self.submit(config).result()

    def shutdown(self) -> None:
        """Terminate the workers (what is still queued is cancelled)."""
        self._pool.shutdown()

    def __enter__(self) -> AsyncReplayExecutor:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        self.shutdown()
        return False
