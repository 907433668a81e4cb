"""Ctrl-C and SIGTERM as a user expects them: exit 130 or 143 with a line, never a traceback.

`main` is the `mneme` console script: it installs the handlers before the command line
is even imported, so a signal at any moment of start-up ends the process with its exit
code (a signal the process inherited as ignored stays ignored, `install`). The handlers raise `Interrupted`, a `BaseException` (as KeyboardInterrupt is) that
command-line libraries do not catch, unless a `deferred()` block is active: then the first
signal is only recorded (`pending()`) and the block's owner stops at a clean point (the
tuning loop, docs/design/tuning.md "Interruption"); a second signal raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

_SIGNALS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
_deferring = 0
_pending: int | None = None


class Interrupted(BaseException):  # noqa: N818 (KeyboardInterrupt's kin, named for what happened)
    """The process was asked to stop by a signal; `exit_code` is 128 + the signal's number."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        self.signum = int(signum)
        super().__init__(message or f"interrupted by {_SIGNALS.get(signum, f'signal {signum}')}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum: int, frame: object) -> None:
    global _pending
    if _deferring and _pending is None:
        _pending = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to `Interrupted` (main thread only, as Python's signal module requires).

    A signal the process was started with ignored stays ignored, as Python itself leaves an
    ignored SIGINT: a shell without job control starts `mneme ... &` that way so that a Ctrl-C
    meant for the foreground command does not stop the background one, and `nohup`-style
    launchers rely on the same rule.
    """
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)


def pending() -> int | None:
    """The signal received inside a `deferred()` block and not yet acted on."""
    return _pending


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While the block runs, the first SIGINT/SIGTERM is recorded, not raised; leaving the block raises it."""
    global _deferring, _pending
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

        cli_main()
    except (Interrupted, KeyboardInterrupt) as exc:
        code = exc.exit_code if isinstance(exc, Interrupted) else 130
        try:
            sys.stderr.write(f"mneme: {exc or 'interrupted'}\n")
            sys.stderr.flush()
        except Exception:  # stderr closed: the exit code still says it
            pass
        raise SystemExit(code) from None
