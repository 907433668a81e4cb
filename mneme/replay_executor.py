"""The original Mneme API's `mneme.replay_executor` (see `mneme.compat`)."""

from mneme.compat.replay_executor import BaseExecutor

__all__ = ["BaseExecutor"]
