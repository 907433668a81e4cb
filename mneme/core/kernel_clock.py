"""Time limits of kernel runs enforced from outside the process that runs them.

A GPU kernel that loops forever cannot be stopped from its own process; its process can be
killed. A process that runs experiments for a supervisor (a worker of the pool in
`mneme.core.workers`, or the child `mneme replay` runs its experiment in) installs a sink with
`supervise`; the executor then opens a window around each kernel run (`running`): the sink gets
the window's budget (the time limit, ``--timeout`` or ``MNEME_LIMIT_TIMEOUT_SECONDS``, times the
runs in it) when it opens and 0 when it closes, and the supervisor kills the process when a
window stays open past its budget plus `GRACE` (docs/security.md). Inside a window the host
backend leaves the limit to the supervisor (one timekeeper); outside one it keeps its own.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from mneme.core import limits

#: Seconds a supervisor waits past a window's budget before it kills (the run's own overheads).
GRACE = 2.0

_sink: Callable[[float], None] | None = None
_open = 0


def supervise(sink: Callable[[float], None] | None) -> None:
    """Report kernel windows of this process to `sink` (None: no supervisor)."""
    global _sink
    _sink = sink


def supervised() -> bool:
    """Whether a supervisor is watching a kernel window open now."""
    return _open > 0


def deadline_after(budget: float) -> float:
    """Seconds from a window's opening after which its supervisor kills the process."""
    return budget + GRACE


@contextlib.contextmanager
def running(runs: int = 1) -> Iterator[None]:
    """A window around `runs` kernel runs, reported to the supervisor when there is one and a limit."""
    global _open
    budget = float(limits.limit("timeout_seconds")) * max(runs, 1)
    if _sink is None or budget <= 0 or _open:
        yield
        return
    _sink(budget)
    _open += 1
    try:
        yield
    finally:
        _open -= 1
        _sink(0.0)
