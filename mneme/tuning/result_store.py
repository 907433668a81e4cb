"""The original Mneme API's `mneme.tuning.result_store` (see `mneme.compat`)."""

from mneme.compat.result_store import ResultStore

__all__ = ["ResultStore"]
