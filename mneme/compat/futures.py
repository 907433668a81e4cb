"""`mneme.futures` of the original Mneme API: the future of one experiment."""

from __future__ import annotations

import concurrent.futures
from typing import Any


class EvalFuture(concurrent.futures.Future):
    """A `concurrent.futures.Future` with the original's `job_id`, `params` and `set_error`."""

    def __init__(self, job_id: int | None = None, params: dict[str, Any] | None = None):
        super().__init__()
        self.job_id = job_id
        self.params = params or {}

    def set_error(self, error: str | BaseException) -> None:
        """Fail the future; `result()` raises it (a message becomes a `RuntimeError`)."""
        self.set_exception(error if isinstance(error, BaseException) else RuntimeError(str(error)))
