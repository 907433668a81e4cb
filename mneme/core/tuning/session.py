"""A tuning session: baseline, the ask -> run -> tell loop over a worker pool, re-timing, outputs.

`TuningSession(options).run()` is what `mneme tune` does. Every trial goes to the result
store (an Optuna study) before and after it runs, so a session killed at any point resumes
(`resume=True`) without losing a finished experiment or running one twice: trials left
running by a dead process are marked ``interrupted`` and their points are run again first.
Several sessions may share one study (``storage``): each spends the same trial budget,
skips what the others finished, and answers a configuration whose grounded hash was
already evaluated from the store. Each session holds a lease on its running trials
(``heartbeat`` seconds, see `lease`); when a process dies, on this host or another, the
first session to notice fails its trials and runs their configurations again.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import inspect
import json
import logging
import math
import platform
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from mneme.core.backend import check_cache_state
from mneme.core.errors import ExperimentError, MnemeError, UsageError
from mneme.core.tuning.lease import Lease, StaleWatch, describe_owner, grace_for
from mneme.core.tuning.samplers import Ask, Sampler, create_sampler, mark_feasibility
from mneme.core.tuning.space import MAX_SAMPLE_RETRIES, SearchSpace, load_space
from mneme.core.tuning.store import EVALUATED, ResultStore, TrialRecord, storage_url
from mneme.core.types import ExperimentConfiguration, ExperimentResult, canonical_json

log = logging.getLogger(__name__)
# Seconds to wait for another process's just-asked trial to name its configuration.
RIVAL_WAIT = 2.0

PENALTY_FACTOR = 100.0  # a failed or infeasible point scores this many baseline times
SESSION_FILE = "session.json"


class BaselineNotVerified(MnemeError):
    """The recorded configuration does not replay correctly; tuning it would compare against garbage."""

    exit_code = 3


@attrs.define
class TuneOptions:
    """What `mneme tune` is asked to do (the CLI's options, one to one)."""

    record_db: str
    record_id: str | None = None
    space: str = "quick"
    space_options: dict[str, Any] = attrs.Factory(dict)
    sampler: str = "optuna:tpe"
    sampler_options: dict[str, Any] = attrs.Factory(dict)
    trials: int = 20
    timeout: float | None = None
    devices: list[int] | None = None
    workers_per_device: int = 1
    results: str | None = None
    resume: bool = False
    force: bool = False
    storage: str | None = None
    study: str | None = None
    seed: int | None = None
    iterations: int = 3
    cache: str = "flushed"  # the state each timed run starts from (mneme.core.backend.CACHE_STATES)
    timer: str = "auto"  # what times the runs (the backend's `Device.timers`; auto: its best that works)
    retime_top: int = 3
    retime_repeats: int = 2
    backend: str | None = None
    experiment_timeout: float | None = None
    prefetch: int | None = None
    heartbeat: float = 10.0  # seconds between lease refreshes of running trials; 0 keeps no lease

    def validate(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be >= 1, got {self.trials}")
        if self.timeout is not None and self.timeout <= 0:
            raise UsageError(f"--timeout must be > 0 seconds, got {self.timeout}")
        if self.workers_per_device < 1:
            raise UsageError(f"--workers-per-device must be >= 1, got {self.workers_per_device}")
        if self.iterations < 1:
            raise UsageError(f"--iterations must be >= 1, got {self.iterations}")
        check_cache_state(self.cache)
        if self.retime_top < 0 or self.retime_repeats < 1:
            raise UsageError("--retime-top must be >= 0 and --retime-repeats >= 1")
        if self.heartbeat < 0:
            raise UsageError(f"--heartbeat must be >= 0 seconds (0: keep no lease), got {self.heartbeat}")


@attrs.define
class _Pending:
    trial: optuna.trial.Trial
    ask: Ask | None
    encoded: dict[str, Any]
    config: ExperimentConfiguration
    digest: str
    submitted: float = 0.0


@attrs.define
class Progress:
    """Live counters of a session, for displays."""

    trials: int = 0
    budget: int = 0
    experiments: int = 0
    cached: int = 0
    infeasible: int = 0
    failures: Counter = attrs.Factory(Counter)
    best_time: float | None = None
    best_trial: int | None = None
    baseline_time: float | None = None
    phase: str = "starting"

    @property
    def speedup(self) -> float | None:
        if self.best_time and self.baseline_time:
            return self.baseline_time / self.best_time
        return None


def environment_fingerprint(backend: Any, arch: str) -> dict[str, Any]:
    """What makes timings comparable: backend, device architecture, toolchain versions."""
    import llvmlite
    from llvmlite import binding

    import mneme

    fingerprint: dict[str, Any] = {}
    try:
        fingerprint.update({k: str(v) for k, v in backend.fingerprint().items()})
    except Exception as exc:  # a backend that cannot fingerprint still tunes; say so in the store
        fingerprint["backend_error"] = repr(exc)
    fingerprint.update({
        "arch": arch,
        "machine": platform.machine(),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, binding.llvm_version_info)),
        "mneme": mneme.__version__,
    })
    return fingerprint


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(fingerprint).encode()).hexdigest()[:16]


def objective(result: ExperimentResult) -> float | None:
    """Median seconds of a verified experiment; None when it failed or did not verify."""
    if result.ok and result.exec_time:
        return float(result.median_time)
    return None


def _unverified(result: ExperimentResult) -> bool:
    return result.error_kind == "verify" or (result.executed and not result.verified and not result.error_kind)


def status_of(result: ExperimentResult) -> str:
    if result.ok and result.exec_time:
        return "ok"
    return "unverified" if _unverified(result) else "failed"


def failure_kind(result: ExperimentResult) -> str:
    return "verify" if _unverified(result) else (result.error_kind or "error")


def default_results_dir(rec: Any, inst: Any, space: str) -> Path:
    safe_space = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(space).stem)
    return Path("mneme-results") / f"{rec.kernel_name[:40]}-{inst.dynamic_hash[:12]}-{safe_space}"


class TuningSession:
    """One `mneme tune` run. `pool_factory(**kwargs)` makes the worker pool (AsyncReplayExecutor)."""

    def __init__(self, options: TuneOptions, *, pool_factory: Callable[..., Any] | None = None,
                 on_progress: Callable[[Progress], None] | None = None):
        options.validate()
        self.options = options
        self.pool_factory = pool_factory
        self.on_progress = on_progress or (lambda progress: None)
        self.progress = Progress(budget=options.trials)
        self.session_id = uuid.uuid4().hex[:12]
        self.pool: Any = None
        self.store: ResultStore | None = None
        self.lease: Lease | None = None
        self._watch: StaleWatch | None = None
        self._requeue: list[dict[str, Any]] = []
        self._carried: Ask | None = None  # our sampler's point, when the study handed out a requeued one
        self._awaited: dict[int, float] = {}  # other processes' running trials we wait on: since when
        self._prepared = False
        self._timed_by = ""  # the timer of the study's times (its first baseline's), once known

    # -- preparation (no experiment runs) -----------------------------------------------------
    def prepare(self) -> None:
        """Load the recording, build the space and the sampler; no storage or worker is touched."""
        if self._prepared:
            return
        from mneme.core.executor import load_recording

        opts = self.options
        self.recording = load_recording(opts.record_db)
        self.instance = self.recording.select(opts.record_id)
        self.space: SearchSpace = load_space(opts.space, self.recording, self.instance, opts.space_options)
        self.sampler: Sampler = create_sampler(opts.sampler, seed=opts.seed, options=opts.sampler_options)
        self.results_dir = Path(opts.results) if opts.results else default_results_dir(
            self.recording, self.instance, opts.space)
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
            self._loop()
            retimed = self._retime()
            summary = report.build_summary(self.store, retimed=retimed, session=self._session_record())
            report.write_outputs(self.results_dir, summary, self.recording)
            self.progress.phase = "done"
            self.on_progress(self.progress)
            return summary
        finally:
            starter.join(reraise=False)
            if self.lease is not None:
                self.lease.close()
            if self.pool is not None:
                self.pool.shutdown()

    def _open_pool(self) -> None:
        from mneme.core.workers import AsyncReplayExecutor

        opts = self.options
        factory = self.pool_factory or AsyncReplayExecutor
        kwargs = {"record_db": str(self.recording.path), "record_id": self.instance.dynamic_hash,
                  "iterations": opts.iterations, "results_db_dir": str(self.results_dir),
                  "num_workers": self.num_workers, "backend": opts.backend, "devices": opts.devices,
                  "timeout": opts.experiment_timeout, "cache": opts.cache, "timer": opts.timer}
        accepted = inspect.signature(factory).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        self.progress.phase = "starting workers"
        self.on_progress(self.progress)
        self.pool = factory(**kwargs)

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
        if self.options.storage is None and not self.options.resume and (self.results_dir / "study.db").exists():
            raise UsageError(f"{self.results_dir} already holds a tuning run; pass --resume to continue it, "
                             "or choose another --results folder")
        self.results_dir.mkdir(parents=True, exist_ok=True)

    def _open_storage(self) -> None:
        opts = self.options
        url = storage_url(opts.storage, self.results_dir)
        self.sampler.bind(self.space, parallel=self.num_workers, budget=opts.trials)
        self.store, self._existed = ResultStore.create_or_load(url, self.study_name(), self.sampler.optuna_sampler(),
                                                               heartbeat=opts.heartbeat or None)
        if opts.heartbeat:
            native = self.store.has_heartbeat
            self.lease = Lease(self.store.study._storage, self._interval(), native=native)
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
        self._seen: set[int] = set()
        self._evaluated: dict[str, tuple[int, float]] = {
            digest: (r.number, r.value) for digest, r in self.store.evaluated().items()}
        self._sync(initial=True)

    def _interval(self) -> float:
        """Seconds between lease refreshes (database storages beat in whole seconds)."""
        beat = float(self.options.heartbeat)
        return float(max(1, math.ceil(beat))) if self.store is not None and self.store.has_heartbeat else beat

    def _recover(self) -> None:
        """Fail the trials of dead processes (this session noticed first) and queue their points again."""
        for trial in self.store.fail_stale(self._watch, self.session_id):
            if trial.user_attrs.get("status") == "duplicate":  # the trial it deferred to runs its configuration
                log.info("trial %d of %s ended a duplicate", trial.number, describe_owner(trial))
                continue
            if not trial.user_attrs.get("config"):
                log.info("trial %d of %s was interrupted before it chose a configuration", trial.number,
                         describe_owner(trial))
                continue
            log.warning("trial %d was interrupted (%s is gone: dead on this host, or its lease lapsed); "
                        "running its configuration again", trial.number, describe_owner(trial))
            self._requeue.append(dict(trial.params))
            if not self.sampler.native:
                self.sampler.observe(trial.params, None)  # exhaustive must not propose it a second time

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
            "environment": getattr(self, "env", {}),
        }

    # -- baseline ---------------------------------------------------------------------------------
    def _baseline_config(self) -> ExperimentConfiguration:
        default = getattr(self.pool, "default_config", None)
        if isinstance(default, ExperimentConfiguration):
            return default
        return ExperimentConfiguration(grid=self.instance.grid_dim, block=self.instance.block_dim,
                                       shared_mem=int(self.instance.shared_mem))

    def _run_baseline(self) -> None:
        self.progress.phase = "baseline"
        self.on_progress(self.progress)
        config = self._baseline_config()
        result = self._evaluate(config)
        if objective(result) is None:
            detail = result.error or "; ".join(result.mismatches[:3]) or "its output differs from the epilogue"
            raise BaselineNotVerified(
                f"kernel {self.recording.kernel_name} ({self.instance.dynamic_hash[:12]}): the recorded "
                f"configuration does not replay correctly ({failure_kind(result)}: {detail}); check the "
                "recording with `mneme replay`, or loosen its verification tolerances")
        stored = self.store.baseline
        record = {"config": config.to_dict(), "hash": config.hash(), "result": result.to_dict(),
                  "value": objective(result), "owner": self._owner(), "env": self.env_digest}
        if stored is None:
            self.store.set_baseline(record)
            stored = record
        timed_by = (stored.get("result") or {}).get("timer", "")
        if timed_by and result.timer and timed_by != result.timer and not self.options.force:
            raise UsageError(f"the study's times were taken by {timed_by}, this run's by {result.timer} (--timer "
                             f"{self.options.timer} resolved differently here); use --timer {timed_by}, another "
                             "--results/--study, or --force")  # fmt: skip
        self._timed_by = timed_by or result.timer
        self.baseline = record
        # Penalties use the study's first baseline, so every process of a shared study agrees.
        self.penalty = float(stored["value"]) * PENALTY_FACTOR
        self.progress.baseline_time = float(stored["value"])
        self.on_progress(self.progress)

    def _evaluate(self, config: ExperimentConfiguration) -> ExperimentResult:
        return _result_of(self.pool.submit(config))

    def _owner(self) -> dict[str, Any]:
        from mneme.core.tuning.store import owner

        found = {**owner(), "session": self.session_id, "env": self.env_digest}
        if self.lease is not None:  # how long others wait for a missed refresh before failing our trials
            found["lease"] = {"interval": self.lease.interval, "grace": grace_for(self.lease.interval)}
        return found

    # -- the ask/tell loop ----------------------------------------------------------------------------
    def _sync(self, initial: bool = False) -> None:
        """Tell the sampler about trials it did not ask for (earlier runs, other processes)."""
        self._recover()
        for trial in self.store.trials():
            if trial.number in self._seen:
                continue
            status = trial.user_attrs.get("status")
            mine = (trial.user_attrs.get("owner") or {}).get("session") == self.session_id
            if mine and trial.state == TrialState.RUNNING:
                continue
            if trial.state == TrialState.COMPLETE:
                self._seen.add(trial.number)
                digest = trial.user_attrs.get("hash")
                if status in EVALUATED and digest and digest not in self._evaluated:
                    self._evaluated[digest] = (trial.number, trial.value)
                if not mine:
                    self.sampler.observe(trial.params, trial.value)
                    self._count(status, trial.value, trial.number, trial.user_attrs.get("result"))
            elif trial.state == TrialState.RUNNING and not mine and status != "infeasible":
                self.sampler.observe(trial.params, None)
            elif trial.state != TrialState.RUNNING:
                self._seen.add(trial.number)

    def _count(self, status: str | None, value: float | None, number: int, result: dict | None) -> None:
        progress = self.progress
        if status in ("ok", "failed", "unverified", "cached"):
            progress.trials += 1
        if status in ("ok", "failed", "unverified"):
            progress.experiments += 1
        if status == "cached":
            progress.cached += 1
        if status == "infeasible":
            progress.infeasible += 1
        if status in ("failed", "unverified"):
            kind = "verify" if status == "unverified" else ((result or {}).get("error_kind") or "error")
            progress.failures[kind] += 1
        if status == "ok" and value is not None and (progress.best_time is None or value < progress.best_time):
            progress.best_time, progress.best_trial = value, number

    def _loop(self) -> None:
        opts = self.options
        self.progress.phase = "tuning"
        self.on_progress(self.progress)
        started = time.monotonic()
        in_flight: dict[concurrent.futures.Future, _Pending] = {}
        duplicates: dict[str, list[_Pending]] = {}
        limit = self.num_workers + (opts.prefetch if opts.prefetch is not None else self.num_workers)
        exhausted = False
        last_sync = time.monotonic()
        self._used = self.store.budget_used()
        while True:
            out_of_time = opts.timeout is not None and time.monotonic() - started >= opts.timeout
            while (self._requeue or not exhausted) and not out_of_time and len(in_flight) < limit:
                # A dead process's configuration runs again even past the budget: its trial spent budget, then
                # stopped counting, and the processes may have over-spent the budget meanwhile.
                if self._budget_used() >= opts.trials and not self._requeue:
                    break
                pending = self._next(in_flight, duplicates)
                if pending is None:
                    exhausted = True
                    break
                if pending is True:
                    continue
                future = self.pool.submit(pending.config)
                pending.submitted = time.monotonic()
                in_flight[future] = pending
            if not in_flight:
                if out_of_time or not self._awaiting_others():
                    break
                time.sleep(0.5)  # the budget is held by other processes' trials: wait to see them end
                self._sync()
                last_sync = time.monotonic()
                continue
            done, _ = concurrent.futures.wait(list(in_flight), timeout=1.0,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                pending = in_flight.pop(future)
                self._finish(pending, _result_of(future), duplicates.pop(pending.digest, []))
            if time.monotonic() - last_sync > 2.0:
                self._sync()
                last_sync = time.monotonic()
        if out_of_time:
            log.info("stopped after --timeout %s s", opts.timeout)

    def _awaiting_others(self) -> bool:
        """Whether running trials of other processes may yet turn out dead and need re-running here.

        A trial watched for twice the grace period without being failed belongs to a live
        process (its lease is refreshed): that process finishes it, nobody waits for it.
        """
        if self.options.storage is None or self.lease is None:
            return False
        if self._requeue:
            return True
        now = time.monotonic()
        patience = 2 * grace_for(self.lease.interval) + 2.0
        running = set()
        for trial in self.store.trials(states=(TrialState.RUNNING,)):
            owner = trial.user_attrs.get("owner")
            if owner is None or (owner.get("session") != self.session_id and owner.get("lease")):
                running.add(trial.number)
        self._awaited = {n: self._awaited.get(n, now) for n in running}
        return any(now - since < patience for since in self._awaited.values())

    def _budget_used(self) -> int:
        if self.options.storage is not None:
            return self.store.budget_used()  # other processes spend the budget too
        return self._used

    def _ask_trial(self) -> tuple[optuna.trial.Trial, Ask | None] | None:
        study = self.store.study
        dists = self.space.distributions()
        if self._requeue:
            params = self._requeue.pop(0)
            study.enqueue_trial(params)
            if not self.sampler.native:  # should another process pop the waiting trial, ask the same point
                self.sampler.optuna_sampler().pin(params)
            return study.ask(dists), None
        if self.sampler.native:
            return study.ask(dists), None
        if self.options.storage is not None:
            self._sync()  # a shared study: learn what the other processes took just now
        ask, self._carried = self._carried or self.sampler.ask(), None
        if ask is None:
            return None
        self.sampler.optuna_sampler().pin(ask.encoded)
        trial = study.ask(dists)
        if any(ask.encoded.get(k) != v for k, v in trial.params.items()):
            # The study handed out a point another process queued again (a dead process's): run it, keep ours.
            self._carried = ask
            return trial, None
        return trial, ask

    def _next(self, in_flight: dict, duplicates: dict[str, list[_Pending]]) -> _Pending | bool | None:
        """The next point to run; True when a point was answered without running; None when exhausted."""
        in_flight_hashes = {p.digest: p for p in in_flight.values()}
        for _ in range(MAX_SAMPLE_RETRIES):
            asked = self._ask_trial()
            if asked is None:
                return None
            trial, ask = asked
            encoded = dict(trial.params)
            if self.lease is not None:  # before the owner: an owned trial has a lease (watchers rely on it)
                self.lease.hold(trial._trial_id)
            trial.set_user_attr("owner", self._owner())
            config = self.space.feasible(self.space.decode(encoded))
            if config is None:
                self._tell(trial, ask, encoded, self.penalty, "infeasible")
                continue
            digest = config.hash()
            trial.set_user_attr("config", config.to_dict())
            trial.set_user_attr("hash", digest)
            if self.options.storage is not None:
                rival = self._rival(trial.number, digest)
                if rival is not None and rival.state == TrialState.RUNNING:
                    # Another process took this configuration just now: leave it to them, ask again.
                    trial.set_user_attr("status", "duplicate")
                    self.store.study.tell(trial, state=TrialState.FAIL)
                    self._release(trial)
                    self._seen.add(trial.number)
                    if ask is not None or not self.sampler.native:
                        self.sampler.observe(encoded, None)
                    continue
                if rival is not None and digest not in self._evaluated:
                    self._evaluated[digest] = (rival.number, rival.value)
            self._used += 1
            known = self._evaluated.get(digest)
            if known is not None:
                trial.set_user_attr("cached_from", known[0])
                self._tell(trial, ask, encoded, known[1], "cached")
                return True
            pending = _Pending(trial, ask, encoded, config, digest)
            if digest in in_flight_hashes:
                trial.set_user_attr("status", "running")
                duplicates.setdefault(digest, []).append(pending)
                return True
            trial.set_user_attr("status", "running")
            return pending
        raise UsageError(f"space {self.space.name!r}: {MAX_SAMPLE_RETRIES} points in a row violate its constraints; "
                         f"the sampler {self.sampler.spec} cannot find a feasible one; loosen the constraints")

    def _rival(self, number: int, digest: str) -> optuna.trial.FrozenTrial | None:
        """An earlier trial of another process with the same configuration, running or evaluated.

        The earlier trial wins. A trial another process has just asked may not carry its hash
        yet; wait (briefly: a dead process never writes it) until every earlier running trial
        says what it runs, so two processes never both take one configuration.
        """
        deadline = time.monotonic() + RIVAL_WAIT
        while True:
            undecided = False
            for other in self.store.trials(states=(TrialState.RUNNING, TrialState.COMPLETE)):
                attrs_ = other.user_attrs
                if other.number >= number or (attrs_.get("owner") or {}).get("session") == self.session_id:
                    continue
                if other.state == TrialState.RUNNING and "hash" not in attrs_:
                    undecided = True
                elif attrs_.get("hash") == digest and (other.state == TrialState.RUNNING
                                                        or attrs_.get("status") in EVALUATED):
                    return other
            if not undecided or time.monotonic() > deadline:
                return None
            time.sleep(0.02)

    def _release(self, trial: optuna.trial.Trial) -> None:
        if self.lease is not None:
            self.lease.release(trial._trial_id)

    def _tell(self, trial: optuna.trial.Trial, ask: Ask | None, encoded: dict, value: float, status: str,
              result: dict | None = None) -> bool:
        """Store the trial's outcome and tell the sampler; False when another process failed the trial first."""
        self._release(trial)
        try:
            if result is not None:
                trial.set_user_attr("result", result)
            trial.set_user_attr("status", status)
            mark_feasibility(trial, status != "infeasible", self.sampler)
            self.store.study.tell(trial, value)
        except UpdateFinishedTrialError:
            # Another process failed it as stale (our lease lapsed: a stall longer than the grace
            # period) and runs its configuration again; the store keeps one result per trial.
            log.warning("trial %d was failed by another process while it ran here (its lease lapsed); "
                        "its result is dropped and the configuration runs again there", trial.number)
            self._seen.add(trial.number)
            return False
        self._seen.add(trial.number)
        if ask is not None:
            self.sampler.tell(ask, value)
        elif not self.sampler.native:
            self.sampler.observe(encoded, value)
        self._count(status, value, trial.number, result)
        self.on_progress(self.progress)
        return True

    def _judged(self, result: ExperimentResult) -> ExperimentResult:
        """`result`, failed as invalid when another timer than the study's measured it (e.g. a run fell back
        to events): its times do not compare with the study's."""
        timed_by = self._timed_by
        if result.ok and result.timer and timed_by and result.timer != timed_by:
            return attrs.evolve(result, failed=True, error_kind="invalid",
                                error=f"timed by {result.timer}, the study by {timed_by}: the two do not compare")
        return result

    def _finish(self, pending: _Pending, result: ExperimentResult, duplicates: list[_Pending]) -> None:
        result = self._judged(result)
        status = status_of(result)
        value = objective(result)
        score = value if value is not None else self.penalty
        trial = pending.trial
        data = result.to_dict()
        told = self._tell(trial, pending.ask, pending.encoded, score, status, data)
        if told:
            self._evaluated.setdefault(pending.digest, (trial.number, score))
        for dup in duplicates:
            if not told:  # nothing in the store answers them: ask their point again
                self._release(dup.trial)
                self.store.mark_interrupted(dup.trial)
                self._seen.add(dup.trial.number)
                self._requeue.append(dict(dup.encoded))
                continue
            try:
                dup.trial.set_user_attr("cached_from", trial.number)
            except UpdateFinishedTrialError:
                pass  # _tell says why
            self._tell(dup.trial, dup.ask, dup.encoded, score, "cached")
        if status != "ok":
            log.info("trial %d %s: %s", trial.number, status, result.error or failure_kind(result))

    # -- noise control ------------------------------------------------------------------------------
    def _retime(self) -> dict[str, Any]:
        """Re-time the best few configurations and the baseline; rank them by the new medians."""
        opts = self.options
        if opts.retime_top == 0:
            return {}
        self.progress.phase = "re-timing"
        self.on_progress(self.progress)
        best: dict[str, TrialRecord] = {}
        for record in sorted((r for r in self.store.records() if r.ok), key=lambda r: r.value):
            best.setdefault(record.hash, record)
            if len(best) >= opts.retime_top:
                break
        candidates = {digest: ExperimentConfiguration.from_dict(r.config) for digest, r in best.items()}
        candidates[self.baseline["hash"]] = ExperimentConfiguration.from_dict(self.baseline["config"])
        futures = {digest: [self.pool.submit(config) for _ in range(opts.retime_repeats)]
                   for digest, config in candidates.items()}
        out: dict[str, Any] = {}
        for digest, futs in futures.items():
            results = [self._judged(_result_of(f)) for f in futs]
            medians = [objective(r) for r in results]
            good = [m for m in medians if m is not None]
            samples = [t for r in results if objective(r) is not None for t in r.exec_time]
            entry = {
                "config": candidates[digest].to_dict(),
                "trial": best[digest].number if digest in best else None,
                "baseline": digest == self.baseline["hash"],
                "verified": len(good) == len(medians),
                "medians": medians,
                "median": statistics.median(good) if good else None,
                "min": min(samples) if samples else None,
                "max": max(samples) if samples else None,
                "spread": (max(good) - min(good)) / statistics.median(good) if len(good) > 1 else 0.0,
                "errors": sorted({r.error_kind or "verify" for r in results if objective(r) is None}),
            }
            out[digest] = entry
        previous = self.store.retime
        previous.update({k: {**v, "session": self.session_id,
                             "at": datetime.datetime.now(datetime.timezone.utc).isoformat()} for k, v in out.items()})
        self.store.set_retime(previous)
        return out


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


def _result_of(future: concurrent.futures.Future) -> ExperimentResult:
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        raise
    except ExperimentError as exc:
        if "shut down" in str(exc):
            raise
        return ExperimentResult(failed=True, error=str(exc), error_kind=exc.kind)
    except MnemeError:
        raise
    except Exception as exc:  # the pool raises only when it cannot go on; record it and carry on
        return ExperimentResult(failed=True, error=repr(exc), error_kind="crash")


def _write_json(path: Path, data: Any) -> None:
    from mneme.core.tuning.report import write_json

    write_json(path, data)
