"""The default result store: an Optuna study in an Optuna storage (the ``optuna`` plugin's `Store`).

URLs: any SQLAlchemy URL (``sqlite:///DIR/study.db``, the default; ``postgresql://user@host/db``)
through Optuna's RDB storage, or ``journal:PATH`` (Optuna's journal file, for a shared file
system). Studies written by earlier Mneme versions are these same studies, so they keep
opening and resuming (docs/design/interfaces.md, "Result stores"). Optuna's heartbeat, where
the storage has one (databases), is the lease of running trials; on the journal the lease is
the trial's system attribute ``mneme.lease``.
"""

from __future__ import annotations

import logging
import math
import random
import time
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState

from mneme.core import logs
from mneme.core.errors import UsageError, require
from mneme.core.tuning import distributions
from mneme.core.tuning.lease import LEASE_ATTR, TrialFinished, grace_for
from mneme.core.tuning.storage import StoredTrial, TrialState

log = logging.getLogger(__name__)
logs.third_party("optuna", warns=True)  # the store's library: quiet unless -v (mneme.core.logs)

SCHEMA_RETRIES = 5


def claims(url: str) -> bool:
    """Whether `url` is one of this store's: ``journal:PATH`` or a database URL (``scheme://...``)."""
    return url.startswith("journal:") or "://" in url


def open_storage(url: str, heartbeat: float | None = None, on_stale: Any = None) -> optuna.storages.BaseStorage:
    """An Optuna storage for a URL: ``journal:PATH`` or an SQLAlchemy URL.

    `heartbeat` (seconds) turns on Optuna's heartbeat where the storage has one (databases;
    whole seconds), with a grace period of `lease.grace_for(heartbeat)`; `on_stale(study,
    trial)` is called for each stale trial this process fails.
    """
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len("journal:") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise UsageError(
            f"--storage {url!r} is neither journal:PATH nor a database URL like "
            "postgresql://user@host/db or sqlite:///path.db"
        )
    if url.startswith("postgresql"):
        # psycopg is SQLAlchemy's PostgreSQL driver here; it comes with the postgres extra.
        require(
            "psycopg2" if url.startswith("postgresql+psycopg2") else "psycopg",
            "postgres",
            f"storage {url.split('://')[0]}://",
        )
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
        _sqlite_write_ahead_log()
    beat: dict[str, Any] = {}
    if heartbeat:
        interval = max(1, math.ceil(heartbeat))
        beat = {
            "heartbeat_interval": interval,
            "grace_period": max(1, math.ceil(grace_for(interval))),
            "heartbeat_stale_trial_callback": on_stale,
        }
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


def optuna_distribution(domain: distributions.Distribution) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution a study records for a parameter's domain (`mneme.core.tuning.distributions`)."""
    if isinstance(domain, distributions.Categorical):
        return optuna.distributions.CategoricalDistribution(list(domain.choices))
    if isinstance(domain, distributions.IntRange):
        return optuna.distributions.IntDistribution(domain.low, domain.high, step=domain.step)
    if isinstance(domain, distributions.FloatRange):
        return optuna.distributions.FloatDistribution(domain.low, domain.high, log=domain.log)
    raise TypeError(f"no Optuna distribution for {domain!r}")


def optuna_distributions(domains: Mapping[str, distributions.Distribution]) -> dict[str, Any]:
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


_STATES = {state: TrialState[state.name] for state in OptunaState}


def stored(trial: optuna.trial.FrozenTrial) -> StoredTrial:
    """Mneme's snapshot of an Optuna trial (its mappings are the storage's: read, never written)."""
    state = _STATES[trial.state]
    values = trial.values if state is TrialState.COMPLETE else None  # (`value` re-checks the objectives each read)
    return StoredTrial(
        number=trial.number,
        id=trial._trial_id,
        state=state,
        params=trial.params,
        value=values[0] if values else None,
        user_attrs=trial.user_attrs,
        system_attrs=trial.system_attrs,
        started=trial.datetime_start,
        completed=trial.datetime_complete,
    )


def _finished(trial_id: int) -> TrialFinished:
    return TrialFinished(f"trial id {trial_id} was finished by another process")


class OptunaStore:
    """One Optuna study as a `mneme.core.tuning.storage.Store`."""

    def __init__(self, study: optuna.Study, url: str, *, created: bool = False, stale_found: list | None = None):
        self.study = study
        self.url = url
        self.study_name = study.study_name
        self.created = created
        self._stale_found = stale_found if stale_found is not None else []  # filled by Optuna's callback

    @classmethod
    def open(cls, url: str, study_name: str | None, *, create: bool, heartbeat: float | None = None) -> OptunaStore:
        """The study `study_name` at `url` (see `mneme.core.tuning.storage.open_store`)."""
        logs.quiet_third_party(
            "optuna"
        )  # Optuna reset its logger to INFO when imported; -q/-v decide (mneme.core.logs)
        found: list = []
        storage = open_storage(url, heartbeat, lambda study, trial: found.append(trial))
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        if create:
            if study_name is None:
                raise UsageError(f"storage {url}: a new study needs a name")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study = optuna.create_study(
                    storage=storage,
                    study_name=study_name,
                    sampler=_PinnedSampler(),
                    direction="minimize",
                    load_if_exists=True,
                )
            return cls(study, url, created=study_name not in names, stale_found=found)
        if study_name is None:
            if len(names) != 1:
                raise UsageError(f"storage {url} holds {len(names)} studies ({', '.join(names) or 'none'}); name one")
            study_name = names[0]
        if study_name not in names:
            raise UsageError(f"storage {url} has no study {study_name!r}; it holds: {', '.join(names) or 'none'}")
        return cls(
            optuna.load_study(storage=storage, study_name=study_name, sampler=_PinnedSampler()), url, stale_found=found
        )

    @property
    def has_heartbeat(self) -> bool:
        from optuna.storages._heartbeat import is_heartbeat_enabled

        return is_heartbeat_enabled(self.study._storage)

    # -- study attributes --------------------------------------------------------------------------
    def study_attrs(self) -> Mapping[str, Any]:
        return self.study.user_attrs

    def set_study_attr(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)

    # -- trials --------------------------------------------------------------------------------------
    def ask(self, domains: Mapping[str, distributions.Distribution], point: Mapping[str, Any]) -> StoredTrial:
        self.study.sampler.pin(point)
        trial = self.study.ask(optuna_distributions(domains))
        return StoredTrial(
            number=trial.number,
            id=trial._trial_id,
            state=TrialState.RUNNING,
            params=dict(trial.params),
            started=trial.datetime_start,
        )

    def enqueue(self, point: Mapping[str, Any]) -> None:
        self.study.enqueue_trial(dict(point))

    def set_trial_attr(self, trial_id: int, key: str, value: Any) -> None:
        try:
            self.study._storage.set_trial_user_attr(trial_id, key, value)
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise _finished(trial_id) from exc

    def tell(self, trial_id: int, value: float) -> None:
        # The study's own tell would re-read the trial and call the pinned sampler's no-op after_trial;
        # the storage's update is what it does, and it refuses a trial finished meanwhile.
        state, values = (OptunaState.COMPLETE, [float(value)]) if math.isfinite(value) else (OptunaState.FAIL, None)
        try:
            self.study._storage.set_trial_state_values(trial_id, state, values)
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise _finished(trial_id) from exc

    def fail(self, trial_id: int) -> bool:
        try:
            return bool(self.study._storage.set_trial_state_values(trial_id, OptunaState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    def trials(self, states: Collection[TrialState] | None = None) -> list[StoredTrial]:
        wanted = tuple(OptunaState[s.name] for s in states) if states else None
        return [stored(t) for t in self.study.get_trials(deepcopy=False, states=wanted)]

    # -- leases --------------------------------------------------------------------------------------
    def beat(self, trial_id: int, count: int) -> None:
        storage = self.study._storage
        try:
            if self.has_heartbeat:
                storage.record_heartbeat(trial_id)
            else:
                storage.set_trial_system_attr(trial_id, LEASE_ATTR, {"beat": count, "at": time.time()})
        except optuna.exceptions.UpdateFinishedTrialError as exc:
            raise _finished(trial_id) from exc

    def expire(self) -> list[StoredTrial]:
        if not self.has_heartbeat:
            return []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(self.study)
        except optuna.exceptions.StorageInternalError as exc:  # e.g. a deadlock with another checker
            log.warning("checking %s for stale trials failed (%s); checking again at the next sync", self.url, exc)
        found = [stored(t) for t in self._stale_found]
        self._stale_found.clear()
        return found
