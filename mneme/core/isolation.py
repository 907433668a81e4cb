"""Run a command's kernels in a child process: restricted like a worker, watched, killed past its limit.

`mneme replay` and `mneme capture` run other people's kernels (docs/security.md). `run_isolated`
forks before anything is opened; the child drops what a worker drops (`limits.restrict_worker`:
no core dumps, no new privileges, a data-memory cap), runs the command's body and sends back its
value or its error; the parent re-raises that error, so the CLI reports it as it would have.
The parent keeps the kernels' time limit (`kernel_clock`): a kernel window the child leaves open
past its budget (a GPU kernel looping forever) kills the child, and the command fails as not
verified. A child that dies (a signal, the memory cap) is an error naming how it died.
The fork happens before the command opens a device: a program that embeds the CLI after it has
initialized a GPU driver itself (drivers do not survive fork) sets ``MNEME_ISOLATE=0``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import signal
import sys
import time
from multiprocessing.connection import Pipe
from typing import Any, Callable

from mneme.core import envvars, kernel_clock, limits
from mneme.core.errors import ExperimentError, MnemeError, NotVerifiedError

log = logging.getLogger(__name__)

ENV = "MNEME_ISOLATE"
_POLL = 0.05


def enabled() -> bool:
    """Whether commands run kernels in a child process (``MNEME_ISOLATE``, default on; Linux and macOS)."""
    return hasattr(os, "fork") and (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


class ChildError(MnemeError):
    """An error of the child that could not travel as itself: its type, message and exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self):
        return ChildError, (str(self), self.exit_code)


def _has_fd(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a `ChildError` with its message and exit code."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception type may refuse pickling
        code = exc.exit_code if isinstance(exc, MnemeError) else 1
        text = str(exc) if isinstance(exc, MnemeError) else f"{type(exc).__name__}: {exc}"
        return ChildError(text, code)


def _child(body: Callable[[], Any], conn) -> None:
    """The child's side: restrict, run, send {"value"} / {"exit"} / {"error"} with the captured output."""
    reply: dict[str, Any] = {"payload": "done"}
    # Output to a stream without a file descriptor (click's test runner) is captured and sent back;
    # a real terminal or file is written directly.
    out = None if _has_fd(sys.stdout) else io.StringIO()
    err = None if _has_fd(sys.stderr) else io.StringIO()
    try:
        limits.restrict_worker(default_data_bytes=_physical_memory())
        kernel_clock.supervise(
            lambda budget, limit="timeout_seconds": conn.send({"payload": "kernel", "budget": budget, "limit": limit})
        )
        with contextlib.ExitStack() as stack:
            if out is not None:
                stack.enter_context(contextlib.redirect_stdout(out))
            if err is not None:
                stack.enter_context(contextlib.redirect_stderr(err))
            try:
                reply["value"] = body()
            except SystemExit as exc:
                reply["exit"] = exc.code
            except BaseException as exc:  # noqa: BLE001 - re-raised by the parent
                reply["error"] = _portable(exc)
        sys.stdout.flush()
        sys.stderr.flush()
        reply["stdout"] = out.getvalue() if out is not None else ""
        reply["stderr"] = err.getvalue() if err is not None else ""
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - e.g. a value that does not pickle
            conn.send({"payload": "done", "error": ChildError(f"the result did not travel back: {exc}", 1)})
    finally:
        os._exit(0)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def run_isolated(body: Callable[[], Any], what: str) -> Any:
    """Run `body()` in a restricted child process and return its value; its error is raised here.

    `what` names the command in messages ("replay"). Without ``fork`` (or with ``MNEME_ISOLATE=0``)
    `body` runs in this process.
    """
    if not enabled():
        return body()
    parent, child = Pipe(duplex=True)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        parent.close()
        _child(body, child)
    child.close()
    reply = None
    kernel_since, kernel_budget, window_limit = 0.0, 0.0, "timeout_seconds"
    try:
        while reply is None:
            if parent.poll(_POLL):
                try:
                    message = parent.recv()
                except (EOFError, OSError):
                    break
                if message.get("payload") == "kernel":
                    kernel_since, kernel_budget = time.monotonic(), float(message.get("budget") or 0.0)
                    window_limit = message.get("limit") or "timeout_seconds"
                else:
                    reply = message
            elif kernel_budget and time.monotonic() - kernel_since > kernel_clock.deadline_after(kernel_budget):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                if window_limit == kernel_clock.COMPILE_LIMIT:
                    raise kernel_clock.compile_limit_error(kernel_budget, f"the {what} process (pid {pid})")
                raise NotVerifiedError(
                    f"the kernel timed out: it ran past its time limit ({kernel_budget:g} s for the runs in flight; "
                    f"--timeout or {limits.variable('timeout_seconds')}); the {what} process (pid {pid}) was killed"
                )
    except BaseException:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    finally:
        parent.close()
    _, status = os.waitpid(pid, 0)
    if reply is None:
        if os.WIFSIGNALED(status):
            how = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"exit code {os.WEXITSTATUS(status)}"
        raise ExperimentError(
            f"the {what} process (pid {pid}) died with {how} before it finished (a kernel, the "
            f"runtime or the memory cap, {limits.variable('worker_data_bytes')}, ended it)"
        )
    sys.stdout.write(reply.get("stdout", ""))
    sys.stderr.write(reply.get("stderr", ""))
    if "exit" in reply:
        raise SystemExit(reply["exit"])
    if "error" in reply:
        raise reply["error"]
    return reply.get("value")
