"""`mneme.async_executor` of the original Mneme API: a pool of worker processes, worker i on device i.

An adapter over `mneme.core.workers.AsyncReplayExecutor`. What it adds to the core is
the original's behaviour: one worker per device index, futures resolving to the
original's `ExperimentResult`, and workers that start from a script without a
`__main__` guard (the workers never import the user's script).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from pathlib import Path

from mneme.compat.errors import runtime_errors
from mneme.compat.futures import EvalFuture
from mneme.compat.recorded_execution import RecordedExecution, mneme_database
from mneme.compat.replay_executor import WARMUP_RUNS, _core_config, infer_record_id, ir_override
from mneme.compat.spawn import main_hidden
from mneme.compat.types import ExperimentConfiguration, ExperimentResult
from mneme.compat.worker_handle import TuneWorkerHandle
from mneme.core.errors import MnemeError
from mneme.core.workers import TuneWorkerHandle as PoolWorker
from mneme.core.workers import pop

__all__ = ["AsyncReplayExecutor", "EvalFuture", "TuneWorkerHandle", "ir_override", "pop"]


class AsyncReplayExecutor:
    """Runs experiments of one recorded instance on `num_workers` worker processes (worker i on device i).

    `record_id` may be left out for a database of one instance (as the current original infers
    it); `warmup` untimed-for-the-user runs precede the `iterations` timed ones in `exec_time`.
    No configuration makes `submit`/`evaluate` raise: what cannot be built or run comes back
    as a failed `ExperimentResult` whose `error` says why.
    """

    def __init__(
        self,
        record_db: str,
        record_id: str | None = None,
        iterations: int = 3,
        results_db_dir: str = ".",
        num_workers: int = 1,
        warmup: int = WARMUP_RUNS,
    ):
        from mneme.core.workers import AsyncReplayExecutor as Core

        self.record_db = record_db
        self.record_id = infer_record_id(RecordedExecution.from_json(record_db), record_db, record_id)
        self.iterations = iterations
        self.results_db_dir = results_db_dir
        self.num_workers = num_workers
        self.warmup = warmup
        self._next_id = itertools.count()
        self._lock = threading.Lock()
        self._ir_revision = 0  # as the original: bumped by each set_ir, carried by the futures
        self._ir_data: str | None = None
        self._ir_error = ""  # set_ir's IR could not be read: each experiment fails with this
        with runtime_errors():
            self._pool = Core(
                str(mneme_database(record_db)),
                self.record_id,
                iterations,
                results_db_dir,
                num_workers,
                devices=list(range(num_workers)),
                warmup=warmup,
                start=False,
            )
            with main_hidden():
                self._pool.start()

    @property
    def workers(self) -> list[PoolWorker]:
        return self._pool.device_workers

    def set_ir(self, ir: str | os.PathLike | bytes | None) -> None:
        """Use this LLVM IR for the evaluations submitted after this call (the original's `set_ir`).

        `ir`: a path to a ``.ll`` or ``.bc`` file (a `Path`, or a string ending so), or the IR as a
        string; None (an addition) goes back to the recording's IR. As the recording's, the IR is
        parsed in the workers, linked for the kernel (internalized, pruned) and verified against the
        recorded epilogue; IR that cannot be read or parsed, does not define the kernel, or changes its
        parameters gives failed results whose `error` names it, never an exception.
        """
        with self._lock:
            self._ir_revision += 1
            self._ir_data = None if ir is None else str(Path(ir).absolute()) if isinstance(ir, Path) else ir
            self._ir_error = ""
            try:
                override = None if ir is None else ir_override(ir)
            except RuntimeError as exc:  # the original's workers fail each experiment on it: the same here
                self._ir_error = f"set_ir: {exc}"
                return
            self._pool.set_ir(override)

    def submit(self, config: ExperimentConfiguration) -> EvalFuture:
        """Queue one experiment without waiting; the future resolves to an `ExperimentResult`."""
        with self._lock:  # the future's IR revision is the one its experiment builds from
            future = EvalFuture(next(self._next_id), config, self._ir_revision, self._ir_data)
            if self._ir_error:
                future.set_error(self._ir_error)
                return future
            try:
                core_config = _core_config(config)
            except (ValueError, TypeError) as exc:  # the original builds it and fails in the worker: a failed result
                future.set_error(f"invalid configuration: {exc}")
                return future
            try:
                inner = self._pool.submit(core_config)
            except MnemeError as exc:
                future.set_error(str(exc))
                return future

        def done(f: concurrent.futures.Future) -> None:
            if f.cancelled():
                future.cancel()
            elif f.exception() is not None:
                future.set_error(f.exception())
            else:
                future.set_result(ExperimentResult.from_core(f.result()))

        inner.add_done_callback(done)
        return future

    def evaluate(self, config: ExperimentConfiguration) -> ExperimentResult:
        """Submit one experiment and wait for its result (a failed result, never an exception, when it fails)."""
        return self.submit(config).result()

    def shutdown(self) -> None:
        """Terminate the workers (what is still queued is cancelled)."""
        self._pool.shutdown()

    def __enter__(self) -> AsyncReplayExecutor:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        self.shutdown()
        return False
