"""What a tuning run leaves behind: the summary, the best configuration, the deployment file, exports, plots.

Files in the results folder:

``session.json``        what was run: kernel, space, sampler, storage URL and study name
``study.db``            the result store (SQLite), unless ``--storage`` named another
``summary.json``        counts, why the search stopped, baseline, the ranked best configurations,
                        each speedup with its confidence interval, the decision for best.json
``best.json``           the best configuration, ``ExperimentConfiguration.to_dict()``:
                        ``mneme replay --config best.json`` reproduces it; the recorded
                        configuration when no candidate is significantly faster
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

import attrs

from mneme.core import fsutil, plugins
from mneme.core.errors import MissingExtraError, UsageError
from mneme.core.tuning import plotview, stats
from mneme.core.tuning.measure import MAX_PAIRS, rejudge, row_confidence
from mneme.core.tuning.options import TuneOptions
from mneme.core.tuning.store import EVALUATED, ResultStore, TrialRecord
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

SUMMARY_SCHEMA = 1
TOP = 10


def build_summary(
    store: ResultStore,
    *,
    retimed: dict[str, Any] | None = None,
    session: dict[str, Any] | None = None,
    accept_insignificant: bool = False,
    confidence: float | None = None,
) -> dict[str, Any]:
    """Counts, baseline and the ranked best configurations of a study, each speedup with its interval.

    A candidate compared with the baseline by interleaved runs (`measure`) carries that
    comparison's interval and verdict; one known from the search only (``"method": "search"``)
    carries its estimate, no verdict (never significant) and, as ``search_ci``, the interval of
    its times taken apart, which ignores the machine's drift between them. ``best`` is the
    fastest compared candidate significantly faster than the recorded configuration; when none
    is, the recorded configuration itself (``decision`` says why), unless `accept_insignificant`.

    The verdicts hold together at `confidence` (by default the run's ``--confidence``, `table_level`): with m
    compared rows, each at ``1 - (1 - confidence) / m`` over its looks; a row compared at a looser level (by an
    earlier session of the study, which compared fewer) is judged again from its stored pairs
    (`table_verdicts`). ``table`` says what the level is and how it was reached.
    """
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
    base_samples = list((baseline.get("result") or {}).get("exec_time") or [])

    candidates: dict[str, dict[str, Any]] = {}
    for r in sorted((r for r in records if r.ok), key=lambda r: r.value):
        if r.hash in candidates:
            continue
        candidates[r.hash] = _candidate(
            r.hash,
            r.config,
            r.value,
            r.number,
            retime.get(r.hash),
            base_samples,
            list((r.result or {}).get("exec_time") or []),
        )
    if baseline:
        candidates[base_hash] = _candidate(
            base_hash, baseline["config"], baseline.get("value"), None, base_retimed or None, base_samples, base_samples
        )
        candidates[base_hash].update(
            baseline=True,
            time=base_time,
            speedup=1.0,
            speedup_ci=[1.0, 1.0],
            significant=False,
            verdict="recorded configuration",
            method="baseline",
            search_ci=None,
        )
    level = table_level(session) if confidence is None else confidence
    table = table_verdicts(list(candidates.values()), retime, level, ((session or {}).get("options") or {}))
    # Compared candidates first (their speedups come from interleaved runs), then the recorded configuration,
    # then candidates known from the search only (times taken apart, under other machine conditions).
    ranked = sorted((c for c in candidates.values() if c["time"] is not None), key=rank_key)
    for rank, c in enumerate(ranked, 1):
        c["rank"] = rank
        c["changes"] = _changes(baseline.get("config"), c["config"])
    best, decision = choose_best(ranked, accept_insignificant)
    return {
        "schema": SUMMARY_SCHEMA,
        "session": session or {},
        "study": store.study_name,
        "storage": store.url,
        "meta": store.meta,
        "counts": {
            "trials": sum(counts[s] for s in EVALUATED),  # distinct configurations measured: what --trials counts
            "experiments": sum(counts[s] for s in EVALUATED),
            "duplicates": counts["cached"],  # proposals of measured configurations, answered from the store
            **{s: counts[s] for s in ("ok", "failed", "unverified", "cached", "infeasible", "interrupted")},
            "failures": dict(failures),
        },
        "baseline": {
            "time": base_time,
            "config": baseline.get("config"),
            "hash": base_hash,
            "retimed": bool(base_retimed),
        },
        "table": table,
        "best": best,
        "decision": decision,
        "fastest": ranked[0] if ranked else None,
        "ranking": ranked[:TOP],
    }


_DEFAULT_MAX_PAIRS = attrs.fields_dict(TuneOptions)["max_pairs"].default
LEGACY_CONFIDENCE = 0.95  # what a run stated before --confidence: 95% for the rows one session compared


def table_level(session: dict[str, Any] | None) -> float:
    """The level the table's verdicts hold at together: the run's ``--confidence``; 95% for a run recorded before
    that option (its session record lacks it), today's default when there is no session record."""
    if session is None:
        return stats.TABLE_CONFIDENCE
    return float((session.get("options") or {}).get("confidence", LEGACY_CONFIDENCE))


def table_verdicts(
    rows: list[dict[str, Any]], retime: dict[str, Any], confidence: float, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Make the verdicts of the compared `rows` hold together at `confidence`, in place; what was done.

    Each of the m rows compared by interleaved runs must have been judged at ``row_confidence(confidence, m)``
    over its looks, so that the chance that any of them is false stays ``1 - confidence`` (Bonferroni). A session
    compares its K leaders at that share of its own level, so its rows pass as they are; a row whose stored entry
    was judged at a looser share (an earlier session that compared fewer rows, or a store from before the level
    was recorded) is judged again from its stored pairs at the table's share (`measure.rejudge`), which can only
    withdraw its verdict, never make one. Each row gets ``confidence`` (its share) and ``rejudged``.
    """
    compared = [r for r in rows if not r["baseline"] and r["method"].startswith("interleaved")]
    share = row_confidence(confidence, len(compared))
    rejudged = 0
    for row in compared:
        entry = retime.get(row["hash"]) or {}
        judged_at = entry.get("row_confidence")
        row["rejudged"] = False
        if judged_at is not None and judged_at >= share - 1e-12:
            row["confidence"] = judged_at
            continue
        # Unknown caps: a comparison with later looks ran to the run's --max-pairs (today's default when not
        # recorded: more looks, each stricter); one without them was the fixed comparison (one look).
        cap = entry.get("max_pairs")
        if cap is None:
            cap = ((options or {}).get("max_pairs") or _DEFAULT_MAX_PAIRS) if "looks" in entry else MAX_PAIRS
        interval = rejudge(
            entry.get("baseline_medians") or [], entry.get("medians") or [], entry.get("first_pairs"), cap, share
        )
        rejudged += 1
        row.update(confidence=share, rejudged=True)
        if interval is None:
            row.update(speedup_ci=None, significant=False, verdict="no interval (one sample)")
            continue
        row.update(
            speedup=interval.ratio,
            speedup_ci=[interval.low, interval.high],
            significant=interval.significant,
            verdict=interval.verdict(),
        )
    return {
        "confidence": confidence,
        "compared": len(compared),
        "row_confidence": share,
        "rejudged": rejudged,
        "statement": table_statement(confidence, len(compared), share),
    }


def table_statement(confidence: float, compared: int, share: float) -> str:
    """What "faster"/"slower" means in a table: the level for the table as a whole, and each row's share."""
    level = f"{100 * confidence:g}%"
    if compared == 0:
        return ""  # no row compared: the table makes no claim
    if compared == 1:
        return f"verdicts at {level} for the whole table"
    return f"verdicts at {level} for the whole table ({compared} rows compared, each at {100 * share:.4g}%)"


def rank_key(row: dict[str, Any]) -> tuple[int, float, float]:
    """The summary's order: compared candidates (fastest speedup first), the recorded configuration, then
    candidates known from the search only."""
    group = 0 if row["method"].startswith("interleaved") else 1 if row["baseline"] else 2
    return group, -(row["speedup"] or 0.0), row["time"]


def choose_best(ranked: list[dict[str, Any]], accept_insignificant: bool = False) -> tuple[dict | None, str]:
    """The configuration best.json holds, and why."""
    if not ranked:
        return None, "no verified configuration"
    # Candidates compared with the baseline by interleaved runs are judged by that comparison alone; times
    # taken apart during the search (a different machine state) never decide (their rows are never significant).
    if any(c["method"].startswith("interleaved") for c in ranked):
        ranked = [c for c in ranked if c["baseline"] or c["method"].startswith("interleaved")]
    faster = [c for c in ranked if not c["baseline"] and c["significant"] and (c["speedup"] or 0) > 1.0]
    if faster:
        return faster[0], f"significantly faster than the recorded configuration ({faster[0]['method']})"
    top = ranked[0]
    recorded = next((c for c in ranked if c["baseline"]), None)
    compared = any(c["method"].startswith("interleaved") for c in ranked)
    looks_faster = [c for c in ranked if c["method"] == "search" and (c["speedup"] or 0) > 1.0]
    if not compared and looks_faster and accept_insignificant:
        pick = max(looks_faster, key=lambda c: c["speedup"])
        return pick, "fastest search estimate, not compared with the recorded configuration (--accept-insignificant)"
    if recorded is not None and not compared and looks_faster:
        return recorded, (
            "no candidate was compared with the recorded configuration by interleaved runs (search "
            "times, taken apart, give no verdict), so best.json stays the recorded configuration "
            "(--retime-top N compares the leading N; --accept-insignificant takes the fastest estimate)"
        )
    if top["baseline"]:
        return top, "the recorded configuration is the fastest"
    if accept_insignificant:
        return top, "fastest, but not significantly faster than the recorded configuration (--accept-insignificant)"
    if recorded is None:
        return top, "fastest (the recorded configuration has no time to compare with)"
    return recorded, (
        "no significant difference: no candidate's interval excludes 1.0, so best.json stays the "
        "recorded configuration (--accept-insignificant takes the fastest anyway)"
    )


SEARCH_VERDICT = "not compared (search estimate)"


def _method(retimed: dict, interval: dict) -> str:
    """How a compared row was measured: its pairs, and the looks and interval of a comparison that went on."""
    text = f"interleaved, {retimed.get('pairs', 0)} pairs"
    looks = retimed.get("looks", 1)
    if looks > 1:
        text += f" ({looks} looks"
        text += ", signed-rank)" if interval.get("estimator") == "signed-rank" else ")"
    return text


def _candidate(
    digest: str,
    config: dict | None,
    value: float | None,
    trial: int | None,
    retimed: dict | None,
    base_samples: list[float],
    samples: list[float],
) -> dict[str, Any]:
    time_ = value
    spread = None
    verified_again = None
    row = {
        "speedup": None,
        "speedup_ci": None,
        "significant": False,
        "verdict": "no interval (one sample)",
        "method": "search",
        "search_ci": None,
    }
    if retimed:
        verified_again = bool(retimed.get("verified"))
        spread = retimed.get("spread")
        time_ = retimed.get("median") if verified_again else None  # a flaky variant is no winner
        interval = retimed.get("speedup") if verified_again else None
        if interval:
            row.update(
                speedup=interval["speedup"],
                speedup_ci=[interval["low"], interval["high"]],
                significant=bool(interval["significant"]),
                verdict=interval["verdict"],
                method=_method(retimed, interval),
            )
    if row["method"] == "search" and time_ is not None:
        # Times taken apart (the baseline once at the start, this candidate minutes later) differ by the
        # machine's drift between the two occasions, which neither trial's own samples measure, so their
        # interval is far too narrow to judge by. The row keeps its estimate and that interval for
        # information, and no verdict: the interleaved comparison decides (docs/design/tuning.md).
        found = stats.unpaired_ratio(base_samples, samples)
        if found is not None:
            row.update(speedup=found.ratio, search_ci=[found.low, found.high], verdict=SEARCH_VERDICT)
    return {
        "hash": digest,
        "trial": trial,
        "config": config,
        "search_time": value,
        "time": time_,
        "spread": spread,
        "retimed": retimed is not None,
        "verified_again": verified_again,
        "pairs": retimed.get("pairs") if retimed else None,
        "extra_pairs": retimed.get("extra_pairs", 0) if retimed else None,  # past the first look (open verdict)
        "baseline": False,
        **row,
    }


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
        "launch_geometry_changed": bool(base)
        and (base.get("grid") != cfg.grid.to_dict() or base.get("block") != cfg.block.to_dict()),
        "static_hash": getattr(recording, "static_hash", ""),
        "dynamic_hash": (summary.get("meta") or {}).get("dynamic_hash", ""),
        "config_hash": cfg.hash(),
        "time_s": best.get("time"),
        "speedup": best.get("speedup"),
        "speedup_ci": best.get("speedup_ci"),
        "table_confidence": (summary.get("table") or {}).get("confidence"),  # the verdicts' level, together
        "decision": summary.get("decision", ""),
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
        raise UsageError(
            f"{results_dir} is not a tuning results folder (no session.json); give the folder "
            "`mneme tune --results` wrote"
        )
    session = json.loads(session_file.read_text())
    store = ResultStore.load(session["storage"], session.get("study"))
    return store, session


def load_summary(results_dir: Path, store: ResultStore, session: dict[str, Any]) -> dict[str, Any]:
    """The summary of a results folder, rebuilt from its store; what the run wrote about how it ran (why it
    stopped, its notes, its measurement and its choice of best) kept from its ``summary.json``."""
    written: dict[str, Any] = {}
    try:
        written = json.loads((Path(results_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        pass
    options = (written.get("session") or {}).get("options") or {}
    summary = build_summary(store, session=session, accept_insignificant=bool(options.get("accept_insignificant")))
    for key in ("stop", "notes", "measurement"):
        if key in written:
            summary[key] = written[key]
    return summary


# -- exports ------------------------------------------------------------------------------------

CSV_FIELDS = (
    "number",
    "status",
    "value",
    "hash",
    "cached_from",
    "grid",
    "block",
    "config",
    "median_time",
    "verified",
    "error_kind",
    "error",
    "obj_size",
    "reg_usage",
    "device",
    "gpu_id",
    "host",
    "pid",
    "start",
    "end",
)


def _row(r: TrialRecord) -> dict[str, Any]:
    result = r.result or {}
    config = r.config or {}
    times = sorted(result.get("exec_time") or [])
    return {
        "number": r.number,
        "status": r.status,
        "value": r.value,
        "hash": r.hash,
        "cached_from": r.cached_from,
        "grid": ",".join(str(v) for v in (config.get("grid") or {}).values()),
        "block": ",".join(str(v) for v in (config.get("block") or {}).values()),
        "config": json.dumps(config, sort_keys=True) if config else "",
        "median_time": times[len(times) // 2] if times else None,
        "verified": result.get("verified"),
        "error_kind": result.get("error_kind", ""),
        "error": result.get("error", ""),
        "obj_size": result.get("obj_size"),
        "reg_usage": result.get("reg_usage"),
        "device": result.get("device", ""),
        "gpu_id": result.get("gpu_id"),
        "host": r.owner.get("host", ""),
        "pid": r.owner.get("pid"),
        "start": r.start,
        "end": r.end,
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
    records = store.records()
    with open(path, "w") as fh:
        fh.writelines(json.dumps(attrs.asdict(r), sort_keys=True, default=str) + "\n" for r in records)
    return len(records)


PLOT_FORMATS = ("png", "html", "both")
_PLOT_LIBRARY = {"png": "matplotlib", "html": "plotly"}


def plot_formats(choice: str | None = None) -> tuple[str, ...]:
    """The file formats to write: ``png`` (matplotlib), ``html`` (plotly), or both (the default, as installed)."""
    import importlib.util

    if choice not in (None, *PLOT_FORMATS):
        raise UsageError(f"plot format {choice!r}: choose one of {', '.join(PLOT_FORMATS)}")
    wanted = ("png", "html") if choice in (None, "both") else (choice,)
    missing = [f for f in wanted if importlib.util.find_spec(_PLOT_LIBRARY[f]) is None]
    if missing and (choice is not None or len(missing) == len(wanted)):
        raise MissingExtraError(f"{' and '.join(f.upper() for f in missing)} plots", "plots", plural=True)
    for f in missing:
        log.warning("no %s plots: %s is not installed (pip install 'mneme-gpu[plots]')", f.upper(), _PLOT_LIBRARY[f])
    return tuple(f for f in wanted if f not in missing)


def write_speedup_plot(
    summary: dict[str, Any], out_dir: Path, kinds: tuple[str, ...], *, kernel: str = "", script: str | None = None
) -> list[Path]:
    """``speedups.png``/``.html``: the ranked candidates' speedups with their intervals (1.0 drawn: no change)."""
    rows = [c for c in summary.get("ranking") or () if c.get("speedup_ci")]
    if not rows:
        return []
    labels = ["recorded" if c["baseline"] else f"trial {c['trial']}" for c in rows]
    points = [c["speedup"] for c in rows]
    lows = [c["speedup"] - c["speedup_ci"][0] for c in rows]
    highs = [c["speedup_ci"][1] - c["speedup"] for c in rows]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    statement = (summary.get("table") or {}).get("statement") or "95% intervals"
    title = f"speedup vs the recorded configuration ({statement})"
    title = f"{kernel}: {title}" if kernel else title
    if "png" in kinds:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(7, 0.5 + 0.4 * len(rows)))
        try:
            axes.errorbar(points, range(len(rows)), xerr=[lows, highs], fmt="o", capsize=3)
            axes.axvline(1.0, color="grey", linestyle="--", linewidth=1)
            axes.set_yticks(range(len(rows)), labels)
            axes.invert_yaxis()
            axes.set_xlabel("speedup (x)")
            axes.set_title(title)
            figure.savefig(out_dir / "speedups.png", dpi=120, bbox_inches="tight", metadata={"Title": title})
            written.append(out_dir / "speedups.png")
        finally:
            plt.close(figure)
    if "html" in kinds:
        import plotly.graph_objects as go

        error = {"type": "data", "symmetric": False, "array": highs, "arrayminus": lows}
        figure = go.Figure(go.Scatter(x=points, y=labels, mode="markers", error_x=error))
        figure.add_vline(x=1.0, line_dash="dash", line_color="grey")
        figure.update_layout(title=title, xaxis_title="speedup (x)", yaxis={"autorange": "reversed"})
        figure.write_html(str(out_dir / "speedups.html"), include_plotlyjs=script or "directory")
        written.append(out_dir / "speedups.html")
    return written


def write_plots(
    store: ResultStore,
    out_dir: Path,
    formats: str | None = None,
    summary: dict[str, Any] | None = None,
    script_dir: Path | None = None,
) -> list[Path]:
    """The study's plots, drawn by the plugins that implement ``mneme_study_plots`` (the built-in one:
    optimization history, parameter importances, parallel coordinates and slices), and (given the run's
    `summary`) the speedups with their intervals (`write_speedup_plot`).

    Each plot is written as PNG (matplotlib) and as HTML (plotly), or in the one format
    `formats` names (``png``, ``html``, ``both``), in kernel terms: the values that ran on the
    axes, times in µs/ms/s, the kernel in the title, the recorded configuration's time and the
    report's best drawn on the history. Every HTML refers to one ``plotly.min.js`` in
    `script_dir` (default `out_dir`). Only verified trials are drawn: penalties of failed and
    infeasible points would flatten the axes. A plot that cannot be made is skipped with a
    warning; nothing here fails the command once the plotting libraries are installed.
    Returns the files written.
    """
    kinds = plot_formats(formats)
    out_dir = Path(out_dir)
    script = None
    if "html" in kinds:
        script = plotview.shared_script(out_dir, Path(script_dir) if script_dir is not None else out_dir)
    kernel = str(((summary or {}).get("meta") or {}).get("kernel_name") or "")
    speedups = write_speedup_plot(summary, out_dir, kinds, kernel=kernel, script=script) if summary else []
    good = [r for r in store.records() if r.state == "COMPLETE" and r.status in ("ok", "cached") and r.params]
    if not good:
        log.warning("no plots written: study %r has no verified trial to plot yet", store.study_name)
        return speedups
    marks = {
        "recorded configuration": ((summary or {}).get("baseline") or {}).get("time"),
        "best (report)": ((summary or {}).get("best") or {}).get("time"),
    }
    caller = plugins.hook().mneme_study_plots
    if not caller.get_hookimpls():
        log.warning(
            "no study plots: no plugin draws them (`mneme plugins` lists the installed plugins and those "
            "disabled by -p no:NAME)"
        )
        return speedups
    answers = caller(
        records=good,
        out_dir=out_dir,
        kinds=kinds,
        kernel=kernel,
        marks={k: v for k, v in marks.items() if v is not None},
        script=script,
    )
    return speedups + [Path(path) for answer in answers for path in (answer or ())]
