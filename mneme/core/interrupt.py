"""Ctrl-C and SIGTERM as a user expects them: exit 130 or 143 with a line, never a traceback.

`main` is the `mneme` console script: it installs the handlers before the command line
is even imported, so a signal at any moment of start-up ends the process with its exit
code (a signal the process inherited as ignored stays ignored, `install`). The handlers raise `Interrupted`, a `BaseException` (as KeyboardInterrupt is) that
command-line libraries do not catch, unless a `deferred()` block is active: then the first
signal is only recorded (`pending()`) and the block's owner stops at a clean point (the
tuning loop, docs/design/tuning.md "Interruption"); a second signal raises at once.

Python runs a signal's handler in whatever Python code runs next, and that may be code whose
exceptions it cannot pass on: a weakref callback or `__del__` (importlib's module-lock clean-up during
an import), where the exception is only reported ("Exception ignored in ...") and the program goes on;
CPython before 3.13 also drops one raised while it compiles source (an import without a cached .pyc).
Raised between importlib's taking and releasing of the import lock, it also leaves the lock held,
and another thread's next import then waits forever. So the handler does not raise inside importlib's
own code but has the signal delivered again a moment later, and it records each signal it raises for
until it is acted on: a `deferred()` block that starts with one recorded takes it as its pending
signal, `check()` raises it, and the "Exception ignored" report of an `Interrupted` is left out
(`install` sets `sys.unraisablehook`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator

_SIGNALS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
_deferring = 0
_pending: int | None = None
_raised: int | None = None  # the signal the handler last raised Interrupted for, not yet reported
_REDELIVER_SECONDS = 0.01


class Interrupted(BaseException):  # noqa: N818 (KeyboardInterrupt's kin, named for what happened)
    """The process was asked to stop by a signal; `exit_code` is 128 + the signal's number."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        self.signum = int(signum)
        super().__init__(message or f"interrupted by {_SIGNALS.get(signum, f'signal {signum}')}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum: int, frame: types.FrameType | None) -> None:
    global _pending, _raised
    if _deferring and _pending is None:
        _pending = signum
        return
    _raised = signum
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        # Raised inside importlib's own code, the exception can be dropped (its weakref callbacks) or leave
        # the import lock held, and then another thread's next import waits forever: deliver the signal
        # again in a moment, when this thread has left importlib.
        again = threading.Timer(_REDELIVER_SECONDS, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to `Interrupted` (main thread only, as Python's signal module requires).

    A signal the process was started with ignored stays ignored, as Python itself leaves an
    ignored SIGINT: a shell without job control starts `mneme ... &` that way so that a Ctrl-C
    meant for the foreground command does not stop the background one, and `nohup`-style
    launchers rely on the same rule.
    """
    global _raised, _report_unraisable
    _raised = None
    if sys.unraisablehook is not _unraisable:
        _report_unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)


_report_unraisable = sys.__unraisablehook__


def _unraisable(report: object) -> None:
    """Leave out Python's "Exception ignored" report of an `Interrupted`: `_raised` keeps its signal."""
    if not isinstance(getattr(report, "exc_value", None), Interrupted):
        _report_unraisable(report)


def check() -> None:
    """Raise `Interrupted` for a signal whose exception was lost on its way (see the module's note)."""
    global _raised
    if _raised is not None:
        signum, _raised = _raised, None
        raise Interrupted(signum)


def pending() -> int | None:
    """The signal received inside a `deferred()` block and not yet acted on."""
    return _pending


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While the block runs, the first SIGINT/SIGTERM is recorded, not raised; leaving the block raises it."""
    global _deferring, _pending, _raised
    if _deferring == 0 and _raised is not None and _pending is None:  # a signal whose exception was lost
        _pending, _raised = _raised, None
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        signum, _pending = _pending, None
        if signum is not None and _deferring == 0 and sys.exc_info()[0] is None:
            raise Interrupted(signum)


def main() -> None:
    """The `mneme` command, guarded from its first import on."""
    install()
    try:
        from mneme.core.cli import main as cli_main

        try:
            cli_main()
        except SystemExit as done:
            if not done.code:  # the command finished; a Ctrl-C whose exception was dropped still says so
                check()
            raise
        check()
    except (Interrupted, KeyboardInterrupt) as exc:
        code = exc.exit_code if isinstance(exc, Interrupted) else 130
        try:
            sys.stderr.write(f"mneme: {exc or 'interrupted'}\n")
            sys.stderr.flush()
        except Exception:  # stderr closed: the exit code still says it
            pass
        raise SystemExit(code) from None
