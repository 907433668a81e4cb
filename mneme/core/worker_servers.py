"""The servers of the worker processes the pool (`mneme.core.workers`) starts.

`tune_worker_main` is a worker's entry point: a device worker opens one `BaseExecutor` and runs
experiments; a compile worker holds one `KernelBuilder` and returns binaries (compile-ahead).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from mneme.core import backend as backend_mod
from mneme.core import events, kernel_clock, limits
from mneme.core.errors import EXIT_INVALID_INPUT, ExperimentError, MnemeError
from mneme.core.executor import BaseExecutor, fail_result, utc_now
from mneme.core.kernel_builder import KernelBuilder, resolve_backend
from mneme.core.recording import load_recording
from mneme.core.snapshot import Snapshot
from mneme.core.types import ExperimentConfiguration, ExperimentResult

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PARENT_POLL = 0.1  # seconds between checks of the parent, where the kernel cannot tell us


# -- the worker process (the seed's TuneWorker) ------------------------------------------------


def tune_worker_main(conn, spec: dict[str, Any], log_path: str) -> None:
    """Entry point of a worker process: open once, signal readiness, then serve messages.

    Messages in: ``{"payload": "process", "exp_id", "data": config dict, "binary": DeviceBinary | None}``,
    ``{"payload": "compile", "exp_id", "data": config dict}`` (compile workers) and
    ``{"payload": "terminate"}``; a "process" or "compile" message may carry ``"ir"``, an `IROverride`
    to build from from then on (None: the recording's IR again). Out: ``{"payload": "ready", ...}``
    once, then per message ``{"exp_id", "payload": "result", "data": result dict}`` or
    ``{"exp_id", "payload": "binary", "data": DeviceBinary | None, "result": result dict}``.
    """
    # The pool decides when a worker stops; a terminal's Ctrl-C reaches the whole process group (the pool
    # blocks SIGINT while it starts us, ignoring it here also drops one already pending).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(spec.get("parent_pid"))
    _redirect_output(log_path)
    limits.restrict_worker()  # no core dumps, no new privileges (docs/security.md)
    events.mute(*events.POOL_REPORTED)  # the pool reports them in the tuning process
    role = spec.get("role", "device")
    log.info("worker %s starting: pid %d, role %s, spec %s", spec.get("name"), os.getpid(), role, spec)
    try:
        if role == "compile":
            server = _CompileServer(spec)
        else:
            server = _DeviceServer(spec)
    except BaseException as exc:  # tell the parent why before exiting
        log.exception("worker startup failed")
        try:
            # A MnemeError (bad recording, unusable backend) repeats on every retry: say so.
            conn.send(
                {
                    "payload": "error",
                    "error": f"{type(exc).__name__}: {exc}",
                    "fatal": isinstance(exc, MnemeError),
                    "invalid_input": getattr(exc, "exit_code", None) == EXIT_INVALID_INPUT,
                }
            )
        finally:
            conn.close()
        os._exit(3)
    # The pool keeps the kernels' time limit: it kills this process when a run overstays (kernel_clock).
    kernel_clock.supervise(
        lambda budget, limit="timeout_seconds": conn.send({"payload": "kernel", "budget": budget, "limit": limit})
    )
    conn.send({"payload": "ready", "pid": os.getpid(), **server.info()})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message.get("payload") == "terminate":
            break
        if "ir" in message:  # replacement IR from now on (None: the recording's); parsed when first built
            server.builder.set_ir(message["ir"])
        config_data = message.get("data") or {}
        try:
            config = ExperimentConfiguration.from_dict(config_data)
        except MnemeError as exc:
            result = ExperimentResult(failed=True, error_kind="invalid", error=str(exc))
            conn.send({"exp_id": message.get("exp_id"), "payload": "result", "data": result.to_dict()})
            continue
        reply = server.serve(message, config, conn)
        conn.send({"exp_id": message.get("exp_id"), **reply})
    server.close()
    conn.close()
    logging.shutdown()


def die_with_parent(parent_pid: int | None) -> None:
    """End this worker as soon as the tuner that started it ends, however it ends (SIGKILL included).

    A worker busy with an experiment does not read its pipe, so the pipe's end alone is noticed only
    after the experiment. On Linux the kernel kills us when the thread that spawned us ends
    (``PR_SET_PDEATHSIG``; the pool spawns each worker from its handle's thread, which lives until
    the worker has stopped); elsewhere, and as a second line, a thread checks the parent's pid every
    `PARENT_POLL` seconds. A parent that died before either was set up is caught by the first check.
    """
    if parent_pid is None:
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # orphaned already: re-parented to init or a subreaper
        os._exit(4)

    def watch() -> None:
        while os.getppid() == parent_pid:
            threading.Event().wait(PARENT_POLL)
        os._exit(4)  # no clean-up: our parent's pool is gone, nobody reads what we would say

    threading.Thread(target=watch, name="mneme-parent-watch", daemon=True).start()


def _redirect_output(log_path: str) -> None:
    """Send this process's stdout, stderr (native ones too: LLVM aborts) and logging to the log file."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


class _DeviceServer:
    def __init__(self, spec: dict[str, Any]):
        self.executor = BaseExecutor(
            spec["record_db"],
            spec.get("record_id"),
            iterations=spec.get("iterations", 3),
            device_id=spec.get("device_id", 0),
            backend=spec.get("backend"),
            mode=spec.get("mode", "ir"),
            warmup=spec.get("warmup", 1),
            cache=spec.get("cache", "flushed"),
            timer=spec.get("timer", "auto"),
        ).open()
        if spec.get("mode", "ir") == "ir":
            self.executor.link_ir()  # link once, before the first experiment
        self.builder = self.executor.builder

    def info(self) -> dict[str, Any]:
        ex = self.executor
        return {
            "device": ex.device_label,
            "arch": ex.arch,
            "backend": ex.backend.name,
            "default_config": ex.default_config().to_dict(),
            "kernel": ex.rec.kernel_name,
        }

    def serve(self, message: dict[str, Any], config: ExperimentConfiguration, conn) -> dict[str, Any]:
        before_run = None
        if message.get("exclusive"):  # another worker shares the device: ask the pool for it, wait for "go"

            def before_run() -> None:
                conn.send({"exp_id": message.get("exp_id"), "payload": "acquire"})
                answer = conn.recv()
                if answer.get("payload") != "go":
                    raise ExperimentError(f"worker expected 'go' from the pool, got {answer!r}")

        result = self.executor.execute(config, binary=message.get("binary"), before_run=before_run)
        return {"payload": "result", "data": result.to_dict()}

    def close(self) -> None:
        self.executor.close()


class _CompileServer:
    def __init__(self, spec: dict[str, Any]):
        self.rec = load_recording(spec["record_db"])
        instance = self.rec.select(spec.get("record_id"))
        backend = spec.get("backend")
        self.backend = backend_mod.get_backend(backend) if backend else resolve_backend(self.rec)
        args = Snapshot.open(instance.prologue_path).args
        self.builder = KernelBuilder(self.rec, args, self.backend, spec["arch"], spec.get("mode", "ir"))
        self.builder.link_ir()

    def info(self) -> dict[str, Any]:
        return {"arch": self.builder.arch, "backend": self.backend.name, "kernel": self.rec.kernel_name}

    def serve(self, message: dict[str, Any], config: ExperimentConfiguration, conn) -> dict[str, Any]:
        result = ExperimentResult(start_time=utc_now(), backend=self.backend.name)
        try:
            binary = self.builder.build(config)
        except MnemeError as exc:
            fail_result(result, "compile", self.builder.build_failure(exc))
            result.end_time = utc_now()
            return {"payload": "binary", "data": None, "result": result.to_dict()}
        return {"payload": "binary", "data": binary, "result": None}

    def close(self) -> None:
        pass
