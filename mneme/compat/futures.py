"""`mneme.futures` of the original Mneme API: the future of one experiment.

As the original's current release: `EvalFuture(job_id, config, ir_revision=0, ir_data=None)`;
`result(timeout)` returns None when the time runs out; an experiment that failed (`set_error`)
gives a failed `ExperimentResult` carrying the message, and raises only when a result was set
before the error (the error is then attached to that result).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class EvalFuture:
    """One submitted experiment: its id and configuration, and its result once a worker sets it."""

    def __init__(
        self,
        job_id: int | None = None,
        config: Any = None,
        ir_revision: int = 0,
        ir_data: str | None = None,
        params: dict[str, Any] | None = None,
    ):
        self.job_id = job_id
        if config is None and params is not None:  # the original's earlier releases named it `params`, a dict
            from mneme.compat.types import ExperimentConfiguration

            config = ExperimentConfiguration.from_dict(params)
        self.config = config
        self.ir_revision = ir_revision
        self.ir_data = ir_data
        self._cond = threading.Condition()
        self._done = False
        self._running = False
        self._cancelled = False
        self._result: Any = None
        self._error: str | None = None
        self._callbacks: list[Callable[[EvalFuture], None]] = []

    @property
    def params(self) -> dict[str, Any]:
        """The configuration as a dict (the earlier releases' field)."""
        config = self.config
        return config.to_dict() if hasattr(config, "to_dict") else dict(config or {})

    def set_result(self, result: Any) -> None:
        """Complete the future with the experiment's result."""
        with self._cond:
            self._result = result
            callbacks = self._complete()
        self._run(callbacks)

    def set_error(self, error: str | BaseException) -> None:
        """Complete the future with an error message (a result set before keeps it as its `error`)."""
        with self._cond:
            self._error = str(error) or type(error).__name__
            callbacks = self._complete()
        self._run(callbacks)

    # concurrent.futures' spelling, for code that resolves these futures from inner ones
    set_exception = set_error

    def _complete(self) -> list[Callable[[EvalFuture], None]]:
        """Mark done and wake the waiters (lock held); returns the callbacks to run after releasing it."""
        self._done = True
        self._cond.notify_all()
        callbacks, self._callbacks = self._callbacks, []
        return callbacks

    def _run(self, callbacks: list[Callable[[EvalFuture], None]]) -> None:
        for callback in callbacks:
            callback(self)

    def done(self) -> bool:
        with self._cond:
            return self._done

    def running(self) -> bool:
        with self._cond:
            return self._running and not self._done

    def cancel(self) -> bool:
        """Cancel a future no worker has taken yet; its result is then a failed result saying so."""
        with self._cond:
            if self._running or self._done:
                return self._cancelled
            self._cancelled = True
            self._error = f"experiment {self.job_id} was cancelled before it ran"
            callbacks = self._complete()
        self._run(callbacks)
        return True

    def cancelled(self) -> bool:
        with self._cond:
            return self._cancelled

    def set_running_or_notify_cancel(self) -> bool:
        """Mark the future taken by a worker; False when it was cancelled (the worker skips it)."""
        with self._cond:
            if self._cancelled:
                return False
            self._running = True
            return True

    def add_done_callback(self, callback: Callable[[EvalFuture], None]) -> None:
        with self._cond:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error as a `RuntimeError`, or None (also when the time runs out)."""
        with self._cond:
            if not self._done:
                self._cond.wait(timeout=timeout)
            return RuntimeError(self._error) if self._done and self._error else None

    def result(self, timeout: float | None = None) -> Any:
        """The `ExperimentResult`; None when `timeout` seconds pass first.

        A future completed by `set_error` alone gives a failed `ExperimentResult` (not executed,
        the message in `error`); one whose result was set before the error raises `RuntimeError`.
        """
        from mneme.compat.types import ExperimentResult

        with self._cond:
            if not self._done:
                self._cond.wait(timeout=timeout)
            if not self._done:
                return None
            if self._error:
                if self._result is None:
                    return ExperimentResult(error=self._error, failed=True, executed=False)
                self._result.error = self._error
                raise RuntimeError(self._error)
            return self._result
