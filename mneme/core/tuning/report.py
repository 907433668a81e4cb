"""What a tuning run leaves behind: the summary, the best configuration, the deployment file, exports, plots.

Files in the results folder:

``session.json``        what was run: kernel, space, sampler, storage URL and study name
``study.db``            the result store (SQLite), unless ``--storage`` named another
``summary.json``        counts, baseline, the ranked best configurations with re-timed spreads
``best.json``           the best configuration, ``ExperimentConfiguration.to_dict()``:
                        ``mneme replay --config best.json`` reproduces it
``tuned-kernels.json``  Proteus's ``PROTEUS_TUNED_KERNELS`` format: kernel name ->
                        ``Pipeline``/``OptLevel``, ``CodeGen``, ``CodeGenOptLevel``,
                        ``SpecializeArgs``, ``SpecializeDims``, ``SpecializeDimsRange``,
                        ``LaunchBounds``, ``TunedMaxThreads``, ``MinBlocksPerSM``; plus a
                        ``Mneme`` object (ignored by Proteus) with the launch geometry to
                        set in the application, the speedup and the hashes
``logs/``               one log file per worker process
"""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from mneme.core import fsutil
from mneme.core.errors import UsageError
from mneme.core.tuning.store import EVALUATED, ResultStore, TrialRecord
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

SUMMARY_SCHEMA = 1
TOP = 10


def build_summary(store: ResultStore, *, retimed: dict[str, Any] | None = None,
                  session: dict[str, Any] | None = None) -> dict[str, Any]:
    """Counts, baseline and the ranked best configurations of a study."""
    records = store.records()
    retime = dict(store.retime)
    retime.update(retimed or {})
    baseline = store.baseline or {}
    counts = Counter(r.status for r in records)
    failures = Counter()
    for r in records:
        if r.status == "unverified":
            failures["verify"] += 1
        elif r.status == "failed":
            failures[(r.result or {}).get("error_kind") or "error"] += 1
    base_hash = baseline.get("hash", "")
    base_retimed = retime.get(base_hash, {})
    base_time = base_retimed.get("median") if base_retimed.get("verified") else None
    base_time = base_time or baseline.get("value")

    candidates: dict[str, dict[str, Any]] = {}
    for r in sorted((r for r in records if r.ok), key=lambda r: r.value):
        if r.hash in candidates:
            continue
        candidates[r.hash] = _candidate(r.hash, r.config, r.value, r.number, retime.get(r.hash))
    if baseline:
        candidates.setdefault(base_hash, _candidate(base_hash, baseline["config"], baseline.get("value"), None,
                                                    base_retimed or None))
        candidates[base_hash]["baseline"] = True
    ranked = sorted((c for c in candidates.values() if c["time"] is not None), key=lambda c: c["time"])
    for rank, c in enumerate(ranked, 1):
        c["rank"] = rank
        c["speedup"] = (base_time / c["time"]) if base_time and c["time"] else None
        c["changes"] = _changes(baseline.get("config"), c["config"])
    best = ranked[0] if ranked else None
    return {
        "schema": SUMMARY_SCHEMA,
        "session": session or {},
        "study": store.study.study_name,
        "storage": store.url,
        "meta": store.meta,
        "counts": {
            "trials": sum(counts[s] for s in ("ok", "failed", "unverified", "cached")),
            "experiments": sum(counts[s] for s in EVALUATED),
            **{s: counts[s] for s in ("ok", "failed", "unverified", "cached", "infeasible", "interrupted")},
            "failures": dict(failures),
        },
        "baseline": {"time": base_time, "config": baseline.get("config"), "hash": base_hash,
                     "retimed": bool(base_retimed)},
        "best": best,
        "ranking": ranked[:TOP],
    }


def _candidate(digest: str, config: dict | None, value: float | None, trial: int | None,
               retimed: dict | None) -> dict[str, Any]:
    time_ = value
    spread = None
    verified_again = None
    if retimed:
        verified_again = bool(retimed.get("verified"))
        spread = retimed.get("spread")
        time_ = retimed.get("median") if verified_again else None  # a flaky variant is no winner
    return {"hash": digest, "trial": trial, "config": config, "search_time": value, "time": time_,
            "spread": spread, "retimed": retimed is not None, "verified_again": verified_again, "baseline": False}


def _changes(base: dict | None, config: dict | None) -> dict[str, Any]:
    if not base or not config:
        return {}
    a = ExperimentConfiguration.from_dict(base).ground().to_dict()
    b = ExperimentConfiguration.from_dict(config).ground().to_dict()
    return {k: v for k, v in b.items() if a.get(k) != v}


def proteus_entry(config: dict[str, Any], summary: dict[str, Any], recording: Any) -> dict[str, Any]:
    """One kernel's entry of Proteus's tuned-kernels JSON (see the module docstring)."""
    cfg = ExperimentConfiguration.from_dict(config)
    entry: dict[str, Any] = {
        "CodeGen": cfg.codegen_method,
        "CodeGenOptLevel": cfg.codegen_opt,
        "SpecializeArgs": cfg.specialize,
        "SpecializeDims": cfg.specialize_dims,
        "SpecializeDimsRange": cfg.specialize_dims_assume,
        "LaunchBounds": cfg.set_launch_bounds,
        "TunedMaxThreads": cfg.max_threads if cfg.set_launch_bounds else -1,
        "MinBlocksPerSM": cfg.min_blocks_per_sm if cfg.set_launch_bounds else 0,
    }
    passes = cfg.passes.strip()
    if passes.startswith("default<O") and passes.endswith(">") and len(passes) == len("default<O3>"):
        entry["OptLevel"] = passes[len("default<O")]
    else:
        entry["Pipeline"] = passes
    best = summary.get("best") or {}
    base = (summary.get("baseline") or {}).get("config") or {}
    entry["Mneme"] = {
        "grid": cfg.grid.to_dict(),
        "block": cfg.block.to_dict(),
        "launch_geometry_changed": bool(base) and (base.get("grid") != cfg.grid.to_dict()
                                                   or base.get("block") != cfg.block.to_dict()),
        "static_hash": getattr(recording, "static_hash", ""),
        "dynamic_hash": (summary.get("meta") or {}).get("dynamic_hash", ""),
        "config_hash": cfg.hash(),
        "time_s": best.get("time"),
        "speedup": best.get("speedup"),
    }
    return entry


def write_outputs(results_dir: Path, summary: dict[str, Any], recording: Any = None) -> None:
    """summary.json, best.json and tuned-kernels.json in the results folder."""
    results_dir = Path(results_dir)
    write_json(results_dir / "summary.json", summary)
    best = summary.get("best")
    if not best:
        return
    write_json(results_dir / "best.json", best["config"])
    kernel = getattr(recording, "kernel_name", "") or (summary.get("meta") or {}).get("kernel_name", "kernel")
    write_json(results_dir / "tuned-kernels.json", {kernel: proteus_entry(best["config"], summary, recording)})


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    fsutil.atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


# -- reading a results folder -----------------------------------------------------------------


def open_results(results_dir: Path) -> tuple[ResultStore, dict[str, Any]]:
    """The store and session record of a results folder."""
    results_dir = Path(results_dir)
    session_file = results_dir / "session.json"
    if not session_file.is_file():
        raise UsageError(f"{results_dir} is not a tuning results folder (no session.json); give the folder "
                         "`mneme tune --results` wrote")
    session = json.loads(session_file.read_text())
    store = ResultStore.load(session["storage"], session.get("study"))
    return store, session


# -- exports ------------------------------------------------------------------------------------

CSV_FIELDS = ("number", "status", "value", "hash", "cached_from", "grid", "block", "config", "median_time",
              "verified", "error_kind", "error", "obj_size", "reg_usage", "device", "gpu_id", "host", "pid",
              "start", "end")


def _row(r: TrialRecord) -> dict[str, Any]:
    result = r.result or {}
    config = r.config or {}
    times = sorted(result.get("exec_time") or [])
    return {
        "number": r.number, "status": r.status, "value": r.value, "hash": r.hash, "cached_from": r.cached_from,
        "grid": ",".join(str(v) for v in (config.get("grid") or {}).values()),
        "block": ",".join(str(v) for v in (config.get("block") or {}).values()),
        "config": json.dumps(config, sort_keys=True) if config else "",
        "median_time": times[len(times) // 2] if times else None,
        "verified": result.get("verified"), "error_kind": result.get("error_kind", ""),
        "error": result.get("error", ""), "obj_size": result.get("obj_size"), "reg_usage": result.get("reg_usage"),
        "device": result.get("device", ""), "gpu_id": result.get("gpu_id"),
        "host": r.owner.get("host", ""), "pid": r.owner.get("pid"), "start": r.start, "end": r.end,
    }


def export_csv(store: ResultStore, path: Path) -> int:
    records = store.records()
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in records:
            writer.writerow(_row(r))
    return len(records)


def export_jsonl(store: ResultStore, path: Path) -> int:
    import attrs

    records = store.records()
    with open(path, "w") as fh:
        fh.writelines(json.dumps(attrs.asdict(r), sort_keys=True, default=str) + "\n" for r in records)
    return len(records)


def write_plots(store: ResultStore, out_dir: Path) -> list[Path]:
    """Optimization history, parameter importances and parallel coordinates as HTML (plotly)."""
    import importlib.util

    if importlib.util.find_spec("plotly") is None:
        raise UsageError("plots need plotly, which is not installed: pip install plotly (then run "
                         "`mneme results DIR --plots OUT` again)")
    import optuna
    import optuna.visualization as vis

    # Plot what ran and verified: penalties of failed and infeasible points would flatten the axes.
    good = [t for t in store.trials(states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("status") in ("ok", "cached") and t.params]
    if not good:
        raise UsageError(f"study {store.study.study_name!r} has no verified trial to plot yet")
    view = optuna.create_study(direction="minimize")
    view.add_trials(good)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    plots = {"history": vis.plot_optimization_history, "parallel-coordinates": vis.plot_parallel_coordinate,
             "importances": vis.plot_param_importances, "slice": vis.plot_slice}
    for name, plot in plots.items():
        try:
            figure = plot(view)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:  # e.g. importances of one trial
            log.warning("skipped the %s plot: %s", name, exc)
            continue
        path = out_dir / f"{name}.html"
        figure.write_html(str(path), include_plotlyjs="directory")
        written.append(path)
    return written
