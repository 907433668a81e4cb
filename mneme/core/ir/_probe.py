"""Bitcode read first in a forked child: LLVM's bitcode reader asserts on some corrupt files.

llvmlite's LLVM is built with assertions, and its bitcode reader checks some invariants of the
file with them: a crafted `.bc` in a recording (the database does not pin its modules' content)
aborted `mneme tune` with SIGABRT and no message (issue 36). A child reads the bytes first; a
child killed by a signal makes the file a format error naming it, and the caller's process
never reads it. The verdict is kept per content, so each distinct file costs one fork.
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import signal
import time

#: Seconds the child may take; past it (a lock another thread held at the fork) nothing is concluded.
PROBE_SECONDS = 60.0
_verdicts: dict[bytes, str | None] = {}


def crash_reading(data: bytes) -> str | None:
    """The signal's name if reading `data` as LLVM bitcode kills a process, else None.

    None also where no verdict is possible (no fork on this system, a child that hangs).
    """
    if not hasattr(os, "fork"):
        return None
    key = hashlib.sha256(data).digest()
    if key in _verdicts:
        return _verdicts[key]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            faulthandler.disable()  # an inherited one (pytest's, a user's) would print this child's stack
            for number in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
                signal.signal(number, signal.SIG_DFL)  # inherited crash handlers (a fuzzer's) would report it
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 2)  # the assertion's text: the parent says what happened
            import llvmlite.binding as llvm

            llvm.parse_bitcode(data).verify()
        except BaseException:  # noqa: BLE001 - an error is the parent's to raise, when it reads
            pass
        os._exit(0)
    verdict = _wait(pid)
    if len(_verdicts) > 1024:
        _verdicts.clear()
    _verdicts[key] = verdict
    return verdict


def _wait(pid: int) -> str | None:
    deadline, pause = time.monotonic() + PROBE_SECONDS, 0.0005
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # SIGCHLD ignored by the embedding program: reaped already
            return None
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    if os.WIFSIGNALED(status):
        try:
            return signal.Signals(os.WTERMSIG(status)).name
        except ValueError:
            return f"signal {os.WTERMSIG(status)}"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:  # LLVM's fatal errors exit() the process
        return f"exit status {os.WEXITSTATUS(status)}"
    return None
