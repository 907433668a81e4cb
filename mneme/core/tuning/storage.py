"""The `Store` protocol: what a result store plugin provides to a tuning run, and how one is chosen.

A store keeps the studies of tuning runs durably: per study, its attributes (the run's
identity, the baseline, the environments) and its trials, each with a state, the encoded
point it ran (`params`), its objective (`value`) and Mneme's attributes (`user_attrs`:
status, configuration, result, owner; `mneme.core.tuning.store` says which). The core never
names a storage library: a plugin answers the hook ``mneme_store_for_url`` with a `Store`
for a storage URL (docs/design/interfaces.md, "Result stores"); the default store's plugin
answers ``sqlite://``, any other database URL and ``journal:PATH``, so every ``study.db``
written so far keeps opening. `mneme.core.tuning.store.ResultStore` is Mneme's view of one.

Trials are named by their `number` (per study, from 0, what users read) and their `id` (the
storage's own, what leases refresh). A trial's attributes are written one at a time while
it runs, so a process killed in between leaves some of them: readers tolerate that.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from mneme.core import plugins
from mneme.core.errors import PluginError, UsageError
from mneme.core.tuning.distributions import Distribution
from mneme.core.tuning.lease import TrialFinished

__all__ = ["NoStoreError", "Store", "StoredTrial", "TrialFinished", "TrialState", "open_store"]


class TrialState(enum.Enum):
    """Where a trial stands: asked and running, finished with a value, or failed (no value)."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    WAITING = "WAITING"  # queued again (`Store.enqueue`), not asked yet
    PRUNED = "PRUNED"  # a state some stores know; Mneme never prunes


def _state(value: TrialState | str) -> TrialState:
    return value if isinstance(value, TrialState) else TrialState[value]


@attrs.frozen
class StoredTrial:
    """One trial as the store read it (a snapshot: a later write shows in a later read)."""

    number: int
    id: int
    state: TrialState = attrs.field(converter=_state)
    params: Mapping[str, Any] = attrs.field(factory=dict)
    value: float | None = None
    user_attrs: Mapping[str, Any] = attrs.field(factory=dict)
    #: The store's own bookkeeping of the trial (e.g. the ``mneme.lease`` it refreshes, see `lease`).
    system_attrs: Mapping[str, Any] = attrs.field(factory=dict)
    started: datetime | None = None
    completed: datetime | None = None


@runtime_checkable
class Store(Protocol):
    """One study in one storage, opened by a plugin's ``mneme_store_for_url``.

    Attributes: `url` (the storage URL it was opened from), `study_name`, `created` (whether this
    opening created the study), `has_heartbeat` (whether the storage keeps a heartbeat of running
    trials itself, which is then their lease: `beat` refreshes it and `expire` fails the lapsed).
    Methods that update a trial raise `TrialFinished` when it was finished meanwhile.
    """

    url: str
    study_name: str
    created: bool
    has_heartbeat: bool

    def study_attrs(self) -> Mapping[str, Any]:
        """The study's attributes (JSON values)."""

    def set_study_attr(self, key: str, value: Any) -> None:
        """Set one study attribute."""

    def ask(self, domains: Mapping[str, Distribution], point: Mapping[str, Any]) -> StoredTrial:
        """A new running trial of `point` over `domains`; a point queued by `enqueue` (by any process)
        comes first, so the caller compares the trial's `params` with its own point."""

    def enqueue(self, point: Mapping[str, Any]) -> None:
        """Queue `point` to be asked again by the next `ask` of any process sharing the study."""

    def set_trial_attr(self, trial_id: int, key: str, value: Any) -> None:
        """Set one user attribute of a running trial."""

    def tell(self, trial_id: int, value: float) -> None:
        """Finish a running trial with its objective (``COMPLETE``)."""

    def fail(self, trial_id: int) -> bool:
        """Finish a running trial as ``FAIL`` (no value); False when it was finished meanwhile."""

    def trials(self, states: Collection[TrialState] | None = None) -> list[StoredTrial]:
        """The study's trials by number, optionally only those in `states`."""

    def beat(self, trial_id: int, count: int) -> None:
        """Refresh the lease of a running trial: the storage's heartbeat where `has_heartbeat`, else the
        system attribute ``mneme.lease`` set to ``{"beat": count, "at": <time>}``."""

    def expire(self) -> list[StoredTrial]:
        """Fail the running trials whose storage heartbeat lapsed; those this call failed ([] without a heartbeat)."""


class NoStoreError(UsageError):
    """No installed plugin keeps tuning results at the storage URL asked for."""


def open_store(url: str, study_name: str | None, *, create: bool, heartbeat: float | None = None) -> Store:
    """The `Store` of study `study_name` at `url`, from the first plugin whose ``mneme_store_for_url`` answers.

    `create`: create the study when absent (else `study_name` must exist; None names the
    storage's only study). `heartbeat`: seconds between lease refreshes, turning on the
    storage's own heartbeat where it has one.
    """
    store = plugins.hook().mneme_store_for_url(url=url, study_name=study_name, create=create, heartbeat=heartbeat)
    if store is None:
        off = sorted(plugins.disabled())
        where = f"no plugin keeps tuning results at storage {url!r}"
        if off:  # the store's plugin may be among them
            raise NoStoreError(
                f"{where}; plugins disabled in this process: {', '.join(off)} (-p no:NAME): enable "
                "the one that provides the store, or install another (`mneme plugins` lists them)"
            )
        raise NoStoreError(
            f"{where}; the default store takes journal:PATH or a database URL like sqlite:///path.db "
            "or postgresql://user@host/db (other stores come with plugins: `mneme plugins`)"
        )
    if not isinstance(store, Store):
        raise PluginError(
            f"a plugin's mneme_store_for_url returned {type(store).__name__} for {url!r}, not a Store "
            "(mneme.core.tuning.storage.Store)"
        )
    return store
