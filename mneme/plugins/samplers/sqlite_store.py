"""The default store of an SQLite file, without Optuna on the tuning path: Optuna's study tables through sqlite3.

Why: opening a study through Optuna's RDB storage imports Optuna, SQLAlchemy and Alembic and
sets up or checks the schema (1.3 s on the H100 host, 1.5-2 s on the CPU machine), the longest
step of a short `mneme tune` call (issue 39, point 5). This store keeps the same study in the
same file, with the standard library: the tables, columns and values Optuna's RDB storage
writes (schema version `SCHEMA_VERSION`, Alembic revision `ALEMBIC_REVISION`: Optuna 3.2 to
5.x), so a ``study.db`` written here opens in Optuna (``optuna.load_study``, optuna-dashboard,
`OptunaStore`) and one Optuna wrote opens here. A file of another schema revision is left to
`OptunaStore` (`open` returns None), which can upgrade or refuse it.

What Optuna's storage does that a tuning run relies on, this store does the same way: a trial's
number is its rank in the study; a point queued by `enqueue` is a ``WAITING`` trial whose
system attribute ``fixed_params`` holds it, and the next `ask` of any process takes the oldest;
a finished trial takes no update (`TrialFinished`); with a heartbeat, running trials' beats go
to ``trial_heartbeats`` timed by SQLite's clock, and `expire` fails those older than the grace
period. Writes are transactions that take the write lock first (``BEGIN IMMEDIATE``), so
processes sharing the file see each ask, tell and claim whole.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from mneme.core.errors import UsageError
from mneme.core.tuning import distributions
from mneme.core.tuning.lease import LEASE_ATTR, TrialFinished, grace_for
from mneme.core.tuning.storage import StoredTrial, TrialState

SCHEMA_VERSION = 12  # Optuna's `version_info.schema_version` since 3.2
ALEMBIC_REVISION = "v3.2.0.a"  # Optuna's last schema migration (3.2 to 5.x)
PREFIX = "sqlite:///"
FINISHED = ("COMPLETE", "FAIL", "PRUNED")

# The tables of Optuna's RDB storage, as its storage creates them (names, columns, keys), so that Optuna
# reads a file created here without migrating it.
_TABLES = """
CREATE TABLE studies (study_id INTEGER NOT NULL PRIMARY KEY, study_name VARCHAR(512) NOT NULL);
CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name);
CREATE TABLE version_info (version_info_id INTEGER NOT NULL PRIMARY KEY, schema_version INTEGER,
  library_version VARCHAR(256), CHECK (version_info_id=1));
CREATE TABLE study_directions (study_direction_id INTEGER NOT NULL PRIMARY KEY, direction VARCHAR(8) NOT NULL,
  study_id INTEGER NOT NULL REFERENCES studies (study_id), objective INTEGER NOT NULL, UNIQUE (study_id, objective));
CREATE TABLE study_user_attributes (study_user_attribute_id INTEGER NOT NULL PRIMARY KEY,
  study_id INTEGER REFERENCES studies (study_id), "key" VARCHAR(512), value_json TEXT, UNIQUE (study_id, "key"));
CREATE TABLE study_system_attributes (study_system_attribute_id INTEGER NOT NULL PRIMARY KEY,
  study_id INTEGER REFERENCES studies (study_id), "key" VARCHAR(512), value_json TEXT, UNIQUE (study_id, "key"));
CREATE TABLE trials (trial_id INTEGER NOT NULL PRIMARY KEY, number INTEGER,
  study_id INTEGER REFERENCES studies (study_id), state VARCHAR(8) NOT NULL, datetime_start DATETIME,
  datetime_complete DATETIME);
CREATE INDEX ix_trials_study_id ON trials (study_id);
CREATE TABLE trial_user_attributes (trial_user_attribute_id INTEGER NOT NULL PRIMARY KEY,
  trial_id INTEGER REFERENCES trials (trial_id), "key" VARCHAR(512), value_json TEXT, UNIQUE (trial_id, "key"));
CREATE TABLE trial_system_attributes (trial_system_attribute_id INTEGER NOT NULL PRIMARY KEY,
  trial_id INTEGER REFERENCES trials (trial_id), "key" VARCHAR(512), value_json TEXT, UNIQUE (trial_id, "key"));
CREATE TABLE trial_params (param_id INTEGER NOT NULL PRIMARY KEY, trial_id INTEGER REFERENCES trials (trial_id),
  param_name VARCHAR(512), param_value FLOAT, distribution_json TEXT, UNIQUE (trial_id, param_name));
CREATE TABLE trial_values (trial_value_id INTEGER NOT NULL PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials (trial_id), objective INTEGER NOT NULL, value FLOAT,
  value_type VARCHAR(7) NOT NULL, UNIQUE (trial_id, objective));
CREATE TABLE trial_intermediate_values (trial_intermediate_value_id INTEGER NOT NULL PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials (trial_id), step INTEGER NOT NULL, intermediate_value FLOAT,
  intermediate_value_type VARCHAR(7) NOT NULL, UNIQUE (trial_id, step));
CREATE TABLE trial_heartbeats (trial_heartbeat_id INTEGER NOT NULL PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials (trial_id), heartbeat DATETIME NOT NULL, UNIQUE (trial_id));
CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, CONSTRAINT alembic_version_pkc PRIMARY KEY
  (version_num));
"""


def claims(url: str) -> bool:
    """Whether `url` is an SQLite file this store opens: ``sqlite:///PATH``, no driver and no query."""
    return url.startswith(PREFIX) and "?" not in url and len(url) > len(PREFIX)


def _now() -> str:
    return datetime.datetime.now().isoformat(sep=" ", timespec="microseconds")  # as Optuna stores datetimes


def _library_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("optuna")
    except metadata.PackageNotFoundError:
        return ""


def _distribution_json(domain: distributions.Distribution) -> str:
    """Optuna's JSON of the distribution of a domain (`optuna_store.optuna_distribution`, as Optuna writes it)."""
    if isinstance(domain, distributions.Categorical):
        return json.dumps({"name": "CategoricalDistribution", "attributes": {"choices": list(domain.choices)}})
    if isinstance(domain, distributions.IntRange):
        attributes = {"log": False, "step": domain.step, "low": domain.low, "high": domain.high}
        return json.dumps({"name": "IntDistribution", "attributes": attributes})
    if isinstance(domain, distributions.FloatRange):
        attributes = {"step": None, "low": domain.low, "high": domain.high, "log": domain.log}
        return json.dumps({"name": "FloatDistribution", "attributes": attributes})
    raise TypeError(f"no stored distribution for {domain!r}")


def _internal(domain: distributions.Distribution, value: Any) -> float:
    """A parameter's value as the ``param_value`` column keeps it: a categorical's index, else the number."""
    if isinstance(domain, distributions.Categorical):
        for index, choice in enumerate(domain.choices):
            if choice == value and type(choice) is type(value):
                return float(index)
        for index, choice in enumerate(domain.choices):
            if choice == value:
                return float(index)
        raise UsageError(f"value {value!r} is not one of the choices {list(domain.choices)!r}")
    return float(value)


def _external(param_value: float, distribution_json: str) -> Any:
    data = json.loads(distribution_json)
    name, attributes = data.get("name"), data.get("attributes") or {}
    if name == "CategoricalDistribution":
        return attributes["choices"][int(param_value)]
    if name in ("IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution"):
        return int(param_value)
    return float(param_value)


def _value(value: float | None, kind: str) -> float | None:
    if kind == "INF_POS":
        return math.inf
    if kind == "INF_NEG":
        return -math.inf
    return value


def _when(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text) if text else None


def _random_value(domain: distributions.Distribution) -> Any:
    """A dimension a point leaves out: drawn at random (as `OptunaStore`'s pinned sampler does)."""
    import random

    if isinstance(domain, distributions.Categorical):
        return random.choice(domain.choices)
    if isinstance(domain, distributions.IntRange):
        return random.randrange(domain.low, domain.high + 1, domain.step)
    return random.uniform(domain.low, domain.high)


class SqliteStore:
    """One study of an SQLite file in Optuna's tables, as a `mneme.core.tuning.storage.Store`."""

    def __init__(self, connection: sqlite3.Connection, url: str, study_id: int, study_name: str, **kwargs: Any):
        self._db = connection
        self._lock = threading.RLock()  # the lease's thread beats through the same connection
        self.url = url
        self.study_id = study_id
        self.study_name = study_name
        self.created: bool = kwargs.get("created", False)
        self.heartbeat: float | None = kwargs.get("heartbeat")

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def open(
        cls, url: str, study_name: str | None, *, create: bool, heartbeat: float | None = None
    ) -> SqliteStore | None:
        """The study `study_name` in the file of `url` (see `mneme.core.tuning.storage.open_store`); None when
        the file holds tables of another schema revision than Optuna's `ALEMBIC_REVISION` (`OptunaStore` opens it).
        """
        path = Path(url[len(PREFIX) :])
        if not create and not path.is_file():
            raise UsageError(f"storage {url}: no such file")
        try:
            connection = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")  # as `optuna_store`: a commit survives a killed process
            connection.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open storage {url!r}: {exc}") from exc
        store = cls(connection, url, 0, study_name or "", heartbeat=heartbeat)
        if not store._schema(create):
            connection.close()
            return None
        with store._write() as db:
            rows = db.execute("SELECT study_id, study_name FROM studies ORDER BY study_id").fetchall()
            names = {name: study for study, name in rows}
            if create:
                if study_name is None:
                    raise UsageError(f"storage {url}: a new study needs a name")
                if study_name not in names:
                    cursor = db.execute("INSERT INTO studies (study_name) VALUES (?)", (study_name,))
                    names[study_name] = int(cursor.lastrowid)
                    db.execute(
                        "INSERT INTO study_directions (direction, study_id, objective) VALUES ('MINIMIZE', ?, 0)",
                        (names[study_name],),
                    )
                    store.created = True
            elif study_name is None:
                if len(names) != 1:
                    raise UsageError(
                        f"storage {url} holds {len(names)} studies ({', '.join(names) or 'none'}); name one"
                    )
                study_name = next(iter(names))
            elif study_name not in names:
                raise UsageError(f"storage {url} has no study {study_name!r}; it holds: {', '.join(names) or 'none'}")
        store.study_name = study_name
        store.study_id = names[study_name]
        return store

    def _schema(self, create: bool) -> bool:
        """Create Optuna's tables in an empty file; whether the file's tables are the revision this store writes."""
        with self._write() as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "studies" not in tables:
                if not create:
                    raise UsageError(f"storage {self.url} holds no study")
                for statement in _TABLES.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, ?, ?)",
                    (SCHEMA_VERSION, _library_version()),
                )
                db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (ALEMBIC_REVISION,))
                return True
            if "alembic_version" not in tables or "version_info" not in tables:
                return False
            revision = db.execute("SELECT version_num FROM alembic_version").fetchall()
            return [r[0] for r in revision] == [ALEMBIC_REVISION]

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the file's write lock from its start (no upgrade deadlock)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: a consistent snapshot across its queries."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    @property
    def has_heartbeat(self) -> bool:
        return bool(self.heartbeat)

    # -- study attributes --------------------------------------------------------------------------
    def study_attrs(self) -> Mapping[str, Any]:
        with self._read() as db:
            rows = db.execute(
                'SELECT "key", value_json FROM study_user_attributes WHERE study_id = ?', (self.study_id,)
            ).fetchall()
        return {key: json.loads(value) for key, value in rows}

    def set_study_attr(self, key: str, value: Any) -> None:
        with self._write() as db:
            db.execute(
                'INSERT INTO study_user_attributes (study_id, "key", value_json) VALUES (?, ?, ?) '
                'ON CONFLICT (study_id, "key") DO UPDATE SET value_json = excluded.value_json',
                (self.study_id, key, json.dumps(value)),
            )

    # -- trials --------------------------------------------------------------------------------------
    def ask(self, domains: Mapping[str, distributions.Distribution], point: Mapping[str, Any]) -> StoredTrial:
        now = _now()
        with self._write() as db:
            waiting = db.execute(
                "SELECT trial_id, number FROM trials WHERE study_id = ? AND state = 'WAITING' ORDER BY trial_id LIMIT 1",
                (self.study_id,),
            ).fetchone()
            if waiting is not None:
                trial_id, number = waiting
                db.execute(
                    "UPDATE trials SET state = 'RUNNING', datetime_start = ? WHERE trial_id = ?", (now, trial_id)
                )
                fixed = db.execute(
                    "SELECT value_json FROM trial_system_attributes WHERE trial_id = ? AND \"key\" = 'fixed_params'",
                    (trial_id,),
                ).fetchone()
                point = {**point, **(json.loads(fixed[0]) if fixed else {})}
            else:
                (number,) = db.execute("SELECT COUNT(*) FROM trials WHERE study_id = ?", (self.study_id,)).fetchone()
                cursor = db.execute(
                    "INSERT INTO trials (number, study_id, state, datetime_start) VALUES (?, ?, 'RUNNING', ?)",
                    (number, self.study_id, now),
                )
                trial_id = int(cursor.lastrowid)
            params = {}
            for name, domain in domains.items():
                value = point[name] if name in point else _random_value(domain)
                db.execute(
                    "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?, ?, ?, ?)",
                    (trial_id, name, _internal(domain, value), _distribution_json(domain)),
                )
                params[name] = value
        return StoredTrial(number=int(number), id=trial_id, state=TrialState.RUNNING, params=params, started=_when(now))

    def enqueue(self, point: Mapping[str, Any]) -> None:
        with self._write() as db:
            (number,) = db.execute("SELECT COUNT(*) FROM trials WHERE study_id = ?", (self.study_id,)).fetchone()
            cursor = db.execute(
                "INSERT INTO trials (number, study_id, state) VALUES (?, ?, 'WAITING')", (number, self.study_id)
            )
            db.execute(
                "INSERT INTO trial_system_attributes (trial_id, \"key\", value_json) VALUES (?, 'fixed_params', ?)",
                (cursor.lastrowid, json.dumps(dict(point))),
            )

    def _updatable(self, db: sqlite3.Connection, trial_id: int) -> None:
        row = db.execute("SELECT state FROM trials WHERE trial_id = ?", (trial_id,)).fetchone()
        if row is None:
            raise KeyError(f"no trial with id {trial_id}")
        if row[0] in FINISHED:
            raise TrialFinished(f"trial id {trial_id} was finished by another process")

    def _set_attr(self, table: str, trial_id: int, key: str, value: Any) -> None:
        with self._write() as db:
            self._updatable(db, trial_id)
            db.execute(
                f'INSERT INTO {table} (trial_id, "key", value_json) VALUES (?, ?, ?) '
                'ON CONFLICT (trial_id, "key") DO UPDATE SET value_json = excluded.value_json',
                (trial_id, key, json.dumps(value)),
            )

    def set_trial_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._set_attr("trial_user_attributes", trial_id, key, value)

    def tell(self, trial_id: int, value: float) -> None:
        with self._write() as db:
            self._updatable(db, trial_id)
            if not math.isfinite(value):  # as `OptunaStore.tell`: no value, a failure
                db.execute(
                    "UPDATE trials SET state = 'FAIL', datetime_complete = ? WHERE trial_id = ?", (_now(), trial_id)
                )
                return
            db.execute(
                "UPDATE trials SET state = 'COMPLETE', datetime_complete = ? WHERE trial_id = ?", (_now(), trial_id)
            )
            db.execute(
                "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, 0, ?, 'FINITE')",
                (trial_id, float(value)),
            )

    def fail(self, trial_id: int) -> bool:
        with self._write() as db:
            cursor = db.execute(
                "UPDATE trials SET state = 'FAIL', datetime_complete = ? WHERE trial_id = ? AND state NOT IN "
                "('COMPLETE', 'FAIL', 'PRUNED')",
                (_now(), trial_id),
            )
            return cursor.rowcount == 1

    def trials(self, states: Collection[TrialState] | None = None) -> list[StoredTrial]:
        wanted = {s.name for s in states} if states else None
        study = (self.study_id,)
        with self._read() as db:
            rows = db.execute(
                "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials WHERE study_id = ? "
                "ORDER BY trial_id",
                study,
            ).fetchall()
            rows = [r for r in rows if wanted is None or r[2] in wanted]
            if not rows:
                return []
            where = "trial_id IN (SELECT trial_id FROM trials WHERE study_id = ?)"
            params: dict[int, dict[str, Any]] = {}
            for trial_id, name, value, dist in db.execute(
                f"SELECT trial_id, param_name, param_value, distribution_json FROM trial_params WHERE {where} "
                "ORDER BY param_id",
                study,
            ):
                params.setdefault(trial_id, {})[name] = _external(value, dist)
            values = {
                trial_id: _value(value, kind)
                for trial_id, value, kind in db.execute(
                    f"SELECT trial_id, value, value_type FROM trial_values WHERE objective = 0 AND {where}", study
                )
            }
            user: dict[int, dict[str, Any]] = {}
            for trial_id, key, text in db.execute(
                f'SELECT trial_id, "key", value_json FROM trial_user_attributes WHERE {where}', study
            ):
                user.setdefault(trial_id, {})[key] = json.loads(text)
            system: dict[int, dict[str, Any]] = {}
            for trial_id, key, text in db.execute(
                f'SELECT trial_id, "key", value_json FROM trial_system_attributes WHERE {where}', study
            ):
                system.setdefault(trial_id, {})[key] = json.loads(text)
        return [
            StoredTrial(
                number=number,
                id=trial_id,
                state=TrialState[state],
                params=params.get(trial_id, {}),
                value=values.get(trial_id) if state == "COMPLETE" else None,
                user_attrs=user.get(trial_id, {}),
                system_attrs=system.get(trial_id, {}),
                started=_when(start),
                completed=_when(end),
            )
            for trial_id, number, state, start, end in rows
        ]

    # -- leases ----------------------------------------------------------------------------------------
    def beat(self, trial_id: int, count: int) -> None:
        if not self.has_heartbeat:
            self._set_attr("trial_system_attributes", trial_id, LEASE_ATTR, {"beat": count, "at": time.time()})
            return
        with self._write() as db:
            self._updatable(db, trial_id)
            db.execute(
                "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?, CURRENT_TIMESTAMP) "
                "ON CONFLICT (trial_id) DO UPDATE SET heartbeat = CURRENT_TIMESTAMP",
                (trial_id,),
            )

    def expire(self) -> list[StoredTrial]:
        """Fail the running trials whose heartbeat is older than the grace period, by the database's clock (UTC)."""
        if not self.has_heartbeat:
            return []
        interval = max(1, math.ceil(self.heartbeat))
        grace = max(1, math.ceil(grace_for(interval)))
        with self._write() as db:
            stale = [
                row[0]
                for row in db.execute(
                    "SELECT t.trial_id FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
                    "WHERE t.study_id = ? AND t.state = 'RUNNING' AND h.heartbeat < datetime('now', ?)",
                    (self.study_id, f"-{grace} seconds"),
                )
            ]
            now = _now()
            for trial_id in stale:
                db.execute(
                    "UPDATE trials SET state = 'FAIL', datetime_complete = ? WHERE trial_id = ?", (now, trial_id)
                )
        if not stale:
            return []
        failed = set(stale)
        return [t for t in self.trials({TrialState.FAIL}) if t.id in failed]
