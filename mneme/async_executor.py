"""The original Mneme API's `mneme.async_executor` (see `mneme.compat`)."""

from mneme.compat.async_executor import AsyncReplayExecutor, EvalFuture, TuneWorkerHandle, pop

__all__ = ["AsyncReplayExecutor", "EvalFuture", "TuneWorkerHandle", "pop"]
