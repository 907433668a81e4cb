"""A tuning session: baseline, the search, the final comparison, outputs.

`TuningSession(options).run()` is what `mneme tune` does. Every trial goes to the result
store (a study, `mneme.core.tuning.store`) before and after it runs, so a session stopped at any point resumes
(`resume=True`) without losing a finished experiment or running one twice: trials left
running by a dead process, or cancelled by Ctrl-C, are ``interrupted`` and their points run
again first. Several sessions may share one study (``storage``): each spends the same trial
budget, skips what the others finished, and answers a configuration whose grounded hash was
already evaluated from the store. Each session holds a lease on its running trials
(``heartbeat`` seconds, see `lease`); when a process dies, on this host or another, the
first session to notice fails its trials and runs their configurations again.

Tuners started on one results folder (or one ``--storage sqlite:///`` file) find each other
(`lease.Tuners`): a later one joins the live run's study instead of starting afresh (a folder
with no finished trial is reset only when no tuner is in it), they take turns asking, so
``--trials`` is their exact total, and a dead one's trials, claimed or only asked for, are
failed as ``interrupted`` at once.

The pieces: `options` (what is asked), `loop` (ask -> run -> tell), `measure` (the
interleaved comparison with the baseline), `report` (summary and files), `outcome` (how a
result counts).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mneme.core import events, interrupt
from mneme.core.errors import UsageError
from mneme.core.tuning.context import LoopContext, MeasureContext, RunInfo
from mneme.core.tuning.lease import Lease, StaleWatch, Tuners, grace_for, tuners_folder
from mneme.core.tuning.loop import MAX_DUPLICATES, TrialLoop
from mneme.core.tuning.options import Progress, Stop, TuneOptions
from mneme.core.tuning.outcome import (
    PENALTY_FACTOR,
    BaselineNotVerified,
    default_results_dir,
    environment_fingerprint,
    failure_kind,
    fingerprint_digest,
    objective,
    result_of,
)
from mneme.core.tuning.samplers import Sampler, create_sampler
from mneme.core.tuning.space import SearchSpace, load_space
from mneme.core.tuning.store import EVALUATED, ResultStore, storage_url
from mneme.core.types import ExperimentConfiguration, ExperimentResult

log = logging.getLogger(__name__)

SESSION_FILE = "session.json"
__all__ = ["PENALTY_FACTOR", "BaselineNotVerified", "Progress", "TuneOptions", "TuningSession"]


class TuningSession:
    """One `mneme tune` run. `pool_factory(**kwargs)` makes the worker pool (AsyncReplayExecutor)."""

    def __init__(
        self,
        options: TuneOptions,
        *,
        pool_factory: Callable[..., Any] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        options.validate()
        self.options = options
        self.pool_factory = pool_factory
        self.on_progress = on_progress or (lambda progress: None)
        self.progress = Progress(budget=options.trials)
        self.session_id = uuid.uuid4().hex[:12]
        self.pool: Any = None
        self._baseline_future: Any = None  # submitted as soon as the pool is up (`_open_pool`)
        self.store: ResultStore | None = None
        self.lease: Lease | None = None
        self.tuners: Tuners | None = None  # the live tuners of our study file, where it is one (`lease.Tuners`)
        self._watch: StaleWatch | None = None
        self.loop: TrialLoop | None = None  # made once the baseline is known (`_start_loop`)
        self._prepared = False
        self.timed_by = ""  # the timer of the study's times (its first baseline's), once known
        self.measurement: dict[str, Any] = {}
        self.notes: list[str] = []  # what the summary says about how the search went (e.g. exhaustive's order)

    # -- preparation (no experiment runs) -----------------------------------------------------
    def prepare(self) -> None:
        """Load the recording, build the space and the sampler; no storage or worker is touched."""
        if self._prepared:
            return
        from mneme.core.recording import load_recording

        opts = self.options
        self.recording = load_recording(opts.record_db)
        self.instance = self.recording.select(opts.record_id)
        self.space: SearchSpace = load_space(
            opts.space, self.recording, self.instance, opts.space_options, code=True
        )  # opts come from the command line or the API
        self.sampler: Sampler = create_sampler(opts.sampler, seed=opts.seed, options=opts.sampler_options)
        self.results_dir = (
            Path(opts.results) if opts.results else default_results_dir(self.recording, self.instance, opts.space)
        )
        self._prepared = True

    @property
    def num_workers(self) -> int:
        return max(1, len(self.options.devices or [0]) * self.options.workers_per_device)

    def study_name(self) -> str:
        if self.options.study:
            return self.options.study
        previous = self.results_dir / SESSION_FILE
        if self.options.resume and self.options.storage is None and previous.is_file():
            try:  # --resume continues the study this folder holds, whatever space is asked now
                return str(json.loads(previous.read_text())["study"])
            except (ValueError, KeyError, OSError):
                log.warning("%s is unreadable; deriving the study name", previous)
        return f"mneme-{self.recording.static_hash[:12]}-{self.instance.dynamic_hash[:12]}-{self.space.name}"

    def identity(self, env_digest: str) -> dict[str, Any]:
        return {
            "kernel_name": self.recording.kernel_name,
            "static_hash": self.recording.static_hash,
            "dynamic_hash": self.instance.dynamic_hash,
            "space": self.space.fingerprint(),
            "space_name": self.space.name,
            "env": env_digest,
            "record_db": str(Path(self.recording.path).resolve()) if self.recording.path else "",
            "sampler": self.sampler.spec,
            "cache": self.options.cache,  # times from another cache state do not compare
            "timer": self.options.timer,  # nor times by another timer
        }

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Tune; returns the summary (also written to ``summary.json`` in the results folder)."""
        from mneme.core.tuning import report

        from mneme.core.tuning import measure

        self.prepare()
        self._check_timer()
        self._check_results_dir()
        # Workers warm up (seconds: spawn, link the IR) while the storage opens.
        starter = _Background(self._open_pool)
        try:
            self._open_storage()
            starter.join()
            self._open_store()
            self._run_baseline()
            self._start_loop()
            self.progress.stop = self.stop_record(self.loop.run())
            log.info("search stopped: %s", self.progress.stop.detail)
            if self.progress.stop.reason == "interrupted":
                raise interrupt.Interrupted(interrupt.pending() or 2)
            retimed, self.measurement = measure.measure(self.measure_context())
            summary = self.summary(retimed)
            report.write_outputs(self.results_dir, summary, self.recording)
            self.progress.phase = "done"
            self.on_progress(self.progress)
            events.emit("mneme_tuning_finished", run=self.run_info(), summary=summary, stop=self.progress.stop)
            return summary
        except interrupt.Interrupted as exc:
            raise self._interrupted(exc) from None
        finally:
            starter.join(reraise=False)
            if self.lease is not None:
                self.lease.close()
            if self.pool is not None:
                self.pool.shutdown()
            if self.tuners is not None:
                self.tuners.close()

    def summary(self, retimed: dict[str, Any] | None = None) -> dict[str, Any]:
        from mneme.core.tuning import report

        summary = report.build_summary(
            self.store,
            retimed=retimed,
            session=self._session_record(),
            accept_insignificant=self.options.accept_insignificant,
        )
        summary["stop"] = self.progress.stop.to_dict()
        summary["notes"] = list(self.notes)
        summary["measurement"] = self.measurement
        return summary

    def stop_record(self, reason: str) -> Stop:
        """Why the search stopped, in words."""
        opts = self.options
        used = self.loop.budget_used() if self.loop is not None else 0
        done = f"{used}/{opts.trials} distinct configurations measured"
        if self.progress.cached:
            done += f", {self.progress.cached} duplicate proposal(s) answered from the store"
            if self.progress.equivalent:
                done += f" ({self.progress.equivalent} compiled to code measured already)"
        detail = {
            "budget": f"stopped by the budget (--trials {opts.trials}): {done}",
            "timeout": f"stopped by --timeout {opts.timeout:g} s: {done}" if opts.timeout else done,
            "exhausted": f"stopped: the sampler {self.sampler.spec} has no new configuration to propose (none left, "
            f"or only measured ones, {MAX_DUPLICATES} in a row): {done}",
            "interrupted": f"interrupted: {done}",
        }[reason]
        return Stop(reason, detail)

    def saved_trials(self) -> int:
        """Finished trials in the store that answer a configuration (measured or answered from the store)."""
        if self.store is None:
            return 0
        return sum(r.status in EVALUATED for r in self.store.records())

    def _interrupted(self, exc: interrupt.Interrupted) -> interrupt.Interrupted:
        """The interruption, with the trials saved and how to continue; in-flight trials are marked ``interrupted``."""
        if self.store is not None:
            try:
                if self.loop is not None:
                    self.loop.abandon()
                for trial in self.store.trials():
                    owner = trial.user_attrs.get("owner") or {}
                    if owner.get("session") == self.session_id and trial.state.name == "RUNNING":
                        self.store.mark_interrupted(trial)
            except Exception as error:  # the store may be what failed; the message still goes out
                log.warning("could not mark the running trials interrupted: %s", error)
        saved = self.saved_trials()
        error = interrupt.Interrupted(exc.signum, str(exc))
        error.saved = saved  # type: ignore[attr-defined]
        error.results_dir = self.results_dir  # type: ignore[attr-defined]
        return error

    def _open_pool(self) -> None:
        from mneme.core.workers import AsyncReplayExecutor

        opts = self.options
        factory = self.pool_factory or AsyncReplayExecutor
        kwargs = {
            "record_db": str(self.recording.path),
            "record_id": self.instance.dynamic_hash,
            "iterations": opts.iterations,
            "results_db_dir": str(self.results_dir),
            "num_workers": self.num_workers,
            "backend": opts.backend,
            "devices": opts.devices,
            "timeout": opts.experiment_timeout,
            "cache": opts.cache,
            "timer": opts.timer,
        }
        accepted = inspect.signature(factory).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        self.progress.phase = "starting workers"
        self.on_progress(self.progress)
        self.pool = factory(**kwargs)
        # The baseline starts as soon as a worker is warm, while the store may still be opening (its
        # first import and schema set-up take about as long as a GPU worker's start-up).
        self._baseline_future = self.pool.submit(self._baseline_config())

    def _environment(self) -> tuple[dict[str, Any], str]:
        from mneme.core.executor import resolve_backend

        backend = resolve_backend(self.recording, self.options.backend or getattr(self.pool, "backend_name", None))
        arch = getattr(self.pool, "arch", "") or ""
        fingerprint = environment_fingerprint(backend, arch)
        return fingerprint, fingerprint_digest(fingerprint)

    def _check_timer(self) -> None:
        """--timer names one of the backend's timers (before any worker starts: each would fail on it)."""
        from mneme.core.backend import check_timer
        from mneme.core.executor import resolve_backend

        backend = resolve_backend(self.recording, self.options.backend)
        check_timer(self.options.timer, backend.timers, backend.name)

    def _check_results_dir(self) -> None:
        """Make the results folder; join the live tuners of our study file, or (alone) check what the folder holds.

        Under the tuners' lock: a tuner starting meanwhile waits, then finds this one alive.
        """
        self.results_dir.mkdir(parents=True, exist_ok=True)
        folder = tuners_folder(storage_url(self.options.storage, self.results_dir))
        if folder is None:
            self._check_leftovers()
            return
        self.tuners = Tuners(folder, self.session_id)
        try:
            with self.tuners.lock():
                others = self.tuners.others()
                if others:
                    self._join(others)
                else:
                    self._check_leftovers()
                self.tuners.register(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "study": self.study_name(),
                        "results": str(self.results_dir),
                    }
                )
        except BaseException:  # refused (or interrupted): leave no entry and no open lock behind
            self.tuners.close()
            self.tuners = None
            raise

    def _join(self, others: dict[str, dict[str, Any]]) -> None:
        """Share the study of the live tuners of our study file: one study per results folder."""
        ours = self.study_name()
        who = ", ".join(sorted(f"pid {r.get('pid')} on {r.get('host')}" for r in others.values()))
        if self.options.storage is None:
            for record in others.values():
                if record.get("study") != ours:
                    raise UsageError(
                        f"{self.results_dir} is in use by a tuner (pid {record.get('pid')} on {record.get('host')}) "
                        f"of study {record.get('study')!r}, not {ours!r} (another kernel, space or --study); "
                        "wait for it to end, or choose another --results folder"
                    )
        log.info(
            "joining the tuners at work on %s (%s): one study, one budget of --trials %d",
            self.results_dir,
            who,
            self.options.trials,
        )

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """The tuners' lock where our study file has them; nothing elsewhere."""
        if self.tuners is None:
            yield
            return
        with self.tuners.lock():
            yield

    def _check_leftovers(self) -> None:
        db = self.results_dir / "study.db"
        if self.options.storage is None and not self.options.resume and db.exists():
            if _finished_trials(db):
                raise UsageError(
                    f"{self.results_dir} already holds a tuning run; pass --resume to continue it, "
                    "or choose another --results folder"
                )
            # A run that failed or was stopped before its first trial left nothing worth keeping: start afresh.
            log.info(
                "%s holds no finished trial (an earlier run stopped before any); using it afresh", self.results_dir
            )
            for name in ("study.db", "study.db-wal", "study.db-shm", SESSION_FILE, "summary.json"):
                (self.results_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.results_dir / "logs", ignore_errors=True)

    def _open_storage(self) -> None:
        opts = self.options
        url = storage_url(opts.storage, self.results_dir)
        self.sampler.bind(self.space, parallel=self.num_workers, budget=opts.trials)
        self.store, self._existed = ResultStore.create_or_load(url, self.study_name(), heartbeat=opts.heartbeat or None)
        if opts.heartbeat:
            native = self.store.has_heartbeat
            self.lease = Lease(self.store.beat, self._interval(), at_hold=native)
            self._watch = StaleWatch(grace_for(self._interval()), owned=not native)
        if self._existed and self.store.meta:  # refuse another run's study before waiting for the workers
            partial = {k: v for k, v in self.identity("").items() if k != "env"}
            self.store.check_meta({**partial, "env": self.store.meta.get("env")}, force=opts.force)

    def _open_store(self) -> None:
        opts = self.options
        url = self.store.url
        existed = self._existed
        session_file = self.results_dir / SESSION_FILE
        self.env, self.env_digest = self._environment()
        identity = self.identity(self.env_digest)
        if existed and self.store.meta:
            diffs = self.store.check_meta(identity, force=opts.force)
            for diff in diffs:
                log.warning("continuing a study of a different run (--force): %s", diff)
        else:
            if opts.resume and not existed:
                log.warning("nothing to resume in %s (study %s); starting a new run", url, self.study_name())
            self.store.set_meta(identity)
        self.store.set_environment(self.env_digest, self.env)
        _write_json(session_file, self._session_record())
        note = getattr(self.sampler, "note", "")
        if note:
            self.notes.append(note)

    def run_info(self) -> RunInfo:
        """Which run this is, as the event hooks receive it."""
        return RunInfo(
            self.session_id,
            self.recording.kernel_name,
            self.recording.static_hash,
            self.instance.dynamic_hash,
            self.space.name,
            self.sampler.spec,
            self.study_name(),
            storage_url(self.options.storage, self.results_dir),
            self.results_dir,
        )

    def _start_loop(self) -> None:
        """The search loop over what it reads, fixed now that the baseline (the penalty, the timer) is known."""
        opts = self.options
        self.sampler.penalty = self.penalty  # a sampler may tell failures from slow points by it
        ctx = LoopContext(
            run=self.run_info(),
            store=self.store,
            sampler=self.sampler,
            space=self.space,
            pool=self.pool,
            lease=self.lease,
            watch=self._watch,
            owner=self.owner(),
            penalty=self.penalty,
            timed_by=self.timed_by,
            trials=opts.trials,
            timeout=opts.timeout,
            concurrency=self.num_workers + (opts.prefetch if opts.prefetch is not None else self.num_workers),
            shared=opts.storage is not None,
            tuners=self.tuners,
            progress=self.progress,
            on_progress=self.on_progress,
        )
        self.loop = TrialLoop(ctx)
        self.loop.start()

    def measure_context(self) -> MeasureContext:
        """What the final comparison reads."""
        opts = self.options
        return MeasureContext(
            self.session_id,
            self.store,
            self.pool,
            self.baseline,
            self.timed_by,
            opts.retime_top,
            opts.retime_repeats,
            opts.ci_target,
            opts.measure_time,
            opts.max_pairs,
            self.progress,
            self.on_progress,
            opts.confidence,
        )

    def _interval(self) -> float:
        """Seconds between lease refreshes (database storages beat in whole seconds)."""
        beat = float(self.options.heartbeat)
        return float(max(1, math.ceil(beat))) if self.store is not None and self.store.has_heartbeat else beat

    def _session_record(self) -> dict[str, Any]:
        opts = self.options
        return {
            "schema": 1,
            "kernel_name": self.recording.kernel_name,
            "static_hash": self.recording.static_hash,
            "dynamic_hash": self.instance.dynamic_hash,
            "record_db": str(Path(self.recording.path).resolve()) if self.recording.path else "",
            "space": self.space.describe(),
            "space_spec": opts.space,
            "space_options": opts.space_options,
            "sampler": self.sampler.spec,
            "storage": storage_url(opts.storage, self.results_dir),
            "study": self.study_name(),
            "trials": opts.trials,
            "options": {
                "accept_insignificant": opts.accept_insignificant,
                "ci_target": opts.ci_target,
                "confidence": opts.confidence,
                "measure_time": opts.measure_time,
                "max_pairs": opts.max_pairs,
                "retime_top": opts.retime_top,
            },
            "stop": self.progress.stop.to_dict(),
            "environment": getattr(self, "env", {}),
        }

    # -- baseline ---------------------------------------------------------------------------------
    def _baseline_config(self) -> ExperimentConfiguration:
        default = getattr(self.pool, "default_config", None)
        if isinstance(default, ExperimentConfiguration):
            return default
        return ExperimentConfiguration(
            grid=self.instance.grid_dim, block=self.instance.block_dim, shared_mem=int(self.instance.shared_mem)
        )

    def _run_baseline(self) -> None:
        self.progress.phase = "baseline"
        self.on_progress(self.progress)
        config = self._baseline_config()
        future, self._baseline_future = self._baseline_future, None
        result = result_of(future) if future is not None else self._evaluate(config)
        if objective(result) is None:
            detail = result.error or "; ".join(result.mismatches[:3]) or "its output differs from the epilogue"
            raise BaselineNotVerified(
                f"kernel {self.recording.kernel_name} ({self.instance.dynamic_hash[:12]}): the recorded "
                f"configuration does not replay correctly ({failure_kind(result)}: {detail}); check the "
                "recording with `mneme replay`, or loosen its verification tolerances"
            )
        record = {
            "config": config.to_dict(),
            "hash": config.hash(),
            "result": result.to_dict(),
            "value": objective(result),
            "owner": self.owner(),
            "env": self.env_digest,
        }
        with self._turn():  # tuners starting together: the first to store its baseline sets the study's
            stored = self.store.baseline
            if stored is None:
                self.store.set_baseline(record)
                stored = record
        timed_by = (stored.get("result") or {}).get("timer", "")
        if timed_by and result.timer and timed_by != result.timer and not self.options.force:
            raise UsageError(
                f"the study's times were taken by {timed_by}, this run's by {result.timer} (--timer "
                f"{self.options.timer} resolved differently here); use --timer {timed_by}, another "
                "--results/--study, or --force"
            )
        self.timed_by = timed_by or result.timer
        self.baseline = record
        # Penalties use the study's first baseline, so every process of a shared study agrees.
        self.penalty = float(stored["value"]) * PENALTY_FACTOR
        self.progress.baseline_time = float(stored["value"])
        self.progress.baseline_samples = list((stored.get("result") or {}).get("exec_time") or [])
        self.on_progress(self.progress)

    def _evaluate(self, config: ExperimentConfiguration) -> ExperimentResult:
        return result_of(self.pool.submit(config))

    def owner(self) -> dict[str, Any]:
        from mneme.core.tuning.store import owner

        found = {**owner(), "session": self.session_id, "env": self.env_digest}
        if self.lease is not None:  # how long others wait for a missed refresh before failing our trials
            found["lease"] = {"interval": self.lease.interval, "grace": grace_for(self.lease.interval)}
        return found


class _Background:
    """Run a function in a thread; `join()` re-raises what it raised."""

    def __init__(self, target: Callable[[], None]):
        self._error: BaseException | None = None

        def body() -> None:
            try:
                target()
            except BaseException as exc:  # handed to join()
                self._error = exc

        self._thread = threading.Thread(target=body, name="mneme-pool-start", daemon=True)
        self._thread.start()

    def join(self, reraise: bool = True) -> None:
        self._thread.join()
        if reraise and self._error is not None:
            error, self._error = self._error, None
            raise error


def _finished_trials(db: Path) -> int:
    """Measured trials of every study in a results folder's SQLite store (infeasible points do not count)."""
    import sqlite3

    query = (
        "SELECT COUNT(*) FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id "
        "WHERE t.state = 'COMPLETE' AND a.key = 'status' AND a.value_json IN ('\"ok\"', '\"failed\"', "
        "'\"unverified\"')"
    )
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            return int(connection.execute(query).fetchone()[0])
    except sqlite3.Error:
        return 1  # unreadable: not ours to throw away


def _write_json(path: Path, data: Any) -> None:
    from mneme.core.tuning.report import write_json

    write_json(path, data)
