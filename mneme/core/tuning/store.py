"""The result store: every experiment of a tuning run, durably, in an Optuna study.

One store serves every sampler. Each trial of the study is one point a sampler proposed;
its user attributes carry what Mneme knows about it:

``status``   running | ok | failed | unverified | cached | infeasible | interrupted
``config``   the ExperimentConfiguration (``to_dict()``), ``hash`` its grounded hash
``result``   the ExperimentResult (``to_dict()``): times, verification, errors, device
``owner``    host, pid and session id of the `mneme tune` process that ran it, and its
             ``lease`` (heartbeat interval and grace period, seconds) when it keeps one
``env``      hash of the environment fingerprint (the fingerprint is a study attribute)
``cached_from``  for ``cached``: the trial whose result answered this one (a duplicate proposal: it
             spends no budget; ``--trials`` counts measured configurations)

A trial's system attribute ``mneme.lease`` is the lease its owner refreshes on storages
without Optuna's heartbeat (the journal). The trial's value is the objective, minimized: the median time in seconds, or a penalty
(a multiple of the baseline's time) for failed, unverified and infeasible points.
Study attributes: ``mneme`` (kernel, space and environment identity, checked on resume),
``mneme.env.<hash>``, ``mneme.baseline``, ``mneme.retime``.

Storage: ``sqlite:///DIR/study.db`` in the results folder by default; any SQLAlchemy URL
(``postgresql://user@host/db``); or ``journal:PATH`` (Optuna's journal file, for a shared
file system). Several processes may share one study through the latter two. Trials that a
dead process left running are failed (status ``interrupted``) by whoever notices: at once
when that process ran on this host, else when its lease lapses (see `lease`).
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import optuna
from optuna.trial import TrialState

from mneme.core import logs
from mneme.core.errors import UsageError, require
from mneme.core.types import ExperimentConfiguration
from mneme.core.tuning import distributions
from mneme.core.tuning.lease import LEASE_ATTR, StaleWatch, TrialFinished, grace_for

log = logging.getLogger(__name__)
logs.third_party("optuna", warns=True)  # the store's library: quiet unless -v (mneme.core.logs)

# 2: trials' configurations carry a schema (docs/design/parameters.md); schema-1 stores still load.
STORE_SCHEMA = 2
COUNTED = frozenset({"ok", "failed", "unverified", "cached"})  # statuses of a finished, answered trial
EVALUATED = frozenset({"ok", "failed", "unverified"})  # statuses that ran an experiment
DEFAULT_DB = "study.db"
SCHEMA_RETRIES = 5


@attrs.frozen
class TrialRecord:
    """One trial as Mneme sees it (a flattened view of an Optuna FrozenTrial)."""

    number: int
    state: str
    status: str
    value: float | None
    params: dict[str, Any]
    config: dict[str, Any] | None
    hash: str
    result: dict[str, Any] | None
    owner: dict[str, Any]
    env: str
    cached_from: int | None
    start: str
    end: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_time(self) -> float | None:
        return self.value if self.ok else None

    @classmethod
    def of(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord:
        attrs_ = trial.user_attrs
        result = attrs_.get("result")
        status = status_of_trial(trial)
        return cls(
            number=trial.number,
            state=trial.state.name,
            status=status,
            value=trial.value if trial.state == TrialState.COMPLETE else None,
            params=dict(trial.params),
            config=attrs_.get("config"),
            # the hash is written right after the configuration: a process killed in between leaves only the latter
            hash=attrs_.get("hash") or (ExperimentConfiguration.from_dict(attrs_["config"]).hash()
                                        if attrs_.get("config") else ""),  # fmt: skip
            result=result,
            owner=attrs_.get("owner", {}),
            env=attrs_.get("env") or (attrs_.get("owner") or {}).get("env", ""),
            cached_from=attrs_.get("cached_from"),
            start=(result or {}).get("start_time") or (trial.datetime_start.isoformat() if trial.datetime_start else ""),
            end=(result or {}).get("end_time") or (trial.datetime_complete.isoformat() if trial.datetime_complete else ""),
        )


def status_of_trial(trial: optuna.trial.FrozenTrial) -> str:
    """Mneme's status of a stored trial, from its "status" attribute and its state.

    The attribute is written just before the trial is told, so a process that dies in between
    leaves a running trial that already says "ok": it is still "running", and once Optuna's
    heartbeat check (which cannot say why) or another process fails it, "interrupted", as is a
    trial failed before it had any status.
    """
    status = trial.user_attrs.get("status", "running" if trial.state in (TrialState.RUNNING, TrialState.FAIL)
                                   else trial.state.name.lower())  # fmt: skip
    if trial.state == TrialState.RUNNING and status in COUNTED:
        return "running"  # its result is being written right now
    if trial.state == TrialState.FAIL and status in COUNTED | {"running"}:
        return "interrupted"  # failed while it ran (no status yet: failed before it chose a configuration)
    return status


def storage_url(storage: str | None, results_dir: Path) -> str:
    """The storage URL a run uses: the given one, or the SQLite file in the results folder."""
    if storage:
        return storage
    return f"sqlite:///{(results_dir / DEFAULT_DB).resolve()}"


def open_storage(url: str, heartbeat: float | None = None, on_stale: Any = None) -> optuna.storages.BaseStorage:
    """An Optuna storage for a URL: ``journal:PATH`` or an SQLAlchemy URL.

    `heartbeat` (seconds) turns on Optuna's heartbeat where the storage has one (databases;
    whole seconds), with a grace period of `lease.grace_for(heartbeat)`; `on_stale(study,
    trial)` is called for each stale trial this process fails.
    """
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise UsageError(f"--storage {url!r} is neither journal:PATH nor a database URL like "
                         "postgresql://user@host/db or sqlite:///path.db")
    if url.startswith("postgresql"):
        # psycopg is SQLAlchemy's PostgreSQL driver here; it comes with the postgres extra.
        require("psycopg2" if url.startswith("postgresql+psycopg2") else "psycopg", "postgres",
                f"storage {url.split('://')[0]}://")
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
        _sqlite_write_ahead_log()
    beat: dict[str, Any] = {}
    if heartbeat:
        interval = max(1, math.ceil(heartbeat))
        beat = {"heartbeat_interval": interval, "grace_period": max(1, math.ceil(grace_for(interval))),
                "heartbeat_stale_trial_callback": on_stale}
        # The session records heartbeats itself (ask/tell, not Study.optimize); Optuna warns at every ask.
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    for attempt in range(SCHEMA_RETRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **beat)
        except ImportError as exc:
            raise UsageError(f"storage {url!r} needs a database driver: {exc}") from exc
        except Exception as exc:  # sqlalchemy raises many kinds; say which storage failed
            # Processes that start together race to create the schema: the losers retry and find it.
            if attempt + 1 == SCHEMA_RETRIES:
                raise UsageError(f"cannot open storage {url!r}: {exc}") from exc
            log.debug("opening storage %s failed (%s); retrying", url, exc)
            time.sleep(0.2 + random.random() * (attempt + 1))
    raise AssertionError("unreachable")


_WAL_INSTALLED = False


def _sqlite_write_ahead_log() -> None:
    """SQLite in WAL mode with NORMAL sync: a commit survives a killed process, without an fsync each.

    (Only a power loss can drop the last commits.) Installed once per process for every SQLite engine.
    """
    global _WAL_INSTALLED
    if _WAL_INSTALLED:
        return
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _pragmas(dbapi_connection, connection_record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

    _WAL_INSTALLED = True


def owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def optuna_distribution(domain: distributions.Distribution) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution a study records for a parameter's domain (`mneme.core.tuning.distributions`)."""
    if isinstance(domain, distributions.Categorical):
        return optuna.distributions.CategoricalDistribution(list(domain.choices))
    if isinstance(domain, distributions.IntRange):
        return optuna.distributions.IntDistribution(domain.low, domain.high, step=domain.step)
    if isinstance(domain, distributions.FloatRange):
        return optuna.distributions.FloatDistribution(domain.low, domain.high, log=domain.log)
    raise TypeError(f"no Optuna distribution for {domain!r}")


def optuna_distributions(domains: dict[str, distributions.Distribution]) -> dict[str, Any]:
    """Name -> Optuna distribution of a space's `distributions()`."""
    return {name: optuna_distribution(domain) for name, domain in domains.items()}


class _PinnedSampler(optuna.samplers.BaseSampler):
    """Makes the study's ``ask()`` take the point the session's sampler chose (set with `pin`).

    Not a search strategy: every sampler proposes through `mneme.core.tuning.samplers`; this is how
    its point becomes a trial of the study. A dimension the point leaves out is drawn at random.
    """

    def __init__(self) -> None:
        self._pinned: dict[str, Any] = {}
        self._fallback = optuna.samplers.RandomSampler()

    def pin(self, encoded: Any) -> None:
        self._pinned = dict(encoded)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        if param_name in self._pinned:
            return self._pinned[param_name]
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)


class ResultStore:
    """One study in one storage, with Mneme's view of its trials."""

    def __init__(self, study: optuna.Study, url: str, stale_found: list | None = None):
        self.study = study
        self.url = url
        self._stale_found = stale_found if stale_found is not None else []  # filled by Optuna's callback

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def create_or_load(cls, url: str, study_name: str, heartbeat: float | None = None) -> tuple[ResultStore, bool]:
        """The study (created when absent, minimizing) and whether it existed before.

        `heartbeat` (seconds): the storage's own heartbeat is on, where it has one (`open_storage`).
        """
        logs.quiet_third_party("optuna")  # Optuna reset its logger to INFO when imported; -q/-v decide (mneme.core.logs)
        found: list = []
        storage = open_storage(url, heartbeat, lambda study, trial: found.append(trial))
        existed = study_name in {s.study_name for s in optuna.get_all_study_summaries(storage)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(storage=storage, study_name=study_name, sampler=_PinnedSampler(),
                                        direction="minimize", load_if_exists=True)
        return cls(study, url, found), existed

    @classmethod
    def load(cls, url: str, study_name: str | None = None) -> ResultStore:
        logs.quiet_third_party("optuna")
        storage = open_storage(url)
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        if study_name is None:
            if len(names) != 1:
                raise UsageError(f"storage {url} holds {len(names)} studies ({', '.join(names) or 'none'}); "
                                 "name one")
            study_name = names[0]
        if study_name not in names:
            raise UsageError(f"storage {url} has no study {study_name!r}; it holds: {', '.join(names) or 'none'}")
        return cls(optuna.load_study(storage=storage, study_name=study_name, sampler=_PinnedSampler()), url)

    # -- study attributes ------------------------------------------------------------------------
    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.study.user_attrs.get("mneme") or {})

    def set_meta(self, meta: dict[str, Any]) -> None:
        self.study.set_user_attr("mneme", {"schema": STORE_SCHEMA, **meta})

    def check_meta(self, expected: dict[str, Any], *, force: bool) -> list[str]:
        """Differences between the stored identity and this run's; raise unless `force`."""
        stored = self.meta
        if stored.get("schema", STORE_SCHEMA) > STORE_SCHEMA:
            raise UsageError(f"study {self.study.study_name!r} was written by a newer Mneme (store schema "
                             f"{stored['schema']}); upgrade Mneme to continue it")
        labels = {"static_hash": "kernel", "dynamic_hash": "kernel instance", "space": "search space",
                  "env": "environment (device, driver, toolchain)", "cache": "cache state of timed runs (--cache)",
                  "timer": "timer of timed runs (--timer)"}
        diffs = [f"{labels[k]}: stored {stored.get(k)!r}, now {expected.get(k)!r}"
                 for k in labels if k in stored and stored.get(k) != expected.get(k)]
        if diffs and not force:
            raise UsageError(f"study {self.study.study_name!r} in {self.url} belongs to a different run ("
                             + "; ".join(diffs) + "); use another --results/--study, or --force to continue anyway")
        return diffs

    def set_environment(self, digest: str, fingerprint: dict[str, Any]) -> None:
        key = f"mneme.env.{digest}"
        if key not in self.study.user_attrs:
            self.study.set_user_attr(key, fingerprint)

    def environment(self, digest: str) -> dict[str, Any]:
        return dict(self.study.user_attrs.get(f"mneme.env.{digest}") or {})

    @property
    def baseline(self) -> dict[str, Any] | None:
        return self.study.user_attrs.get("mneme.baseline")

    def set_baseline(self, record: dict[str, Any]) -> None:
        self.study.set_user_attr("mneme.baseline", record)

    @property
    def retime(self) -> dict[str, Any]:
        return dict(self.study.user_attrs.get("mneme.retime") or {})

    def set_retime(self, data: dict[str, Any]) -> None:
        self.study.set_user_attr("mneme.retime", data)

    # -- trials ------------------------------------------------------------------------------------
    def ask(self, domains: dict[str, Any], encoded: Any) -> optuna.trial.Trial:
        """A new running trial of the point `encoded` over the space's `domains` (or a point queued again by
        `enqueue`, which comes first: the caller compares the trial's params with its own point)."""
        self.study.sampler.pin(encoded)
        return self.study.ask(optuna_distributions(domains))

    def tell(self, trial: optuna.trial.Trial, value: float) -> None:
        """Finish a running trial with its objective; `TrialFinished` when another process failed it first."""
        try:
            self.study.tell(trial, value)
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise TrialFinished(f"trial {trial.number} was finished by another process") from exc

    def fail(self, trial: optuna.trial.Trial) -> None:
        """Finish a running trial as failed (its status attribute says why)."""
        self.study.tell(trial, state=TrialState.FAIL)

    def annotate(self, trial: Any, key: str, value: Any) -> None:
        """Set a user attribute of a trial; `TrialFinished` when it was finished meanwhile."""
        try:
            trial.set_user_attr(key, value)
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise TrialFinished(f"trial {trial.number} was finished by another process") from exc

    @staticmethod
    def trial_id(trial: Any) -> int:
        """The storage's id of a trial (what leases hold)."""
        return trial._trial_id

    def beat(self, trial_id: int, count: int) -> None:
        """Refresh the lease of a running trial (`lease.Lease`): the storage's heartbeat where it has one, else
        the trial's ``mneme.lease`` attribute; `TrialFinished` once the trial was told."""
        storage = self.study._storage
        try:
            if self.has_heartbeat:
                storage.record_heartbeat(trial_id)
            else:
                storage.set_trial_system_attr(trial_id, LEASE_ATTR, {"beat": count, "at": time.time()})
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise TrialFinished(f"trial id {trial_id} was told") from exc

    def enqueue(self, encoded: Any) -> None:
        """Queue a point to run again (a dead or interrupted process's); the next `ask` of any process takes it."""
        self.study.enqueue_trial(dict(encoded))

    def trials(self, states: Iterable[TrialState | str] | None = None) -> list[optuna.trial.FrozenTrial]:
        """The study's trials, optionally of some states (``"RUNNING"``, ``"COMPLETE"``, ``"FAIL"`` or Optuna's)."""
        wanted = tuple(TrialState[s] if isinstance(s, str) else s for s in states) if states else None
        return self.study.get_trials(deepcopy=False, states=wanted)

    def records(self) -> list[TrialRecord]:
        return [TrialRecord.of(t) for t in self.trials()]

    def budget_used(self) -> int:
        """Trials that count against ``--trials``: measured configurations and running experiments (a
        ``cached`` answer from the store, or a proposal waiting for one in flight, spends nothing)."""
        return sum("status" in t.user_attrs and status_of_trial(t) in EVALUATED | {"running"} for t in self.trials())

    def evaluated(self) -> dict[str, TrialRecord]:
        """Grounded hash -> the first finished experiment with that configuration."""
        out: dict[str, TrialRecord] = {}
        for t in self.trials(states=(TrialState.COMPLETE,)):
            if t.user_attrs.get("status") in EVALUATED and t.user_attrs.get("hash"):
                out.setdefault(t.user_attrs["hash"], TrialRecord.of(t))
        return out

    def orphans(self) -> list[optuna.trial.FrozenTrial]:
        """Running trials left behind by a `mneme tune` process on this host that no longer exists."""
        here = socket.gethostname()
        found = []
        for t in self.trials(states=(TrialState.RUNNING,)):
            who = t.user_attrs.get("owner") or {}
            if who.get("host") == here and who.get("pid") != os.getpid() and not _pid_alive(int(who.get("pid", 0))):
                found.append(t)
        return found

    def mark_interrupted(self, trial: optuna.trial.FrozenTrial | optuna.trial.Trial) -> bool:
        """Fail a running trial as ``interrupted``; False when it was finished meanwhile (by another process).

        A trial already found a duplicate of another's (its process stopped before it was told) stays a
        ``duplicate``: its configuration is the other trial's to run.
        """
        storage = self.study._storage
        status = "duplicate" if trial.user_attrs.get("status") == "duplicate" else "interrupted"
        try:
            storage.set_trial_user_attr(trial._trial_id, "status", status)
            return bool(storage.set_trial_state_values(trial._trial_id, TrialState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    @property
    def has_heartbeat(self) -> bool:
        """Whether the storage runs Optuna's heartbeat (then it is the lease of owned trials)."""
        from optuna.storages._heartbeat import is_heartbeat_enabled

        return is_heartbeat_enabled(self.study._storage)

    def fail_stale(self, watch: StaleWatch | None, session: str) -> list[optuna.trial.FrozenTrial]:
        """Fail the running trials of dead processes; returns those this process failed.

        Dead are: processes of this host that no longer exist; processes anywhere whose lease
        lapsed (Optuna's heartbeat where the storage has it, else `watch`).
        """
        failed = [t for t in self.orphans() if self.mark_interrupted(t)]
        if self.has_heartbeat:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(self.study)
            except optuna.exceptions.StorageInternalError as exc:  # e.g. a deadlock with another checker
                log.warning("checking %s for stale trials failed (%s); checking again at the next sync", self.url, exc)
            failed += self._stale_found
            self._stale_found.clear()
        if watch is not None:
            running = self.trials(states=(TrialState.RUNNING,))
            failed += [t for t in watch.stale(running, session) if self.mark_interrupted(t)]
        return failed
