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

_sink: Callable[..., None] | None = None
_open = 0
_compiling = False

#: The limit a compile window runs under (a supervisor names it when it kills).
COMPILE_LIMIT = "compile_seconds"


def supervise(sink: Callable[..., None] | None) -> None:
    """Report kernel and compile windows of this process to `sink` (None: no supervisor).

    `sink(budget)` opens a kernel window, `sink(budget, "compile_seconds")` a compile window and
    `sink(0.0)` closes either."""
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


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """A window around one variant's compilation, under the compile_seconds limit.

    LLVM cannot be interrupted inside a pass: a kernel of 100k basic blocks compiles for longer
    than any run, so its process is killed from outside, as a kernel run is. The sink gets the
    limit's name with the budget (``sink(budget, "compile_seconds")``) to report which limit hit.
    """
    global _compiling
    budget = float(limits.limit("compile_seconds"))
    if _sink is None or budget <= 0 or _open or _compiling:
        yield
        return
    _sink(budget, COMPILE_LIMIT)
    _compiling = True
    try:
        yield
    finally:
        _compiling = False
        _sink(0.0)


def compile_limit_message(budget: float, killed: str) -> str:
    """What a supervisor says when it killed `killed` for compiling past its limit."""
    return (
        f"compiling the variant took longer than its limit compile_seconds={budget:g} s; {killed} was killed. "
        f"The kernel's IR is too large to compile in time; if it is trusted, raise the limit with "
        f"{limits.variable(COMPILE_LIMIT)}=N"
    )


def compile_limit_error(budget: float, killed: str):
    """The error a command raises when its compilation was killed (a limit: invalid input, exit 2)."""
    from mneme.core.errors import LimitError

    return LimitError(compile_limit_message(budget, killed))
