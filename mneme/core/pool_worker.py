"""One worker process of the pool (`mneme.core.workers.AsyncReplayExecutor`) and the thread that feeds it.

`TuneWorkerHandle` spawns the process, sends it one job at a time, waits for its reply
within the job's timeout (holding its device's lock where workers share a device), and
respawns it after a crash or a hang; the pool decides what each reply means.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mneme.core import kernel_clock, limits
from mneme.core.executor import utc_now
from mneme.core.types import ExperimentConfiguration
from mneme.core.worker_process import WorkerProcess

if TYPE_CHECKING:  # annotations only: the pool imports this module
    from mneme.core.workers import AsyncReplayExecutor

log = logging.getLogger(__name__)

_POLL = 0.05


def pop(q: queue.Queue, timeout: float | None = None):
    """Get from a thread or process queue; None on timeout."""
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        return None


def describe_exit(exitcode: int | None) -> str:
    """'exit code 3' or 'signal SIGKILL' for a process's exit code."""
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


@attrs.frozen
class DeviceUse:
    """One stretch of time a device worker had its device: from the start of its experiment's work there
    (or from being granted the device, where several workers share it) to its reply; `time.monotonic()`."""

    device_id: int
    worker: str
    exp_id: int
    start: float
    end: float


@attrs.define(eq=False)
class Job:
    exp_id: int
    config: ExperimentConfiguration
    future: concurrent.futures.Future
    binary: Any = None
    compile_result: dict | None = None
    submitted: float = attrs.Factory(time.monotonic)
    started: bool = False  # reported to the event hooks (once a worker took it)
    ir: Any = None  # the IROverride to build from (mneme.core.ir_override); None: the recording's IR


class TuneWorkerHandle:
    """One worker process and the thread that feeds it: at most one job in flight.

    `role` is "device" (runs experiments on `device_id`) or "compile" (builds binaries).
    The thread respawns the process after a crash or a timeout; it gives up after
    `max_startup_failures` consecutive failed startups.
    """

    def __init__(self, pool: AsyncReplayExecutor, role: str, index: int, device_id: int, inbox: queue.Queue):
        self.pool = pool
        self.role = role
        self.index = index
        self.device_id = device_id
        self.inbox = inbox
        self.name = f"{role}{device_id if role == 'device' else ''}-{index}"
        self.log_path = pool.log_dir / f"worker-{self.name}.log"
        self.process = None
        self.conn = None
        self.info: dict[str, Any] = {}
        self.ready = threading.Event()
        self.dead = False  # gave up: too many startup failures
        self.last_error = ""
        self.spawns = 0
        self.jobs_done = 0  # replies received (results or binaries)
        self.current: Job | None = None
        self._holding = False  # holds the pool's lock of its device
        self._use_start: float | None = None  # since when this worker may be using its device
        self._fatal = False  # the last startup failed with an error that a retry would repeat
        self._invalid_input = False  # ... and that error is the input's (a malformed recording or IR): exit 2
        self._ir_sent = ""  # SHA-256 of the replacement IR the process builds from ("": the recording's)
        self._thread = threading.Thread(target=self._run, name=f"mneme-{self.name}", daemon=True)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- process lifetime ---------------------------------------------------------------------
    def _spawn(self) -> bool:
        """Start the process and wait for its ready message; False (with last_error) on failure."""
        self.last_error = ""
        self._fatal = False
        self._invalid_input = False
        self._ir_sent = ""  # a fresh process builds from the recording's IR
        spec = dict(
            self.pool._spec, role=self.role, device_id=self.device_id, name=self.name, parent_pid=os.getpid()
        )  # the worker ends with this process (worker_servers.die_with_parent)
        if self.role == "compile":
            spec["arch"] = self.pool.arch
        self.spawns += 1
        try:
            # A terminal's Ctrl-C signals the whole process group: the pool, not each worker, decides what
            # stops (no worker traceback), so a worker starts with SIGINT ignored from its first instruction.
            launcher = _launcher()
            self.process = WorkerProcess(spec, str(self.log_path), str(launcher) if launcher else None)
            self.conn = self.process.start()
        except Exception as exc:  # no interpreter, no process slot; counted as a startup failure
            self.process = None
            self.last_error = f"worker {self.name} could not be started: {exc}"
            return False
        deadline = time.monotonic() + self.pool.startup_timeout
        while time.monotonic() < deadline and not self.pool._stopping.is_set():
            if self.conn.poll(_POLL):
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    break
                if message.get("payload") == "ready":
                    self.info = message
                    log.info("worker %s ready (pid %d)", self.name, self.process.pid)
                    return True
                self.last_error = message.get("error", repr(message))
                self._fatal = bool(message.get("fatal"))
                self._invalid_input = bool(message.get("invalid_input"))
                break
            if not self.process.is_alive():
                break
        else:
            if not self.pool._stopping.is_set():
                self.last_error = (
                    f"worker {self.name} was not ready within {self.pool.startup_timeout:.0f} s; see {self.log_path}"
                )
        self._kill()
        if not self.last_error:
            code = describe_exit(self.process.exitcode)
            self.last_error = f"worker {self.name} died during startup ({code}); see {self.log_path}"
        return False

    def _kill(self) -> None:
        if self.process is None:
            return
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _start_process(self) -> bool:
        failures = 0
        while not self.pool._stopping.is_set():
            if self._spawn():
                self.ready.set()
                return True
            if self.pool._stopping.is_set():  # stopped while it started (a short run): not a failure
                break
            failures += 1
            log.warning(
                "worker %s failed to start (%d/%d): %s",
                self.name,
                failures,
                self.pool.max_startup_failures,
                self.last_error,
            )
            if failures >= self.pool.max_startup_failures or self._fatal:
                self.dead = True
                self.ready.set()
                self.pool._worker_gave_up(self)
                return False
            time.sleep(min(0.2 * failures, 1.0))
        return False

    # -- the feeding loop ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a bug here must not leave futures waiting forever
            log.exception("worker handle %s failed", self.name)
            self.last_error = f"worker handle {self.name} failed: {exc!r}"
            job = self.current
            if job is not None:
                self.pool._stage_failed(self, job, "error", self.last_error, utc_now())
            self._kill()
            self.dead = True
            self.ready.set()
            self.pool._worker_gave_up(self)

    def _serve(self) -> None:
        if not self._start_process():
            return
        while not self.pool._stopping.is_set():
            job = pop(self.inbox, _POLL * 4)
            if job is None:
                continue
            if job.future.done():  # cancelled meanwhile
                continue
            self.current = job
            outcome = self._process(job)
            self.current = None
            if outcome == "respawn" and not self._start_process():
                return
        self._terminate()

    def _process(self, job: Job) -> str:
        if not job.started:
            job.started = True
            self.pool._report("mneme_experiment_started", config=job.config)
        message = {
            "payload": "compile" if self.role == "compile" else "process",
            "exp_id": job.exp_id,
            "data": job.config.to_dict(),
        }
        if self.role == "device" and job.binary is not None:
            message["binary"] = job.binary
        wanted = job.ir.sha256 if job.ir is not None else ""
        if wanted != self._ir_sent:  # the IR changed (set_ir): sent once, the process keeps it
            message["ir"] = job.ir
            self._ir_sent = wanted
        lock = self.pool._device_locks.get(self.device_id) if self.role == "device" else None
        if lock is not None:
            message["exclusive"] = True
        try:
            return self._exchange(job, message, lock)
        finally:
            if self._use_start is not None:  # recorded before the lock goes to the next worker
                self.pool.device_uses.append(
                    DeviceUse(self.device_id, self.name, job.exp_id, self._use_start, time.monotonic())
                )
                self._use_start = None
            if self._holding:
                self._holding = False
                lock.release()

    def _exchange(self, job: Job, message: dict, lock: threading.Lock | None) -> str:
        started = time.monotonic()
        start_stamp = utc_now()
        if self.role == "device" and lock is None:
            self._use_start = started  # the device is this worker's alone: in use from the first message
        try:
            self.conn.send(message)
        except (OSError, EOFError, BrokenPipeError):
            pass  # the death is noticed below
        timeout = self.pool._timeout_for(job, self.role)
        # an open kernel or compile window (kernel_clock): since when, for how long, under which limit
        kernel_since, kernel_budget, window_limit = 0.0, 0.0, "timeout_seconds"
        while True:
            if self.conn.poll(_POLL):
                try:
                    reply = self.conn.recv()
                except (EOFError, OSError):
                    reply = None
                if reply is not None and reply.get("payload") == "kernel":
                    kernel_since, kernel_budget = time.monotonic(), float(reply.get("budget") or 0.0)
                    window_limit = reply.get("limit") or "timeout_seconds"
                    continue
                if reply is not None and reply.get("payload") == "acquire":
                    # The variant is built; wait for the device (no other timing run on it), then go.
                    while not lock.acquire(timeout=_POLL):
                        if not self.process.is_alive() or self.pool._stopping.is_set():
                            break
                    else:
                        self._holding = True
                        started = time.monotonic()  # waiting for the device is not the experiment's time
                        self._use_start = started
                        try:
                            self.conn.send({"payload": "go"})
                        except (OSError, EOFError, BrokenPipeError):
                            pass
                    continue
                if reply is not None:
                    self.jobs_done += 1
                    self.pool._stage_done(self, job, reply)
                    if self.role == "device" and (reply.get("data") or {}).get("error_kind") == "fault":
                        # A device fault can leave the context unusable (sticky device errors): start afresh.
                        self._terminate()
                        return "respawn"
                    return "ok"
            if not self.process.is_alive():
                self.process.join(1)
                what = describe_exit(self.process.exitcode)
                error = (
                    f"worker {self.name} (pid {self.process.pid}) on {self._where()} died with {what} "
                    f"during the experiment; see {self.log_path}"
                )
                self.pool._stage_failed(self, job, "crash", error, start_stamp)
                self._kill()
                return "respawn"
            if self.pool._stopping.is_set():
                self.pool._stage_failed(self, job, "error", "the worker pool was shut down", start_stamp)
                return "stop"
            if kernel_budget and time.monotonic() - kernel_since > kernel_clock.deadline_after(kernel_budget):
                pid = self.process.pid
                self._kill()
                if window_limit == kernel_clock.COMPILE_LIMIT:  # a failed trial, for that reason
                    error = kernel_clock.compile_limit_message(
                        kernel_budget,
                        f"worker {self.name} (pid {pid}) on {self._where()} (replaced; see {self.log_path})",
                    )
                    self.pool._stage_failed(self, job, "compile", error, start_stamp)
                    return "respawn"
                error = (
                    f"kernel {self.info.get('kernel', '')!r} timed out: it ran past its time limit "
                    f"({kernel_budget:g} s for the runs in flight; {limits.variable('timeout_seconds')}) on "
                    f"{self._where()}; worker {self.name} (pid {pid}) was killed and replaced; see "
                    f"{self.log_path}"
                )
                self.pool._stage_failed(self, job, "timeout", error, start_stamp)
                return "respawn"
            if timeout is not None and time.monotonic() - started > timeout:
                pid = self.process.pid
                self._kill()
                error = (
                    f"experiment exceeded its timeout of {timeout:.1f} s on {self._where()}; worker "
                    f"{self.name} (pid {pid}) was killed and replaced; see {self.log_path}"
                )
                self.pool._stage_failed(self, job, "timeout", error, start_stamp)
                return "respawn"

    def _where(self) -> str:
        if self.role == "compile":
            return "the compile pool"
        return self.info.get("device") or f"device {self.device_id}"

    def _terminate(self) -> None:
        if self.process is None:
            return
        try:
            if self.conn is not None and self.process.is_alive():
                self.conn.send({"payload": "terminate"})
                self.process.join(5)
        except (OSError, EOFError, BrokenPipeError):
            pass
        self._kill()


def _launcher() -> Path | None:
    """A `/bin/sh` script (in the cache, one per interpreter) that ignores SIGINT and execs this Python.

    An ignored signal stays ignored across exec, and Python leaves an ignored SIGINT alone, so a
    Ctrl-C during a worker's start-up never reaches it, while this process keeps its own handler.
    """
    import shlex
    import sys

    from mneme.core.native import cache_dir

    if not os.path.exists("/bin/sh") or not sys.executable:
        return None
    text = f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(sys.executable)} \"$@\"\n"
    path = cache_dir("launchers") / f"python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
        except OSError:
            return None
    return path
