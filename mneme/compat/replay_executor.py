"""`mneme.replay_executor` of the original Mneme API: one experiment at a time in this process.

A thin adapter over `mneme.core.executor.BaseExecutor`: the original's constructor,
attributes (`records`, `kernel_descr`, `device_arch`, `num_devices`) and results (the
original's `ExperimentResult`, `exec_time` in integer ns with the two warm-up runs).
"""

from __future__ import annotations

from mneme.compat.errors import runtime_errors
from mneme.compat.recorded_execution import RecordedExecution, load_core, mneme_database
from mneme.compat.types import ExperimentConfiguration, ExperimentResult

#: Untimed-for-the-user runs the original adds before the measured ones (iterations + 2 entries).
WARMUP_RUNS = 2


def _core_config(config):
    return config.to_core() if isinstance(config, ExperimentConfiguration) else config


class BaseExecutor:
    """Replays one recorded instance on one device: `open()`/`close()` or a `with` block."""

    def __init__(self, record_db: str, record_id: str, iterations: int = 3, device_id: int = 0):
        from mneme.core.executor import resolve_backend

        self.record_db = record_db
        self.record_id = record_id
        self.device_id = device_id
        self._iterations = iterations
        self.records = RecordedExecution.from_json(record_db)
        if record_id not in self.records:
            raise RuntimeError(f"{record_db} has no kernel instance {record_id!r}; its ids: {', '.join(self.records)}")
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
                self._executor = Core(str(mneme_database(self.record_db)), self.record_id, self._iterations,
                                      self.device_id, warmup=WARMUP_RUNS).open()  # fmt: skip
            self.kernel_descr.prologue.open().bind(self._executor.device)
            self.kernel_descr.epilogue.open().bind(self._executor.device)
        return self

    @property
    def prologue(self):
        return self.kernel_descr.prologue

    @property
    def epilogue(self):
        return self.kernel_descr.epilogue

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

    def execute(self, config: ExperimentConfiguration) -> ExperimentResult:
        """Build, run, verify and time one configuration (`open()` first)."""
        if self._executor is None:
            raise RuntimeError("the executor is not open; use it in a `with` block or call open()")
        with runtime_errors():
            return ExperimentResult.from_core(self._executor.execute(_core_config(config)))

    _execute = execute  # the original's name
