"""Isolated worker processes that run experiments: futures, crash and hang recovery, compile-ahead.

`AsyncReplayExecutor` keeps one or more warm worker processes per device (the recording
opened and the IR linked once per process) and, optionally, a pool of CPU compile
processes that build binaries while the device workers execute. `submit(config)` returns a
`concurrent.futures.Future` that resolves to an `ExperimentResult`: an experiment that
crashes its worker (a fault, a signal, os.kill) or hangs (past its timeout) resolves to a
failed result with `error_kind` "crash" or "timeout", and the worker is replaced. The
future raises only when the pool itself cannot go on (workers that keep dying at startup,
or a shutdown).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import itertools
import logging
import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mneme.core import events
from mneme.core.backend import check_cache_state
from mneme.core.errors import ExperimentError, UsageError
from mneme.core.executor import utc_now
from mneme.core.ir_override import IROverride
from mneme.core.pool_worker import DeviceUse, Job, TuneWorkerHandle, describe_exit, pop
from mneme.core.types import ExperimentConfiguration, ExperimentResult

log = logging.getLogger(__name__)

DEVICE_USES_KEPT = 100_000


class AsyncReplayExecutor:
    """A pool of warm worker processes running experiments of one recorded kernel instance.

    Parameters
    ----------
    record_db, record_id, iterations, mode, warmup, cache, timer : as for `BaseExecutor`
    results_db_dir : folder for the per-worker log files (``logs/``); a temporary one when None
    num_workers : device workers in all; default one per device in `devices`
    backend : backend name; default: the recorded one (host when that is not usable)
    devices : device indices to use; default [0]
    compile_workers : CPU processes that build binaries ahead of the device workers; 0 builds in the
        device worker; None picks 0 on the host backend (the CPU is the device) and up to 4 otherwise
    timeout : seconds an experiment may take on a device before its worker is killed; None derives
        it from the baseline (the recorded configuration's first result): `min_timeout` +
        `timeout_factor` x (its build time + its run time)
    """

    def __init__(
        self,
        record_db,
        record_id: str | None = None,
        iterations: int = 3,
        results_db_dir: str | os.PathLike | None = None,
        num_workers: int | None = None,
        backend: str | None = None,
        devices: list[int] | None = None,
        *,
        mode: str = "ir",
        warmup: int = 1,
        cache: str = "flushed",
        timer: str = "auto",
        compile_workers: int | None = None,
        timeout: float | None = None,
        timeout_factor: float = 10.0,
        min_timeout: float = 10.0,
        initial_timeout: float = 600.0,
        compile_timeout: float = 600.0,
        startup_timeout: float = 300.0,
        max_startup_failures: int = 3,
        start: bool = True,
    ):
        if iterations < 1:
            raise UsageError(f"iterations must be >= 1, got {iterations}")
        check_cache_state(cache)  # here, not in each worker's first experiment
        self.devices = list(devices) if devices else [0]
        if num_workers is None:
            num_workers = len(self.devices)
        if num_workers < 1:
            raise UsageError(f"num_workers must be >= 1, got {num_workers}")
        self.record_db = str(getattr(record_db, "path", None) or record_db)  # a RecordedExecution or a path
        self.iterations = iterations
        self.timeout = timeout
        self.timeout_factor = timeout_factor
        self.min_timeout = min_timeout
        self.initial_timeout = initial_timeout
        self.compile_timeout = compile_timeout
        self.startup_timeout = startup_timeout
        self.max_startup_failures = max_startup_failures
        if results_db_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="mneme-workers-"))
        else:
            self.log_dir = Path(results_db_dir) / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._spec = {
            "record_db": self.record_db,
            "record_id": record_id,
            "iterations": iterations,
            "backend": backend,
            "mode": mode,
            "warmup": warmup,
            "cache": cache,
            "timer": timer,
        }
        self._requested_compile_workers = compile_workers
        self._mode = mode
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._device_queue: queue.Queue = queue.Queue()
        self._compile_queue: queue.Queue = queue.Queue()
        #: Asked, for each binary built ahead, whether its code (SHA-256) was measured already with this
        #: configuration's launch; a result it returns finishes the job without a device run (a tuning
        #: session answers equivalent configurations this way: docs/design/tuning.md "Budget").
        self.known_code: Callable[[ExperimentConfiguration, str], ExperimentResult | None] | None = None
        self._pending: dict[int, Job] = {}
        self.baseline: ExperimentResult | None = None
        self.default_config: ExperimentConfiguration | None = None
        self.arch = ""
        self.backend_name = backend or ""
        self.broken = ""
        self.device_workers = [
            TuneWorkerHandle(self, "device", i, self.devices[i % len(self.devices)], self._device_queue)
            for i in range(num_workers)
        ]
        self.compile_workers: list[TuneWorkerHandle] = []
        # Devices shared by several workers: one experiment at a time runs on each (timings stay clean).
        per_device = {d: sum(1 for w in self.device_workers if w.device_id == d) for d in self.devices}
        self._device_locks = {d: threading.Lock() for d, count in per_device.items() if count > 1}
        # Device workers' time on their devices, the latest ones, for tools and tests.
        self.device_uses: collections.deque[DeviceUse] = collections.deque(maxlen=DEVICE_USES_KEPT)
        self._subject: tuple[Any, Any] | None = None  # (recording, instance) of the event hooks, read on first use
        self.ir: IROverride | None = None  # replacement IR of the experiments submitted from now on
        self._started = False
        if start:
            self.start()

    # -- lifetime ---------------------------------------------------------------------------------
    def __enter__(self) -> AsyncReplayExecutor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the workers and wait until each is warm (or has given up, which raises)."""
        if self._started:
            return
        self._started = True
        for worker in self.device_workers:
            worker.start()
        for worker in self.device_workers:
            worker.ready.wait()
        alive = [w for w in self.device_workers if not w.dead]
        if not alive:
            errors = "; ".join(sorted({w.last_error for w in self.device_workers}))
            self.shutdown()
            message = f"no worker could start for {self.record_db}: {errors}"
            if all(w._invalid_input for w in self.device_workers):  # the recording itself is bad: exit 2
                raise UsageError(message)
            raise ExperimentError(message, kind="crash")
        lost = [d for d in self.devices if all(w.dead for w in self.device_workers if w.device_id == d)]
        if lost:  # asked for, but unusable: tuning on fewer devices than asked would mislead
            dead = [w for w in self.device_workers if w.device_id in lost]
            errors = "; ".join(sorted({w.last_error for w in dead}))
            self.shutdown()
            kind = UsageError if all(w._fatal for w in dead) else ExperimentError
            raise kind(
                f"device {', '.join(map(str, lost))} of --devices {','.join(map(str, self.devices))}: "
                f"no worker could start: {errors}"
            )
        info = alive[0].info
        self.arch = info.get("arch", "")
        self.backend_name = info.get("backend", self.backend_name)
        if info.get("default_config"):
            self.default_config = ExperimentConfiguration.from_dict(info["default_config"])
        count = self._requested_compile_workers
        if count is None:
            count = 0 if self.backend_name == "host" else max(1, min(4, (os.cpu_count() or 2) - len(alive)))
        if self._mode != "ir":
            count = 0
        self.compile_workers = [TuneWorkerHandle(self, "compile", i, -1, self._compile_queue) for i in range(count)]
        for worker in self.compile_workers:
            worker.start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop accepting work, cancel what is queued, terminate the workers."""
        self._stopping.set()
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for job in pending:
            job.future.cancel()
        # Wake every idle feeding thread now (each waits on its queue): one None per worker, read as "look again".
        for worker in self.device_workers + self.compile_workers:
            worker.inbox.put(None)
        if wait:
            for worker in self.device_workers + self.compile_workers:
                if worker._thread.is_alive():
                    worker.join(15)
        for worker in self.device_workers + self.compile_workers:
            if not worker._thread.is_alive():
                worker._kill()

    # -- work -----------------------------------------------------------------------------------------
    def submit(self, config: ExperimentConfiguration) -> concurrent.futures.Future:
        """Queue one experiment; the future resolves to its ExperimentResult."""
        if self._stopping.is_set():
            raise ExperimentError("the worker pool is shut down; create a new one", kind="error")
        if not self._started:
            self.start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.broken:
            future.set_exception(ExperimentError(self.broken, kind="crash"))
            return future
        with self._lock:
            job = Job(next(self._ids), config, future, ir=self.ir)
            self._pending[job.exp_id] = job
        # Built ahead only once a compile worker is warm: until then (their start-up follows the device
        # workers' and takes about a second) the device worker builds, rather than idling behind them.
        if any(w.ready.is_set() and not w.dead for w in self.compile_workers):
            self._compile_queue.put(job)
        else:
            self._device_queue.put(job)
        return future

    def set_ir(self, ir: IROverride | bytes | str | os.PathLike | None) -> IROverride | None:
        """Build the experiments submitted from now on from `ir` instead of the recording's IR.

        `ir`: IR text, bitcode bytes, a path to a ``.ll``/``.bc`` file (read here, within the ``ir_bytes``
        limit), or an `IROverride`; None goes back to the recording's IR. Experiments already submitted
        keep the IR they were submitted with. The workers parse it (never this process), so IR that does
        not parse, verify, define the kernel or keep its parameters gives failed results ("compile"),
        each naming it. Returns the override (its `sha256` names the IR).
        """
        override = ir if ir is None or isinstance(ir, IROverride) else IROverride.of(ir)
        if override is not None and self._mode != "ir":
            raise UsageError(f"replacement IR needs mode 'ir'; this pool replays the application's {self._mode}")
        with self._lock:
            self.ir = override
        if override is not None:
            log.info("experiments submitted from now on build from %s (sha256 %s)", override.label, override.sha256)
        return override

    def evaluate(self, config: ExperimentConfiguration) -> ExperimentResult:
        """Submit and wait."""
        return self.submit(config).result()

    def map(self, configs) -> list[ExperimentResult]:
        futures = [self.submit(c) for c in configs]
        return [f.result() for f in futures]

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every worker, compile workers too, is warm or has given up (benchmarks start timing after)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in self.device_workers + self.compile_workers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not worker.ready.wait(left):
                raise ExperimentError(f"worker {worker.name} was not ready within {timeout} s; see {worker.log_path}")

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.device_workers if w.pid is not None]

    def busy_worker(self, timeout: float = 30.0) -> TuneWorkerHandle:
        """The first device worker with a job in flight (waits up to `timeout`); for tests and tools."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for worker in self.device_workers:
                if worker.current is not None:
                    return worker
            time.sleep(0.01)
        raise ExperimentError(f"no worker picked up a job within {timeout} s")

    # -- timeouts --------------------------------------------------------------------------------------
    def _timeout_for(self, job: Job, role: str) -> float | None:
        if role == "compile":
            return self.compile_timeout
        if self.timeout is not None:
            return self.timeout
        baseline = self.baseline
        if baseline is None:
            return self.initial_timeout
        build = baseline.preprocess_ir_time + baseline.opt_time + baseline.codegen_time + baseline.load_time
        runs = sum(baseline.exec_time) + sum(baseline.warmup_time)
        runs = runs * (1 + 1 / max(1, len(baseline.exec_time) + len(baseline.warmup_time)))  # the verify run
        return self.min_timeout + self.timeout_factor * (build + runs)

    # -- callbacks from the handles ---------------------------------------------------------------
    def _stage_done(self, worker: TuneWorkerHandle, job: Job, reply: dict) -> None:
        payload = reply.get("payload")
        if payload == "binary":
            if reply.get("data") is not None:
                job.binary = reply["data"]
                known = self._known_code(job)
                if known is not None:  # the same code was measured with this launch: no device run
                    self._finish(job, known, worker)
                    return
                self._device_queue.put(job)
                return
            self._finish(job, ExperimentResult.from_dict(reply.get("result") or {}), worker)
            return
        result = ExperimentResult.from_dict(reply.get("data") or {})
        if job.binary is not None and result.preprocess_ir_time == 0.0:
            stages = job.binary.stage_times or {}
            result.preprocess_ir_time = float(stages.get("preprocess", 0.0))
        self._finish(job, result, worker)

    def _known_code(self, job: Job) -> ExperimentResult | None:
        """The answer of `known_code` for a job built ahead (its code hashed as the executor hashes it)."""
        if self.known_code is None:
            return None
        code_hash = hashlib.sha256(job.binary.data).hexdigest()
        try:
            return self.known_code(job.config, code_hash)
        except Exception:  # the device run answers instead
            log.exception("the known-code check failed for experiment %d", job.exp_id)
            return None

    def _stage_failed(self, worker: TuneWorkerHandle, job: Job, kind: str, error: str, start_time: str) -> None:
        result = ExperimentResult(
            failed=True,
            error_kind=kind if worker.role == "device" else "compile",
            error=error,
            start_time=start_time,
            end_time=utc_now(),
            gpu_id=worker.device_id,
            device=worker.info.get("device", ""),
            backend=self.backend_name,
        )
        log.warning("%s", error)
        self._finish(job, result, worker)

    def _report(self, event: str, **kwargs: Any) -> None:
        """Emit an experiment event in this process for the workers' experiments (they mute their own)."""
        if not events.listened(event):
            return
        if self._subject is None:
            from mneme.core.records import RecordedExecution

            recording = RecordedExecution.from_json(self.record_db)
            self._subject = (recording, recording.select(self._spec["record_id"]))
        recording, instance = self._subject
        events.emit(event, recording=recording, instance=instance, **kwargs)

    def _finish(self, job: Job, result: ExperimentResult, worker: TuneWorkerHandle) -> None:
        with self._lock:
            self._pending.pop(job.exp_id, None)
        if not job.started:  # answered without a worker (equivalent code, a failed compile stage, a broken pool)
            job.started = True
            self._report("mneme_experiment_started", config=job.config)
        self._report("mneme_experiment_finished", config=job.config, result=result)
        if (
            self.baseline is None
            and result.ok
            and self.default_config is not None
            and job.config.hash() == self.default_config.hash()
        ):
            self.baseline = result
        try:
            job.future.set_result(result)
        except concurrent.futures.InvalidStateError:  # cancelled by a shutdown meanwhile
            pass

    def _worker_gave_up(self, worker: TuneWorkerHandle) -> None:
        if worker.role == "compile":
            # Device workers compile for themselves; route queued jobs to them.
            if all(w.dead for w in self.compile_workers):
                while (job := pop(self._compile_queue, 0)) is not None:
                    self._device_queue.put(job)
            return
        if all(w.dead for w in self.device_workers):
            self.broken = (
                f"every worker of {self.record_db} failed to start {self.max_startup_failures} times; "
                f"last error: {worker.last_error}"
            )
            with self._lock:
                pending = list(self._pending.values())
                self._pending.clear()
            for job in pending:
                try:
                    job.future.set_exception(ExperimentError(self.broken, kind="crash"))
                except concurrent.futures.InvalidStateError:
                    pass


__all__ = ["AsyncReplayExecutor", "DeviceUse", "TuneWorkerHandle", "pop", "describe_exit"]
