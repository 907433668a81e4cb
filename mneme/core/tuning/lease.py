"""Leases on running trials: a live tuner keeps its trials fresh, a dead one's trials go stale.

A `mneme tune` process that dies (SIGKILL, a lost node) leaves its trials RUNNING in a
shared study. Every live process refreshes the lease of the trials it runs (`Lease`) every
`interval` seconds; any process that sees a trial's lease unrefreshed for the grace period
fails it, and re-runs its configuration (the session does that).

Where the storage has a heartbeat of its own (database storages: SQLite, PostgreSQL, ...) the
lease is that heartbeat, timed by the database server's clock, and the store finds the stale
ones (`ResultStore.fail_stale`). Elsewhere (the journal file) the lease is the trial's system attribute
``mneme.lease``, a beat counter the owner rewrites; `StaleWatch` calls a trial stale when it
has watched that attribute stay the same for the grace period by its own clock, so the
clocks of different hosts need not agree. Each owner names its grace in the trial's
``owner`` attribute; a trial that never named an owner gets the watcher's grace.

Where the study is an SQLite file (a results folder's ``study.db``, or ``--storage sqlite:///...``)
every tuner on it is on this host or shares its file locks, and `Tuners` knows more, at once:
each tuner registers in a folder beside the file, holding an exclusive ``flock`` on its own entry
for its life (the kernel lets go when the process dies, however it dies), so which tuners are alive
is certain; and they take turns on the folder's lock for every ask (check the budget, ask the study,
claim the trial). A trial whose owner is not alive, or that has no owner while one holds the lock
(a live tuner names itself before it lets go), belongs to a dead process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LEASE_ATTR = "mneme.lease"
GRACE_FACTOR = 3  # missed beats before a trial counts as dead: survives a slow beat or two


class TrialFinished(Exception):
    """The trial was finished meanwhile (told here, or failed as stale by another process): it takes no update."""


def grace_for(interval: float) -> float:
    """The grace period of a heartbeat interval."""
    return GRACE_FACTOR * interval


class Lease:
    """The live side: refreshes the lease of this process's running trials from a thread.

    `beat(trial_id, count)` is the store's refresh (`ResultStore.beat`), raising `TrialFinished` for a
    trial told meanwhile; `at_hold`: beat at once when a trial is held (a storage heartbeat, where a
    trial with no beat yet is never stale). `hold(trial_id)` when a trial is asked,
    `release(trial_id)` once it is told; `close()` at the end.
    """

    def __init__(self, beat: Callable[[int, int], None], interval: float, *, at_hold: bool):
        self.refresh = beat
        self.interval = interval
        self.at_hold = at_hold
        self._held: set[int] = set()
        self._beats = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mneme-lease", daemon=True)
        self._thread.start()

    def hold(self, trial_id: int) -> None:
        with self._lock:
            self._held.add(trial_id)
        if self.at_hold:
            self._beat(trial_id)

    def release(self, trial_id: int) -> None:
        with self._lock:
            self._held.discard(trial_id)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                held = sorted(self._held)
            self._beats += 1
            for trial_id in held:
                self._beat(trial_id)

    def _beat(self, trial_id: int) -> None:
        try:
            self.refresh(trial_id, self._beats)
        except TrialFinished:
            self.release(trial_id)  # told meanwhile (by us, or failed as stale by another process)
        except Exception as exc:  # a storage hiccup (NFS, network): the next beat tries again
            log.warning("refreshing the lease of trial id %d failed: %s", trial_id, exc)


class StaleWatch:
    """The observer side: which running trials of other processes stopped refreshing their lease.

    `default_grace` applies to trials that never named an owner (their process died right
    after asking). With `owned=False` (the storage has a heartbeat of its own, which covers
    owned trials) only those are watched.
    """

    def __init__(self, default_grace: float, *, owned: bool = True):
        self.default_grace = default_grace
        self.owned = owned
        self._seen: dict[int, tuple[str, float]] = {}  # trial id -> (lease as last seen, since when)

    def stale(self, running: Iterable[Any], session: str) -> list[Any]:
        """Of the store's `running` trials (`StoredTrial`s: `id`, `user_attrs`, `system_attrs`), those whose lease lapsed."""
        now = time.monotonic()
        found, watched = [], set()
        for trial in running:
            owner = trial.user_attrs.get("owner")
            if owner is not None and owner.get("session") == session:
                continue
            if owner is None:
                grace = self.default_grace
            elif not self.owned:
                continue
            else:
                grace = (owner.get("lease") or {}).get("grace")
                if not grace:
                    continue  # its process keeps no lease (--heartbeat 0, or an older Mneme)
            mark = json.dumps([owner is not None, trial.system_attrs.get(LEASE_ATTR)], sort_keys=True, default=str)
            watched.add(trial.id)
            previous = self._seen.get(trial.id)
            if previous is None or previous[0] != mark:
                self._seen[trial.id] = (mark, now)
            elif now - previous[1] > float(grace):
                found.append(trial)
        self._seen = {k: v for k, v in self._seen.items() if k in watched}
        return found


def describe_owner(trial: Any) -> str:
    owner: dict[str, Any] = trial.user_attrs.get("owner") or {}
    if not owner:
        return "a process that never named itself"
    return f"pid {owner.get('pid')} on {owner.get('host')}"


class Tuners:
    """The live tuners of one study file, registered in `folder` (made when absent), and their lock.

    `register(record)` enters this process (``session``: its session id) with what others may read of
    it (pid, host, study); `others()` the live entries of other processes (a dead one's entry is removed);
    `lock()` the turn, re-entrant within this process; `close()` leaves. Entries are looked at and made
    only under the lock, so an entry is never seen before its owner holds it.
    """

    LOCK = "lock"
    SUFFIX = ".tuner"

    def __init__(self, folder: Path, session: str):
        self.folder = Path(folder)
        self.session = session
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.folder / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        self._entry_fd: int | None = None
        self._depth = 0
        self._mutex = threading.RLock()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's lock (blocking: others hold it for one ask at a time)."""
        with self._mutex:
            if self._depth == 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def register(self, record: dict[str, Any]) -> None:
        with self.lock():
            path = self.folder / f"{self.session}{self.SUFFIX}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh session id: nobody else has it
            os.write(fd, json.dumps({**record, "session": self.session}).encode())
            self._entry_fd = fd

    def others(self) -> dict[str, dict[str, Any]]:
        """Session id -> record of every other live tuner of the study."""
        found = {}
        with self.lock():
            for path in sorted(self.folder.glob(f"*{self.SUFFIX}")):
                session = path.name[: -len(self.SUFFIX)]
                if session == self.session:
                    continue
                record = _live_entry(path)
                if record is None:
                    path.unlink(missing_ok=True)  # its process is gone (killed, or ended before it left)
                else:
                    found[session] = record
        return found

    def close(self) -> None:
        with self.lock():
            if self._entry_fd is not None:
                (self.folder / f"{self.session}{self.SUFFIX}").unlink(missing_ok=True)
                os.close(self._entry_fd)
                self._entry_fd = None
        os.close(self._lock_fd)


def _live_entry(path: Path) -> dict[str, Any] | None:
    """The record of a tuner's entry while its process holds it; None when nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            text = os.read(fd, 1 << 16)
            try:
                return dict(json.loads(text))
            except ValueError:
                return {}
        return None  # we could lock it: its owner is gone
    finally:
        os.close(fd)


def tuners_folder(url: str) -> Path | None:
    """Where the tuners of a storage register: beside its SQLite file; None for other storages."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    path = url[len(prefix) :].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    db = Path(path)
    return db.parent / f".{db.name}.tuners"
