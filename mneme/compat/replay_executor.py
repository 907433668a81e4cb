"""`mneme.replay_executor` of the original Mneme API: one experiment at a time in this process.

A thin adapter over `mneme.core.executor.BaseExecutor`: the original's constructor,
attributes (`records`, `kernel_descr`, `device_arch`, `num_devices`), `_execute(result,
config, ir_module)` and results (the original's `ExperimentResult`, `exec_time` in integer
ns with the two warm-up runs); and `TuneWorker`, the original's worker-process executor.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mneme.compat.errors import runtime_errors
from mneme.compat.profile import init_profiler
from mneme.compat.recorded_execution import RecordedExecution, load_core, mneme_database
from mneme.compat.types import ExperimentConfiguration, ExperimentResult

_log = logging.getLogger(__name__)

#: Untimed-for-the-user runs the original adds before the measured ones (iterations + 2 entries).
WARMUP_RUNS = 2


def _core_config(config):
    return config.to_core() if isinstance(config, ExperimentConfiguration) else config


def infer_record_id(records: RecordedExecution, record_db: str, record_id: str | None) -> str:
    """`record_id`, checked; when None, the database's one instance (the original infers it so)."""
    if record_id is None:
        ids = list(records)
        if len(ids) != 1:
            raise RuntimeError(
                f"{record_db} has {len(ids)} kernel instances ({', '.join(ids) or 'none'}); "
                "give record_id to choose one"
            )
        return ids[0]
    if record_id not in records:
        raise RuntimeError(f"{record_db} has no kernel instance {record_id!r}; its ids: {', '.join(records)}")
    return record_id


def ir_override(ir: str | os.PathLike | bytes):
    """The original's IR argument as an `IROverride`: a `Path`, or a string ending in ``.ll``/``.bc``, is a
    file (read now, within the ``ir_bytes`` limit); any other string is IR text; bytes are IR text or bitcode.

    A file that cannot be read raises a `UsageError` (a `RuntimeError` too) naming it.
    """
    from mneme.core.ir_override import IROverride

    if isinstance(ir, IROverride):
        return ir
    if isinstance(ir, str) and ir.endswith((".ll", ".bc")):
        ir = Path(ir)
    with runtime_errors():
        return IROverride.of(ir)


class BaseExecutor:
    """Replays one recorded instance on one device: `open()`/`close()` or a `with` block."""

    def __init__(
        self,
        record_db: str,
        record_id: str | None = None,
        iterations: int = 3,
        device_id: int = 0,
        warmup: int = WARMUP_RUNS,
    ):
        from mneme.core.executor import resolve_backend

        self.records = RecordedExecution.from_json(record_db)
        self.record_db = record_db
        self.record_id = infer_record_id(self.records, record_db, record_id)
        record_id = self.record_id
        self.device_id = device_id
        self._iterations = self.iterations = iterations
        self.warmup = warmup
        self.kernel_descr = self.records[record_id]
        with runtime_errors():
            self._core_rec = load_core(record_db)
            backend = resolve_backend(self._core_rec)
            self.device_arch = backend.arch(device_id)
            self.num_devices = backend.device_count()
        self._executor = None

    def open(self) -> BaseExecutor:
        """Reserve the recorded address range and restore the prologue on the device."""
        from mneme.core.executor import BaseExecutor as Core

        if self._executor is None:
            with runtime_errors():
                self._executor = Core(
                    str(mneme_database(self.record_db)),
                    self.record_id,
                    self._iterations,
                    self.device_id,
                    warmup=self.warmup,
                ).open()
            self.kernel_descr.prologue.open().bind(self._executor.device)
            self.kernel_descr.epilogue.open().bind(self._executor.device)
        return self

    @property
    def prologue(self):
        """The opened prologue state; None until `open()`."""
        return self.kernel_descr.prologue if self._executor is not None else None

    @property
    def epilogue(self):
        """The opened epilogue state; None until `open()`."""
        return self.kernel_descr.epilogue if self._executor is not None else None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        self.kernel_descr.prologue.close()
        self.kernel_descr.epilogue.close()

    def __enter__(self) -> BaseExecutor:
        return self.open()

    def __exit__(self, *exc_info: object) -> bool:
        self.close()
        return False

    def link_ir(self):
        """The linked root module (no `open()` needed); clone it before mutating."""
        return self.records.link_llvm_modules()

    def set_new_ir(self, ir_path_or_asm):
        """A replacement for `link_ir()`'s module: parsed from a ``.ll``/``.bc`` file (a path ending so) or IR
        text, internalized and pruned for the kernel, as the original. Pass it to `_execute`.

        IR that cannot be read, parsed or verified, lacks the kernel or changes its parameters raises a
        `RuntimeError` naming it (the original's worker process died on it).
        """
        from mneme.core.ir_override import link_override
        from mneme.llvm.module import adopt_module

        override = ir_override(ir_path_or_asm)
        with runtime_errors():
            recorded = self._core_rec.link_llvm_modules() if self._core_rec.llvm_files else None
            return adopt_module(link_override(override, self.kernel_descr.kernel_name, True, True, recorded=recorded))

    def execute(self, config: ExperimentConfiguration) -> ExperimentResult:
        """Build, run, verify and time one configuration from the recording's IR (`open()` first).

        A configuration the core cannot build (`to_core()` refuses it) gives a failed result.
        """
        self._check_open()
        try:
            core_config = _core_config(config)
        except (ValueError, TypeError) as exc:
            return ExperimentResult(error=f"invalid configuration: {exc}", failed=True, executed=False)
        with runtime_errors():
            return ExperimentResult.from_core(self._executor.execute(core_config))

    def _check_open(self) -> None:
        if self._executor is None:
            raise RuntimeError("the executor is not open; use it in a `with` block or call open()")

    def _execute(self, result: ExperimentResult, config: ExperimentConfiguration, ir_module):
        """The original's experiment on `ir_module` (left unchanged): fills `result` in place.

        As the original: a build of a clone runs once, untimed, and sets `verified` against
        the epilogue; then the module with the compiler's auto-initialization removed is built
        and run `iterations + 2` times, timed. Returns that cleaned module.
        """
        from mneme.compat import jit
        from mneme.core.ir import clone as ir_clone
        from mneme.llvm.module import adopt_module

        self._check_open()
        core, config = self._executor, _core_config(config)
        with runtime_errors():
            check = self._run_built(ir_module, config, timed_runs=0)
            cleaned = adopt_module(ir_clone(ir_module))
            jit.remove_auto_init(cleaned, "", core.rec.kernel_name)
            outcome = ExperimentResult.from_core(self._run_built(cleaned, config, timed_runs=core.iterations))
        for field in dataclasses.fields(ExperimentResult):
            setattr(result, field.name, getattr(outcome, field.name))
        result.verified = check.verified and not check.failed
        result.mneme = outcome.mneme
        return cleaned

    def _run_built(self, module, config, timed_runs: int):
        """The core's experiment on a build of `module` (a clone), with `timed_runs` timed runs after the warm-ups."""
        from mneme.core import build, ir
        from mneme.core.kernel_builder import backend_target

        core = self._executor
        work = ir.clone(module)
        try:
            binary = build.compile(
                work,
                core.rec.kernel_name,
                config,
                core.arch,
                core.args,
                core.rec.args,
                backend=core.backend,
                target=backend_target(core.backend),
                base_hash=ir.module_hash(work),
                cache=False,
            )
        finally:
            work.close()
        saved = core.iterations, core.warmup
        core.iterations, core.warmup = (timed_runs, self.warmup) if timed_runs else (0, 0)
        try:
            return core.execute(config, binary=binary)
        finally:
            core.iterations, core.warmup = saved


class TuneWorker(BaseExecutor):
    """A `BaseExecutor` that serves experiments from a queue inside a worker process (`TuneWorker.run`)."""

    def __init__(self, *args, **kwargs):
        init_profiler()
        super().__init__(*args, **kwargs)

    def process_payload(self, ir_module, config: ExperimentConfiguration) -> tuple[ExperimentResult, Any]:
        """One experiment: `(result, transformed IR)`, the result stamped with UTC ISO 8601 times and the GPU id."""
        result = ExperimentResult()
        start = datetime.now(timezone.utc).isoformat()
        generated = self._execute(result, config, ir_module)
        result.start_time = start
        result.end_time = datetime.now(timezone.utc).isoformat()
        result.gpu_id = self.device_id
        return result, generated

    @staticmethod
    def run(
        request_q,
        response_q,
        record_db: str,
        record_id: str,
        device_id: int,
        iterations: int,
        results_db_dir: str,
        state,
    ) -> None:
        """Worker process entry point: log to `{results_db_dir}/Worker-{device_id}.log`, signal `state`, serve.

        Requests: `{"payload": "process", "exp_id": id, "data": config dict}`, answered on
        `response_q` with `{"exp_id": id, "payload": "result", "data": result dict, "llvm_ir": ""}`;
        `{"payload": "set_ir", "data": path or IR text}` replaces the IR of the experiments after it (IR
        that does not load fails each of them, naming why, until the next set_ir); `{"payload":
        "terminate"}` ends the loop. An exception ends the worker (the pool sees a crash).
        """
        log = os.open(os.path.join(results_db_dir, f"Worker-{device_id}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(log, 1)
        os.dup2(log, 2)
        worker = TuneWorker(record_db=record_db, record_id=record_id, device_id=device_id, iterations=iterations)
        root_ir = worker.link_ir()
        ir_error = ""
        with worker:
            state.set()
            while True:
                msg = request_q.get()
                if msg.get("payload") == "terminate":
                    break
                if msg.get("payload") == "set_ir":
                    try:
                        root_ir, ir_error = worker.set_new_ir(msg.get("data")), ""
                    except RuntimeError as exc:  # the original's worker died here; its experiments fail instead
                        ir_error = f"set_ir: {exc}"
                    continue
                if msg.get("payload") != "process":
                    _log.warning("worker %d: unknown message %r", device_id, msg)
                    continue
                if ir_error:
                    failed = ExperimentResult(error=ir_error, failed=True, executed=False, gpu_id=device_id)
                    response_q.put(
                        {"exp_id": msg["exp_id"], "payload": "result", "data": failed.to_dict(), "llvm_ir": ""}
                    )
                    continue
                result, _ir = worker.process_payload(root_ir.clone(), ExperimentConfiguration.from_dict(msg["data"]))
                response_q.put({"exp_id": msg["exp_id"], "payload": "result", "data": result.to_dict(), "llvm_ir": ""})
