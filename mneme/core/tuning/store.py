"""The result store: every experiment of a tuning run, durably, in a study of a `Store`.

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
without a heartbeat of their own (the journal). The trial's value is the objective, minimized: the median time in seconds, or a penalty
(a multiple of the baseline's time) for failed, unverified and infeasible points.
Study attributes: ``mneme`` (kernel, space and environment identity, checked on resume),
``mneme.env.<hash>``, ``mneme.baseline``, ``mneme.retime``.

Storage: ``sqlite:///DIR/study.db`` in the results folder by default; any SQLAlchemy URL
(``postgresql://user@host/db``); or ``journal:PATH`` (a journal file, for a shared file
system): the default store plugin's URLs (`mneme.core.tuning.storage`). Several processes may share one study through the latter two. Trials that a
dead process left running are failed (status ``interrupted``) by whoever notices: at once
when that process ran on this host, else when its lease lapses (see `lease`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from mneme.core.errors import UsageError
from mneme.core.tuning.lease import StaleWatch, TrialFinished
from mneme.core.tuning.storage import Store, StoredTrial, TrialState, open_store
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

# 2: trials' configurations carry a schema (docs/design/parameters.md); schema-1 stores still load.
STORE_SCHEMA = 2
COUNTED = frozenset({"ok", "failed", "unverified", "cached"})  # statuses of a finished, answered trial
EVALUATED = frozenset({"ok", "failed", "unverified"})  # statuses that ran an experiment
DEFAULT_DB = "study.db"


@attrs.frozen
class TrialRecord:
    """One trial as Mneme sees it (a flattened view of a `StoredTrial`)."""

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
    def of(cls, trial: StoredTrial) -> TrialRecord:
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
            hash=attrs_.get("hash")
            or (ExperimentConfiguration.from_dict(attrs_["config"]).hash() if attrs_.get("config") else ""),
            result=result,
            owner=attrs_.get("owner", {}),
            env=attrs_.get("env") or (attrs_.get("owner") or {}).get("env", ""),
            cached_from=attrs_.get("cached_from"),
            start=(result or {}).get("start_time") or (trial.started.isoformat() if trial.started else ""),
            end=(result or {}).get("end_time") or (trial.completed.isoformat() if trial.completed else ""),
        )


def status_of_trial(trial: StoredTrial) -> str:
    """Mneme's status of a stored trial, from its "status" attribute and its state.

    The attribute is written just before the trial is told, so a process that dies in between
    leaves a running trial that already says "ok": it is still "running", and once the storage's
    heartbeat check (which cannot say why) or another process fails it, "interrupted", as is a
    trial failed before it had any status.
    """
    status = trial.user_attrs.get(
        "status", "running" if trial.state in (TrialState.RUNNING, TrialState.FAIL) else trial.state.name.lower()
    )
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


class ResultStore:
    """One study of a `Store`, with Mneme's view of its trials and attributes."""

    def __init__(self, backing: Store):
        self.backing = backing
        self.url = backing.url
        self.study_name = backing.study_name

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def create_or_load(cls, url: str, study_name: str, heartbeat: float | None = None) -> tuple[ResultStore, bool]:
        """The study (created when absent, minimizing) and whether it existed before.

        `heartbeat` (seconds): the storage's own heartbeat is on, where it has one.
        """
        backing = open_store(url, study_name, create=True, heartbeat=heartbeat)
        return cls(backing), not backing.created

    @classmethod
    def load(cls, url: str, study_name: str | None = None) -> ResultStore:
        """An existing study (`study_name` None: the storage's only one)."""
        return cls(open_store(url, study_name, create=False))

    # -- study attributes ------------------------------------------------------------------------
    def _attr(self, key: str) -> Any:
        return self.backing.study_attrs().get(key)

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._attr("mneme") or {})

    def set_meta(self, meta: dict[str, Any]) -> None:
        self.backing.set_study_attr("mneme", {"schema": STORE_SCHEMA, **meta})

    def check_meta(self, expected: dict[str, Any], *, force: bool) -> list[str]:
        """Differences between the stored identity and this run's; raise unless `force`."""
        stored = self.meta
        if stored.get("schema", STORE_SCHEMA) > STORE_SCHEMA:
            raise UsageError(
                f"study {self.study_name!r} was written by a newer Mneme (store schema "
                f"{stored['schema']}); upgrade Mneme to continue it"
            )
        labels = {
            "static_hash": "kernel",
            "dynamic_hash": "kernel instance",
            "space": "search space",
            "env": "environment (device, driver, toolchain)",
            "cache": "cache state of timed runs (--cache)",
            "timer": "timer of timed runs (--timer)",
        }
        diffs = [
            f"{labels[k]}: stored {stored.get(k)!r}, now {expected.get(k)!r}"
            for k in labels
            if k in stored and stored.get(k) != expected.get(k)
        ]
        if diffs and not force:
            raise UsageError(
                f"study {self.study_name!r} in {self.url} belongs to a different run ("
                + "; ".join(diffs)
                + "); use another --results/--study, or --force to continue anyway"
            )
        return diffs

    def set_environment(self, digest: str, fingerprint: dict[str, Any]) -> None:
        key = f"mneme.env.{digest}"
        if key not in self.backing.study_attrs():
            self.backing.set_study_attr(key, fingerprint)

    def environment(self, digest: str) -> dict[str, Any]:
        return dict(self._attr(f"mneme.env.{digest}") or {})

    @property
    def baseline(self) -> dict[str, Any] | None:
        return self._attr("mneme.baseline")

    def set_baseline(self, record: dict[str, Any]) -> None:
        self.backing.set_study_attr("mneme.baseline", record)

    @property
    def retime(self) -> dict[str, Any]:
        return dict(self._attr("mneme.retime") or {})

    def set_retime(self, data: dict[str, Any]) -> None:
        self.backing.set_study_attr("mneme.retime", data)

    # -- trials ------------------------------------------------------------------------------------
    def ask(self, domains: Mapping[str, Any], encoded: Any) -> StoredTrial:
        """A new running trial of the point `encoded` over the space's `domains` (or a point queued again by
        `enqueue`, which comes first: the caller compares the trial's params with its own point)."""
        return self.backing.ask(domains, dict(encoded))

    def tell(self, trial: StoredTrial, value: float) -> None:
        """Finish a running trial with its objective; `TrialFinished` when another process failed it first."""
        self.backing.tell(trial.id, value)

    def fail(self, trial: StoredTrial) -> None:
        """Finish a running trial as failed (its status attribute says why)."""
        if not self.backing.fail(trial.id):
            raise TrialFinished(f"trial {trial.number} was finished by another process")

    def annotate(self, trial: StoredTrial, key: str, value: Any) -> None:
        """Set a user attribute of a trial; `TrialFinished` when it was finished meanwhile."""
        self.backing.set_trial_attr(trial.id, key, value)

    @staticmethod
    def trial_id(trial: StoredTrial) -> int:
        """The storage's id of a trial (what leases hold)."""
        return trial.id

    def beat(self, trial_id: int, count: int) -> None:
        """Refresh the lease of a running trial (`lease.Lease`); `TrialFinished` once the trial was told."""
        self.backing.beat(trial_id, count)

    def enqueue(self, encoded: Any) -> None:
        """Queue a point to run again (a dead or interrupted process's); the next `ask` of any process takes it."""
        self.backing.enqueue(dict(encoded))

    def trials(self, states: Iterable[TrialState | str] | None = None) -> list[StoredTrial]:
        """The study's trials, optionally of some states (``"RUNNING"``, ``"COMPLETE"``, ``"FAIL"`` or `TrialState`)."""
        wanted = {TrialState[s] if isinstance(s, str) else s for s in states} if states else None
        return self.backing.trials(wanted)

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

    def orphans(self) -> list[StoredTrial]:
        """Running trials left behind by a `mneme tune` process on this host that no longer exists."""
        here = socket.gethostname()
        found = []
        for t in self.trials(states=(TrialState.RUNNING,)):
            who = t.user_attrs.get("owner") or {}
            if who.get("host") == here and who.get("pid") != os.getpid() and not _pid_alive(int(who.get("pid", 0))):
                found.append(t)
        return found

    def mark_interrupted(self, trial: StoredTrial) -> bool:
        """Fail a running trial as ``interrupted``; False when it was finished meanwhile (by another process).

        A trial already found a duplicate of another's (its process stopped before it was told) stays a
        ``duplicate``: its configuration is the other trial's to run.
        """
        status = "duplicate" if trial.user_attrs.get("status") == "duplicate" else "interrupted"
        try:
            self.backing.set_trial_attr(trial.id, "status", status)
        except TrialFinished:
            return False
        return self.backing.fail(trial.id)

    @property
    def has_heartbeat(self) -> bool:
        """Whether the storage keeps a heartbeat of its own (then it is the lease of owned trials)."""
        return self.backing.has_heartbeat

    def fail_stale(self, watch: StaleWatch | None, session: str) -> list[StoredTrial]:
        """Fail the running trials of dead processes; returns those this process failed.

        Dead are: processes of this host that no longer exist; processes anywhere whose lease
        lapsed (the storage's heartbeat where it has one, else `watch`).
        """
        failed = [t for t in self.orphans() if self.mark_interrupted(t)]
        if self.has_heartbeat:
            failed += self.backing.expire()
        if watch is not None:
            running = self.trials(states=(TrialState.RUNNING,))
            failed += [t for t in watch.stale(running, session) if self.mark_interrupted(t)]
        return failed
