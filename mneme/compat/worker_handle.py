"""The original Mneme API's `TuneWorkerHandle`: one `TuneWorker.run` process fed from a queue of futures.

A monitor thread takes `EvalFuture`s from the shared `global_q`, sends each to its worker
process in the original's message protocol (one job in flight), and resolves the future
with the worker's `ExperimentResult`. A worker that dies fails its in-flight future with
the exit code and device and is started again; one that dies before it is ready
`MAX_STARTUP_CRASHES` times in a row fails the futures it would serve instead.
(`AsyncReplayExecutor` uses Mneme's own pool; this handle is for scripts that build their own.)
"""

from __future__ import annotations

import enum
import logging
import multiprocessing
import queue
import threading

from mneme.compat.replay_executor import TuneWorker
from mneme.compat.spawn import main_hidden
from mneme.compat.types import ExperimentResult
from mneme.core.workers import describe_exit, pop

log = logging.getLogger(__name__)

#: Consecutive deaths before readiness after which the handle stops restarting its worker.
MAX_STARTUP_CRASHES = 3


class TuneWorkerHandle:
    """One worker process (`TuneWorker.run`) on `device_id` and the thread that feeds it from `global_q`."""

    class StateMachine(enum.IntEnum):
        SUBMIT = 1
        RECEIVE = 2

    def __init__(
        self,
        idx: int,
        global_q: queue.Queue,
        record_db: str,
        record_id: str,
        device_id: int,
        iterations: int,
        results_db_dir: str,
    ):
        self.idx = idx
        self.global_q = global_q
        self.record_db = record_db
        self.record_id = record_id
        self.device_id = device_id
        self.iterations = iterations
        self.results_db_dir = results_db_dir
        self.current = None
        self._ctx = multiprocessing.get_context("spawn")  # safe with threads and GPU runtimes
        self._shutdown = threading.Event()
        self._startup_crashes = 0
        self._spawn_process()
        self._monitor_thread = threading.Thread(target=self._monitor, name=f"TuneWorkerHandle-{idx}", daemon=True)
        self._monitor_thread.start()

    def _spawn_process(self) -> None:
        self._state = self._ctx.Event()
        self._requests, self._responses = self._ctx.Queue(), self._ctx.Queue()
        self._process = self._ctx.Process(
            target=TuneWorker.run,
            daemon=False,
            args=(
                self._requests,
                self._responses,
                self.record_db,
                self.record_id,
                self.device_id,
                self.iterations,
                self.results_db_dir,
                self._state,
            ),
        )
        with main_hidden():
            self._process.start()
        self._action = self.StateMachine.SUBMIT
        self._ir_revision = 0  # a new process replays the recording's IR

    def _monitor(self) -> None:
        try:
            while not self._shutdown.is_set():
                if not self._process.is_alive():
                    self._recover()
                elif self._action == self.StateMachine.SUBMIT:
                    self._submit()
                else:
                    self._receive()
        finally:
            self._stop_process()

    def _submit(self) -> None:
        future = pop(self.global_q, timeout=0.2)
        if future is None:
            return
        if not future.set_running_or_notify_cancel():
            return
        self.current = future
        if future.ir_revision != self._ir_revision:  # the executor's set_ir: the worker swaps its IR first
            self._requests.put({"payload": "set_ir", "data": future.ir_data})
            self._ir_revision = future.ir_revision
        self._requests.put({"payload": "process", "exp_id": future.job_id, "data": future.params})
        self._action = self.StateMachine.RECEIVE

    def _receive(self) -> None:
        msg = pop(self._responses, timeout=0.2)
        if msg is None:
            return
        self._startup_crashes = 0
        if self.current is not None:
            if msg.get("exp_id") != self.current.job_id:
                self.current.set_error(f"worker {self.idx} answered job {msg.get('exp_id')}, not {self.current.job_id}")
            else:
                self.current.set_result(ExperimentResult.from_dict(msg["data"]))
            self.current = None
        self._action = self.StateMachine.SUBMIT

    def _recover(self) -> None:
        why = describe_exit(self._process.exitcode)
        ready = self._state.is_set()
        self._startup_crashes = 0 if ready else self._startup_crashes + 1
        message = (
            f"worker {self.idx} on device {self.device_id} died ({why}); "
            f"its log: {self.results_db_dir}/Worker-{self.device_id}.log"
        )
        log.warning("%s; restarting it", message)
        if self.current is not None:
            self.current.set_error(message)
            self.current = None
        if self._startup_crashes >= MAX_STARTUP_CRASHES:
            while (future := pop(self.global_q, timeout=0.2)) is not None or not self._shutdown.is_set():
                if future is not None and future.set_running_or_notify_cancel():
                    future.set_error(f"{message}; it failed to start {MAX_STARTUP_CRASHES} times in a row")
            return
        self._spawn_process()

    def _stop_process(self) -> None:
        if self._process.is_alive():
            self._requests.put({"payload": "terminate"})
            self._process.join(60)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        if self.current is not None and not self.current.done():
            self.current.set_error(f"worker {self.idx} was shut down before job {self.current.job_id} finished")

    def join(self) -> None:
        """Stop the monitor thread, which terminates the worker process, and wait for both."""
        self._shutdown.set()
        self._monitor_thread.join()
