"""The original Mneme API's `mneme.replay_executor` (see `mneme.compat`)."""

from mneme.compat.replay_executor import BaseExecutor, TuneWorker

__all__ = ["BaseExecutor", "TuneWorker"]
