"""The final comparison: the leading candidates against the baseline, interleaved, until the speedup is known.

Each candidate is compared with the recorded configuration in pairs of adjacent runs,
alternating the order (baseline-candidate, candidate-baseline, ...) so a slow drift of the
machine weighs on both sides alike. One run at a time goes to the pool, so with one worker
per device both sides run on the same worker, with the same cache state (``--cache``).
Pairs are added until the speedup's interval (`stats.paired_ratio`) is narrower than
``--ci-target`` or ``--measure-time`` is spent. With K candidates, each interval is at
confidence 1 - 5%/K, so the K verdicts together claim a false difference at most 5% of the
time (see docs/design/tuning.md, "Measurement
that knows its noise"). Outlying pairs, a baseline that drifted, a load average that
changed and runs that landed on different devices are reported with the result.
"""

from __future__ import annotations

import datetime
import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from mneme.core.tuning import stats
from mneme.core.tuning.outcome import judged, objective, result_of
from mneme.core.tuning.store import TrialRecord
from mneme.core.types import ExperimentConfiguration, ExperimentResult

if TYPE_CHECKING:
    from mneme.core.tuning.context import MeasureContext

log = logging.getLogger(__name__)

MIN_PAIRS = 3
MAX_PAIRS = 60


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not every platform has a load average
        return None


def leaders(ctx: MeasureContext, count: int) -> dict[str, TrialRecord]:
    """The `count` best distinct verified configurations of the study other than the baseline, by search time."""
    best: dict[str, TrialRecord] = {}
    for record in sorted((r for r in ctx.store.records() if r.ok), key=lambda r: r.value):
        if record.hash == ctx.baseline["hash"]:
            continue
        best.setdefault(record.hash, record)
        if len(best) >= count:
            break
    return best


@attrs.define
class Pairs:
    """The runs of one interleaved comparison: both sides' times, why it stopped, the speedup's interval."""

    base: list[float]
    cand: list[float]
    stopped: str
    interval: stats.RatioInterval | None


def interleave(
    time_baseline: Callable[[], float | None],
    time_candidate: Callable[[], float | None],
    *,
    repeats: int,
    ci_target: float,
    confidence: float,
    out_of_time: Callable[[], bool],
) -> Pairs:
    """Pairs of runs, the order alternating (baseline first, then candidate first, ...), until the speedup's
    interval is narrower than `ci_target` (after at least ``max(MIN_PAIRS, repeats)`` pairs), `out_of_time()`
    says so, a run fails (a None time) or `MAX_PAIRS` are done.

    Each callable runs one experiment and returns its objective. `Comparison` times them on the pool;
    `simulate` draws them from a sweep, so a simulated run ends the way `mneme tune` does.
    """
    base: list[float] = []
    cand: list[float] = []
    stopped = "pairs"
    interval = None
    while len(cand) < MAX_PAIRS:
        order = ((time_baseline, base), (time_candidate, cand))
        if len(cand) % 2:
            order = order[::-1]
        pair = [run() for run, _ in order]
        if None in pair:
            stopped = "a run failed"
            break
        for (_, series), value in zip(order, pair):
            series.append(value)
        interval = stats.paired_ratio(base, cand, confidence)
        if len(cand) >= max(MIN_PAIRS, repeats) and interval is not None:
            if interval.width <= ci_target:
                stopped = "interval"
                break
            if out_of_time():
                stopped = "time cap"
                break
    return Pairs(base, cand, stopped, interval)


class Comparison:
    """Interleaved A/B runs of the baseline and one candidate on the session's pool."""

    def __init__(self, ctx: MeasureContext, confidence: float = stats.CONFIDENCE):
        self.ctx = ctx
        self.confidence = confidence
        self.baseline_times: list[float] = []  # every baseline run of every comparison, in order
        self.devices: set[str] = set()

    def _time(self, config: ExperimentConfiguration) -> tuple[float | None, ExperimentResult]:
        result = judged(result_of(self.ctx.pool.submit(config)), self.ctx.timed_by)
        self.devices.add(f"{result.device}:{result.gpu_id}")
        return objective(result), result

    def compare(self, candidate: ExperimentConfiguration, record: TrialRecord | None) -> dict[str, Any]:
        ctx = self.ctx
        base_config = ExperimentConfiguration.from_dict(self.ctx.baseline["config"])
        errors: set[str] = set()
        started = time.monotonic()

        def timer(config: ExperimentConfiguration) -> Callable[[], float | None]:
            def run() -> float | None:
                value, result = self._time(config)
                if value is None:
                    errors.add(result.error_kind or "verify")
                return value

            return run

        pairs = interleave(
            timer(base_config),
            timer(candidate),
            repeats=ctx.retime_repeats,
            ci_target=ctx.ci_target,
            confidence=self.confidence,
            out_of_time=lambda: time.monotonic() - started >= ctx.measure_time,
        )
        base, cand, stopped, interval = pairs.base, pairs.cand, pairs.stopped, pairs.interval
        self.baseline_times.extend(base)
        ratios = [b / c for b, c in zip(base, cand)]
        return {
            "config": candidate.to_dict(),
            "trial": record.number if record is not None else None,
            "baseline": False,
            "verified": not errors and bool(cand),
            "medians": cand,
            "baseline_medians": base,
            "median": statistics.median(cand) if cand else None,
            "baseline_median": statistics.median(base) if base else None,
            "min": min(cand) if cand else None,
            "max": max(cand) if cand else None,
            "spread": (max(cand) - min(cand)) / statistics.median(cand) if len(cand) > 1 else 0.0,
            "errors": sorted(errors),
            "pairs": len(cand),
            "stopped": stopped,
            "seconds": time.monotonic() - started,
            "outliers": len(stats.outliers(ratios)),
            "speedup": interval.to_dict() if interval is not None and not errors else None,
        }


def measure(ctx: MeasureContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compare the leading candidates with the baseline; returns (entries by hash, measurement notes)."""
    if ctx.retime_top == 0:
        return {}, {}
    ctx.progress.phase = "comparing"
    ctx.on_progress(ctx.progress)
    load_before = _load()
    chosen = leaders(ctx, ctx.retime_top)
    # Several candidates, one verdict: each interval at 1 - 5%/K, so that the chance that any of the K
    # claims a difference that is not there stays 5% (Bonferroni).
    confidence = 1.0 - (1.0 - stats.CONFIDENCE) / max(1, len(chosen))
    comparison = Comparison(ctx, confidence)
    out: dict[str, Any] = {}
    for digest, record in chosen.items():
        entry = comparison.compare(ExperimentConfiguration.from_dict(record.config), record)
        out[digest] = entry
        log.info(
            "trial %d vs the recorded configuration: %s after %d pairs (%s)",
            record.number,
            stats.format_interval(entry["speedup"]),
            entry["pairs"],
            entry["stopped"],
        )
    base = comparison.baseline_times
    load_after = _load()
    notes = []
    moved = stats.drift(base)
    if moved is not None:
        notes.append(
            f"the baseline's time moved by {100 * (moved - 1):+.0f}% during the comparison (machine load "
            "changed); interleaving keeps each pair comparable"
        )
    if (
        load_before is not None
        and load_after is not None
        and abs(load_after - load_before) > max(1.0, 0.5 * load_before)
    ):
        notes.append(f"the load average changed from {load_before:.1f} to {load_after:.1f} while comparing")
    if len(comparison.devices) > 1:
        notes.append(
            f"pairs ran on different devices/workers ({', '.join(sorted(comparison.devices))}): "
            "each pair's two runs may not share a worker"
        )
    outlying = sum(e["outliers"] for e in out.values())
    if outlying:
        notes.append(
            f"{outlying} outlying pair(s) (beyond {stats.OUTLIER_MADS:.0f} MADs: a run hit by a burst of "
            "load) in the comparisons; the median-based intervals are robust to them"
        )
    if base:
        out[ctx.baseline["hash"]] = {
            "config": ctx.baseline["config"],
            "trial": None,
            "baseline": True,
            "verified": True,
            "medians": base,
            "median": statistics.median(base),
            "min": min(base),
            "max": max(base),
            "spread": (max(base) - min(base)) / statistics.median(base) if len(base) > 1 else 0.0,
            "errors": [],
            "pairs": len(base),
            "speedup": {"speedup": 1.0, "low": 1.0, "high": 1.0, "significant": False, "verdict": "baseline"},
        }
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    previous = ctx.store.retime
    previous.update({k: {**v, "session": ctx.session_id, "at": now} for k, v in out.items()})
    ctx.store.set_retime(previous)
    measurement = {
        "load_before": load_before,
        "load_after": load_after,
        "baseline_drift": moved,
        "notes": notes,
        "ci_target": ctx.ci_target,
        "confidence": confidence,
        "family_confidence": stats.CONFIDENCE,
        "compared": len(chosen),
    }
    for note in notes:
        log.warning("%s", note)
    return out, measurement
