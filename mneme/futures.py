"""The original Mneme API's `mneme.futures` (see `mneme.compat`)."""

from mneme.compat.futures import EvalFuture

__all__ = ["EvalFuture"]
