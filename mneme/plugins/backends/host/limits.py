"""The host backend's launch limits: the grid and block a CUDA GPU allows, and a time limit per run.

A recording from someone else may declare any launch (docs/security.md): a grid of 2**31
blocks in x is refused as a GPU would refuse it, not run for days, and every run stops at
the time limit (`--timeout`, or ``MNEME_LIMIT_TIMEOUT_SECONDS``; default in `mneme.core.limits`).
"""

from __future__ import annotations

import ctypes
from typing import Any

from mneme.core import kernel_clock, limits
from mneme.core.errors import ExperimentError

#: The limits of every CUDA device since compute capability 3.0, which the host backend declares too.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)


def check_launch(name: str, grid: Any, block: Any) -> None:
    """Refuse a grid or block outside the device's limits, naming the axis."""
    for what, dims, bound in (("grid", grid.as_tuple(), MAX_GRID), ("block", block.as_tuple(), MAX_BLOCK)):
        for axis, value, most in zip("xyz", dims, bound):
            if not 1 <= value <= most:
                raise ExperimentError(
                    f"kernel {name!r}: {what} {axis} = {value} is outside the device's limit 1..{most}", kind="invalid"
                )  # invalid input (exit 2), as on a GPU


def timeout_seconds() -> float:
    """The time limit of one kernel run, in seconds (0: none, or a supervisor keeps it: `kernel_clock`)."""
    if kernel_clock.supervised():
        return 0.0
    return float(limits.limit("timeout_seconds"))


def arm(runtime: ctypes.CDLL) -> None:
    """Give the runtime the current time limit (read per launch: a worker inherits the variable)."""
    setter = runtime.mneme_set_timeout
    setter.argtypes = [ctypes.c_double]
    setter.restype = None
    setter(timeout_seconds())
