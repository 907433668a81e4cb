"""The Python API: replay or tune a recording in one call, with results a notebook can show.

``mneme.replay`` and ``mneme.tune`` are these functions (loaded on first use by ``mneme``'s
``__init__``); they are thin layers over :class:`mneme.core.executor.BaseExecutor` and
:class:`mneme.core.tuning.session.TuningSession`, with the semantics of ``mneme replay`` and
``mneme tune``.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mneme.core.errors import UsageError
from mneme.core.types import ExperimentConfiguration, ExperimentResult

__all__ = ["ReplayResult", "TuneResult", "replay", "tune"]

# The options of `replay` that go to the executor; every other keyword is a configuration field.
_EXECUTOR_OPTIONS = ("record_id", "iterations", "device", "backend", "mode", "warmup", "cache", "timer")


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e6:.1f} us" if value < 1e-3 else f"{value * 1e3:.3f} ms"


def _html_table(title: str, rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{body}</table>"


@attrs.frozen
class ReplayResult:
    """One replayed experiment: the recording, the configuration it ran, and its result.

    Attributes
    ----------
    record_db : the recording database that was replayed
    record_id : the instance's dynamic hash
    kernel : the kernel's demangled name
    config : the configuration that ran
    result : the experiment's times, verification and resources
    """

    record_db: str
    record_id: str
    kernel: str
    config: ExperimentConfiguration
    result: ExperimentResult

    @property
    def verified(self) -> bool:
        return self.result.verified

    @property
    def median_time(self) -> float | None:
        """The median of the timed runs, in seconds."""
        return self.result.median_time

    def to_dict(self) -> dict[str, Any]:
        return {
            "record_db": self.record_db,
            "record_id": self.record_id,
            "kernel": self.kernel,
            "config": self.config.to_dict(),
            "result": self.result.to_dict(),
        }

    def _rows(self) -> list[tuple[str, Any]]:
        r = self.result
        times = sorted(r.exec_time)
        return [
            (
                "grid / block / shared",
                f"{tuple(self.config.grid.to_dict().values())} / "
                f"{tuple(self.config.block.to_dict().values())} / {self.config.shared_mem} B",
            ),
            ("device", r.device),
            ("verified", "yes" if r.verified else f"no{': ' + r.error if r.error else ''}"),
            ("median time", _seconds(r.median_time)),
            ("min / max time", f"{_seconds(times[0])} / {_seconds(times[-1])}" if times else "-"),
            ("timer", r.timer or "-"),
            (
                "compile (preprocess / opt / codegen)",
                f"{_seconds(r.preprocess_ir_time)} / {_seconds(r.opt_time)} / {_seconds(r.codegen_time)}",
            ),
            ("object size", f"{r.obj_size} B"),
            ("variant", r.variant_hash),
        ]

    def _repr_html_(self) -> str:
        return _html_table(f"{self.kernel} [{self.record_id}]", self._rows())

    def __repr__(self) -> str:
        state = "verified" if self.verified else "NOT verified"
        return f"<ReplayResult {self.kernel} [{self.record_id}]: {state}, median {_seconds(self.median_time)}>"


@attrs.frozen
class TuneResult:
    """A finished tuning run: its summary, its results folder and every trial.

    Attributes
    ----------
    summary : the run's summary (as in ``summary.json``): counts, baseline, best, ranking
    results : the results folder (``study.db``, ``best.json``, ``tuned-kernels.json``, ...)
    trials : one row per trial, as ``mneme results --csv`` writes them: a pandas DataFrame
        where pandas is installed, else a list of dicts
    """

    summary: dict[str, Any]
    results: Path
    trials: Any

    @property
    def best(self) -> ExperimentConfiguration | None:
        """The best verified configuration, or None when no trial verified."""
        best = self.summary.get("best")
        return ExperimentConfiguration.from_dict(best["config"]) if best else None

    @property
    def best_time(self) -> float | None:
        best = self.summary.get("best")
        return best["time"] if best else None

    @property
    def baseline_time(self) -> float | None:
        return (self.summary.get("baseline") or {}).get("time")

    @property
    def speedup(self) -> float | None:
        best = self.summary.get("best")
        return best.get("speedup") if best else None

    def _repr_html_(self) -> str:
        counts = self.summary.get("counts", {})
        rows = [
            ("trials", counts.get("trials")),
            ("baseline", _seconds(self.baseline_time)),
            ("best", _seconds(self.best_time)),
            ("speedup", f"{self.speedup:.2f}x" if self.speedup else "-"),
            ("results", self.results),
        ]
        head = _html_table(f"tuning study {self.summary.get('study', '')}", rows)
        ranking = "".join(
            f"<tr><td>{c.get('rank')}</td><td>{c.get('trial') if c.get('trial') is not None else '-'}</td>"
            f"<td>{_seconds(c.get('time'))}</td><td>{html.escape(str(c.get('changes') or '(recorded)'))}</td></tr>"
            for c in self.summary.get("ranking", [])
        )
        return (
            f"{head}<table><tr><th>rank</th><th>trial</th><th>time</th><th>changes from the recorded "
            f"configuration</th></tr>{ranking}</table>"
        )

    def __repr__(self) -> str:
        counts = self.summary.get("counts", {})
        speedup = f"{self.speedup:.2f}x" if self.speedup else "-"
        return (
            f"<TuneResult {counts.get('trials', 0)} trials, best {_seconds(self.best_time)} "
            f"({speedup} vs the recorded configuration), results in {self.results}>"
        )


def _configuration(default: ExperimentConfiguration, config: Any, fields: Mapping[str, Any]) -> ExperimentConfiguration:
    from mneme.core.configfile import read_config_file, resolve_config

    if isinstance(config, ExperimentConfiguration):
        default, config = config, None
    source = None
    if isinstance(config, (str, os.PathLike)):
        source = str(config)
        config = read_config_file(config)
    elif config is not None and not isinstance(config, Mapping):
        raise UsageError(
            f"config must be an ExperimentConfiguration, a mapping of its fields or a JSON/YAML file, "
            f"got {type(config).__name__}"
        )
    return resolve_config(default, config, fields, source=source)


def replay(record_db: str | os.PathLike, config: Any = None, **options: Any) -> ReplayResult:
    """Replay one recorded launch as a verified, timed experiment (``mneme replay``).

    Parameters
    ----------
    record_db : a recording database (``<static-hash>.json``) or its folder
    config : the configuration to run: an ExperimentConfiguration, a mapping of its fields, or a
        JSON/YAML file such as a tuning run's ``best.json``; default: the recorded launch
    **options : executor options (``record_id``, ``iterations`` (3), ``device`` (0), ``backend``,
        ``mode``, ``warmup``, ``cache``, ``timer``, as for ``mneme replay``); every other keyword
        is a configuration field applied last (``block=(128, 1, 1)``, ``specialize=True``,
        ``block_dim_x=128``)

    Returns
    -------
    ReplayResult
    """
    from mneme.core.executor import BaseExecutor

    run = {k: options.pop(k) for k in _EXECUTOR_OPTIONS if k in options}
    device = run.pop("device", 0)
    with BaseExecutor(os.fspath(record_db), device_id=device, **run) as executor:
        chosen = _configuration(executor.default_config(), config, options)
        result = executor.execute(chosen)
        rec, instance = executor.rec, executor.instance
        kernel = rec.demangled_name or rec.kernel_name
        return ReplayResult(str(record_db), instance.dynamic_hash, kernel, chosen, result)


def _trials_table(rows: list[dict[str, Any]]) -> Any:
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


def tune(record_db: str | os.PathLike, **options: Any) -> TuneResult:
    """Tune one recorded launch (``mneme tune``) and return the run's results.

    Parameters
    ----------
    record_db : a recording database (``<static-hash>.json``) or its folder
    **options : the fields of :class:`mneme.core.tuning.session.TuneOptions`, one per ``mneme
        tune`` option: ``space``, ``space_options``, ``sampler``, ``trials``, ``results``,
        ``storage``, ``study``, ``seed``, ``devices``, ``backend``, ``resume``, ...

    Returns
    -------
    TuneResult
    """
    from mneme.core.tuning import report
    from mneme.core.tuning.session import TuneOptions, TuningSession

    known = {field.name for field in attrs.fields(TuneOptions)} - {"record_db"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"unknown tuning option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    session = TuningSession(TuneOptions(record_db=os.fspath(record_db), **options))
    summary = session.run()
    rows = [report._row(record) for record in session.store.records()]
    return TuneResult(summary, Path(session.results_dir), _trials_table(rows))
