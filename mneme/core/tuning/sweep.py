"""A finished study as data: every measured configuration of a space with its times (a *sweep*).

A sweep is what simulation replays (`simulate`): the space is rebuilt from the recording
and the space's name and options, and each configuration's grounded hash finds its stored
measurement. It is read from a results folder (`mneme tune --results`) or from a sweep
file, the JSON `export_sweep` writes (``schema``, ``space``, ``space_options``,
``record_db`` (relative to the file), ``baseline`` and ``points``: hash -> ``params``
(the store's encoded values), ``status``, ``times`` (seconds of each timed run) and ``value``
(their median), and for a configuration that compiled to code measured already,
``equivalent_to`` (the hash whose measurement it shares)), so a sweep can be kept as a test
fixture.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import attrs

from mneme.core.errors import UsageError

SWEEP_SCHEMA = 1
SWEEP_KEYS = ("schema", "space", "space_options", "record_db", "record_id", "baseline", "points", "source")


@attrs.define
class Point:
    """One measured configuration: its encoded parameters, status and the times of its timed runs."""

    params: dict[str, Any]
    status: str
    times: list[float]
    value: float | None
    equivalent_to: str | None = None  # the hash whose measurement it shares (compiled to the same code)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.value is not None


@attrs.define
class Sweep:
    """The measured points of one space of one recording."""

    space: str
    space_options: dict[str, Any]
    record_db: str
    record_id: str | None
    baseline: Point
    baseline_hash: str
    points: dict[str, Point]
    source: dict[str, Any] = attrs.Factory(dict)

    @property
    def optimum(self) -> float:
        """The fastest median time of a verified point (the baseline included)."""
        values = [p.value for p in self.points.values() if p.ok]
        if self.baseline.value is not None:
            values.append(self.baseline.value)
        return min(values)

    def load_space(self) -> Any:
        """The search space, rebuilt from the recording (no device is touched)."""
        from mneme.core.recording import load_recording
        from mneme.core.tuning.space import load_space

        recording = load_recording(self.record_db)
        instance = recording.select(self.record_id)
        return load_space(self.space, recording, instance, self.space_options)

    @classmethod
    def load(cls, path: str | Path) -> Sweep:
        """A sweep from a results folder or a sweep file."""
        path = Path(path)
        if path.is_dir():
            return cls.from_dict(export_sweep(path), path)
        from mneme.core import limits

        data = limits.load_json(limits.read_text(path, "sweep file"), path)
        if not isinstance(data, dict):
            raise UsageError(
                f"{path}: not a sweep file; give a results folder or a file written by `mneme samplers export`"
            )
        return cls.from_dict(data, path.parent)

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Path) -> Sweep:
        from mneme.core.keys import check_keys

        if not isinstance(data, dict):
            raise UsageError(f"{base}: a sweep file holds a JSON object; re-export it with `mneme samplers export`")
        check_keys(data, SWEEP_KEYS, base, error=UsageError)
        if data.get("schema") != SWEEP_SCHEMA:
            raise UsageError(f"sweep schema {data.get('schema')!r} is not {SWEEP_SCHEMA}: re-export it")
        record_db = Path(data["record_db"])
        if not record_db.is_absolute():
            record_db = (Path(base) / record_db).resolve()
        points = {
            digest: Point(p["params"], p["status"], list(p.get("times") or []), p.get("value"), p.get("equivalent_to"))
            for digest, p in data["points"].items()
        }
        b = data["baseline"]
        return cls(
            data["space"],
            dict(data.get("space_options") or {}),
            str(record_db),
            data.get("record_id"),
            Point({}, "ok", list(b.get("times") or []), b.get("value")),
            b.get("hash", ""),
            points,
            dict(data.get("source") or {}),
        )


def export_sweep(results_dir: Path, relative_to: Path | None = None) -> dict[str, Any]:
    """The sweep of a results folder, as `Sweep.from_dict` reads it; `record_db` relative to `relative_to`."""
    import os

    from mneme.core.tuning.report import open_results
    from mneme.core.tuning.store import EVALUATED

    store, session = open_results(Path(results_dir))
    points: dict[str, Any] = {}
    for record in store.records():
        if record.status not in EVALUATED or not record.hash or record.hash in points:
            continue
        times = [float(t) for t in (record.result or {}).get("exec_time") or []]
        points[record.hash] = {
            "params": record.params,
            "status": record.status,
            "times": times,
            "value": statistics.median(times) if record.status == "ok" and times else None,
        }
    baseline = store.baseline or {}
    base_times = [float(t) for t in (baseline.get("result") or {}).get("exec_time") or []]
    # Configurations that compiled to code measured already are one experiment (the loop answers them
    # from the first one's trial): the sweep gives them that measurement, so a simulated run that
    # proposes one sees what the device search saw, not a missing point.
    by_number = {r.number: r for r in store.records()}
    for record in store.records():
        first = (record.result or {}).get("equivalent_to")
        source = by_number.get(first) if first is not None else None
        if record.status != "cached" or not record.hash or record.hash in points or source is None:
            continue
        if source.hash in points:
            points[record.hash] = {**points[source.hash], "params": record.params, "equivalent_to": source.hash}
    record_db = session.get("record_db") or ""
    if relative_to is not None and record_db:
        record_db = os.path.relpath(record_db, Path(relative_to).resolve())
    meta = store.meta or {}
    return {
        "schema": SWEEP_SCHEMA,
        "space": session.get("space_spec") or meta.get("space_name"),
        "space_options": session.get("space_options") or {},
        "record_db": record_db,
        "record_id": meta.get("dynamic_hash"),
        "baseline": {
            "hash": baseline.get("hash", ""),
            "times": base_times,
            "value": statistics.median(base_times) if base_times else baseline.get("value"),
        },
        "points": points,
        "source": {
            "sampler": session.get("sampler"),
            "study": session.get("study"),
            "environment": session.get("environment") or {},
        },
    }
