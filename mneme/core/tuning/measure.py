"""The final comparison: the leading candidates against the baseline, interleaved, until the speedup is known.

Each candidate is compared with the recorded configuration in pairs of adjacent runs, each
pair's order drawn at random (a fair coin: baseline first or candidate first), so a slow drift of
the machine weighs on both sides alike and, whatever the load does, a pair's sign under no
difference is a coin toss (`interleave`). One run at a time goes to the pool, so with one worker
per device both sides run on the same worker, with the same cache state (``--cache``).
Pairs are added until the speedup's interval (`stats.paired_ratio`) is narrower than
``--ci-target``, `MAX_PAIRS` are done or ``--measure-time`` is spent: the first look. A verdict
still open there (the interval straddles 1.0, the estimate is faster by more than ``--ci-target``)
earns more pairs, doubling, up to ``--max-pairs``, and stops at the first look that decides
(`Looks`). With K candidates, each candidate's looks together are at error rate alpha/K, so the
K verdicts together claim a false difference at most alpha of the time, alpha = 1 - ``--confidence``
(0.5% by default; see docs/design/tuning.md, "Measurement that knows its noise" and "One level for
the whole table"). Outlying pairs, a baseline that drifted, a load average that
changed and runs that landed on different devices are reported with the result.
"""

from __future__ import annotations

import datetime
import logging
import os
import random
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
# The interval's width may end the first look only from this many pairs on. Over a few pairs the median's interval
# is nearly their range, and a narrow range is a tight cluster of alike pairs, which a quiet stretch of a loaded
# machine gives with one side slightly ahead: stopping there picks exactly the pairs that claim a false difference
# (replaying measured same-code pairs in order: 2.1% of comparisons claimed one with 3, 1.1% with 20;
# benchmarks/results/cpu-significance.md).
WIDTH_PAIRS = 20
MAX_PAIRS = 60  # the first look: the fixed phase ends here at the latest
FIRST_SHARE = 0.5  # of a candidate's error rate, spent at the first look when later looks may follow


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


@attrs.frozen
class Looks:
    """Where one comparison may judge its interval, and at which confidence each look judges.

    The first look ends the fixed phase (the interval narrow enough, or `MAX_PAIRS`). When the cap allows
    more pairs, later looks come at twice, four times ... `MAX_PAIRS` pairs and at the cap, all fixed by the
    cap before any run. A candidate's error rate `alpha` is split among them (alpha spending, Bonferroni over
    a fixed maximum of looks): `FIRST_SHARE` of it at the first look, the rest in equal shares at the later
    ones, so the looks together claim a false difference at most `alpha` of the time, however many are
    taken. Without later looks (``cap <= MAX_PAIRS``) the first look has all of it.

    A later look judges by two intervals, each at half its share: the median's (`stats.paired_ratio`, as at
    the first look) and the signed-rank one (`stats.signed_rank_ratio`), which uses the sizes of the pair
    ratios and separates in hundreds of pairs what the signs alone would take thousands for (timers that
    tick in steps: many pairs tie). Either one excluding 1.0 decides; the union bound still holds.
    """

    alpha: float
    cap: int = MAX_PAIRS

    @property
    def later(self) -> tuple[int, ...]:
        """Pair counts of the later looks, the cap last; empty when the cap leaves none."""
        points, n = [], 2 * MAX_PAIRS
        while n < self.cap:
            points.append(n)
            n *= 2
        if self.cap > MAX_PAIRS:
            points.append(self.cap)
        return tuple(points)

    @property
    def first(self) -> int:
        """Pairs at most before the first look."""
        return min(MAX_PAIRS, self.cap)

    @property
    def first_confidence(self) -> float:
        return 1.0 - self.alpha * (FIRST_SHARE if self.later else 1.0)

    @property
    def later_confidence(self) -> float:
        """The confidence of each of a later look's two intervals."""
        later = self.later
        return 1.0 - self.alpha * (1.0 - FIRST_SHARE) / len(later) / 2.0 if later else self.first_confidence

    def reach(self, base: list[float], cand: list[float]) -> float:
        """The largest speedup the pairs so far leave plausible: the upper end of the signed-rank interval at a
        later look's confidence (the narrower of the two). Whether to go on may look at anything: it only
        lets a look be skipped, never adds one."""
        ranks = stats.signed_rank_ratio(base, cand, self.later_confidence)
        return ranks.high if ranks is not None else 0.0

    def judge(self, base: list[float], cand: list[float]) -> stats.RatioInterval | None:
        """A later look's interval: the median's when it excludes 1.0, else the signed-rank one when it does,
        else the median's (undecided)."""
        median = stats.paired_ratio(base, cand, self.later_confidence)
        ranks = stats.signed_rank_ratio(base, cand, self.later_confidence)
        if median is not None and ranks is not None and not median.significant and ranks.significant:
            return ranks
        return median

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_pairs": self.cap,
            "looks": [self.first, *self.later],
            "first_confidence": self.first_confidence,
            "later_confidence": self.later_confidence,
        }


def row_confidence(table_confidence: float, rows: int) -> float:
    """The confidence each of `rows` compared rows of one table is judged at (over all its looks), so that all
    their verdicts together hold at `table_confidence` (Bonferroni: the rows' error rates add up to the table's)."""
    return 1.0 - (1.0 - table_confidence) / max(1, rows)


def rejudge(
    base: list[float], cand: list[float], first: int | None, cap: int, confidence: float
) -> stats.RatioInterval | None:
    """A stored comparison's interval judged again at a stricter `confidence`, at the looks it took.

    The looks are those of ``Looks(1 - confidence, cap)``: the first at `first` pairs (all of them when unknown:
    a comparison from before the later looks), then each later look the pairs reached, the last one at the pairs
    made when the comparison stopped between two (the time cap). It decides at the first look whose interval
    excludes 1.0, else it is the last look's: the same spending as `interleave`, so it holds `confidence`
    whatever made the comparison stop where it did (going on can only skip looks)."""
    plan = Looks(1.0 - confidence, cap)
    n = min(len(base), len(cand))
    done = min(first or n, n)
    interval = stats.paired_ratio(base[:done], cand[:done], plan.first_confidence)
    for target in plan.later:
        if interval is None or interval.significant or done >= n:
            break
        done = min(target, n)
        interval = plan.judge(base[:done], cand[:done])
    return interval


def open_beyond(ci_target: float, decided: list[stats.RatioInterval | None]) -> float:
    """The speedup that must still be plausible (`Looks.reach`) for an undecided candidate to earn more pairs:
    faster than the recorded configuration by more than `ci_target`, and faster than every candidate already
    significantly faster (best.json takes the fastest of those, so a slower one could not change it)."""
    faster = [i.ratio for i in decided if i is not None and i.significant and i.ratio > 1.0]
    return max([1.0 + ci_target, *faster])


@attrs.define
class Pairs:
    """The runs of one interleaved comparison: both sides' times, why it stopped, the speedup's interval,
    the pairs made by the first look and how many looks judged."""

    base: list[float]
    cand: list[float]
    stopped: str
    interval: stats.RatioInterval | None
    first: int = 0
    looks: int = 0
    candidate_first: list[bool] = attrs.Factory(list)  # each pair's order, as drawn

    @property
    def extra(self) -> int:
        """Pairs made after the first look (the open verdict's)."""
        return len(self.cand) - self.first


def _fair_coin(rng: random.Random) -> Callable[[], bool]:
    return lambda: rng.random() < 0.5


def interleave(
    time_baseline: Callable[[], float | None],
    time_candidate: Callable[[], float | None],
    *,
    repeats: int,
    ci_target: float,
    confidence: float,
    out_of_time: Callable[[], bool],
    max_pairs: int = MAX_PAIRS,
    beyond: float | None = None,
    coin: Callable[[], bool] | None = None,
) -> Pairs:
    """Pairs of runs, each pair's order drawn by `coin` (True: the candidate runs first; by default a fair coin),
    judged at the looks of ``Looks(1 - confidence, max_pairs)``.

    Why at random and not alternating: the intervals count a pair's sign (and, at later looks, its rank) as a
    coin toss when both sides run the same code. With the order drawn at random that holds whatever the machine
    does (the sign is the coin's times the sign of first run minus second), and for a constant speedup the log
    ratios minus its log are sign-symmetric, so the intervals hold their level under any pattern of load. An
    alternating order (B C | C B | B C ...) needs the pairs independent: a load that follows the alternation (a
    disturbance every fourth run lands on the baseline every time) passes for a speedup
    (`tests/core/tuning/test_pair_order.py`), and a burst that spans the boundary of two pairs slows the same
    side in both. On the loaded 2-core VM neither was seen (benchmarks/results/cpu-significance.md): the random
    order removes an assumption, not a measured error.

    The first look comes once the speedup's interval is narrower than `ci_target` (after at least
    ``max(WIDTH_PAIRS, repeats)`` pairs), `out_of_time()` says so (after at least ``max(MIN_PAIRS, repeats)``)
    or ``min(MAX_PAIRS, max_pairs)`` pairs are done. While the verdict is open after a look (the interval contains 1.0 and a speedup beyond `beyond`,
    by default ``1 + ci_target``, is still plausible: `Looks.reach`), pairs go on to the next look
    (`Looks.judge`); the comparison stops at the first
    look whose interval excludes 1.0, when no speedup beyond `beyond` is left plausible, at the last look, the time
    cap (judged there, as that look) or a failed run (a None time). `confidence` is the candidate's: all
    its looks together claim a false difference at most ``1 - confidence`` of the time.

    Each callable runs one experiment and returns its objective. `Comparison` times them on the pool;
    `simulate` draws them from a sweep, so a simulated run ends the way `mneme tune` does.
    """
    plan = Looks(1.0 - confidence, max_pairs)
    beyond = 1.0 + ci_target if beyond is None else beyond
    coin = coin if coin is not None else _fair_coin(random.Random())
    base: list[float] = []
    cand: list[float] = []
    candidate_first: list[bool] = []

    def pair() -> bool:
        order = ((time_baseline, base), (time_candidate, cand))
        flipped = coin()
        if flipped:
            order = order[::-1]
        values = [run() for run, _ in order]
        if None in values:
            return False
        for (_, series), value in zip(order, values):
            series.append(value)
        candidate_first.append(flipped)
        return True

    stopped, interval = "pairs", None
    while len(cand) < plan.first:
        if not pair():
            looked = 1 if interval is not None else 0
            return Pairs(base, cand, "a run failed", interval, len(cand), looked, candidate_first)
        interval = stats.paired_ratio(base, cand, plan.first_confidence)
        if len(cand) >= max(MIN_PAIRS, repeats) and interval is not None:
            if interval.width <= ci_target and len(cand) >= WIDTH_PAIRS:
                stopped = "interval"
                break
            if out_of_time():
                stopped = "time cap"
                break
    found = Pairs(base, cand, stopped, interval, len(cand), 1, candidate_first)
    for target in plan.later:
        if found.stopped == "time cap" or interval is None or interval.significant:
            break
        if plan.reach(base, cand) <= beyond:
            if found.looks > 1:
                found.stopped = "no speedup beyond the threshold left"
            break
        found.stopped = "max pairs"
        while len(cand) < target:
            if not pair():
                found.stopped = "a run failed"
                return found
            if out_of_time():
                found.stopped = "time cap"  # judged here, as this look
                break
        interval = found.interval = plan.judge(base, cand)
        found.looks += 1
        if interval is not None and interval.significant:
            found.stopped = "decided"
    return found


class Comparison:
    """Interleaved A/B runs of the baseline and one candidate on the session's pool."""

    def __init__(self, ctx: MeasureContext, confidence: float | None = None):
        self.ctx = ctx
        self.confidence = ctx.confidence if confidence is None else confidence  # one row's: `row_confidence`
        self.baseline_times: list[float] = []  # every baseline run of every comparison, in order
        self.devices: set[str] = set()

    def _time(self, config: ExperimentConfiguration) -> tuple[float | None, ExperimentResult]:
        result = judged(result_of(self.ctx.pool.submit(config)), self.ctx.timed_by)
        self.devices.add(f"{result.device}:{result.gpu_id}")
        return objective(result), result

    def compare(
        self, candidate: ExperimentConfiguration, record: TrialRecord | None, beyond: float | None = None
    ) -> dict[str, Any]:
        """Compare `candidate` with the baseline (`interleave`); an open verdict earns more pairs while its
        estimate exceeds `beyond` (`open_beyond`)."""
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
            max_pairs=ctx.max_pairs,
            beyond=beyond,
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
            "first_pairs": pairs.first,
            "extra_pairs": pairs.extra,
            "looks": pairs.looks,
            "candidate_first": [int(flag) for flag in pairs.candidate_first],
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
    # Several candidates, one table: each candidate's looks at 1 - alpha/K together, so that the chance that any
    # of the K claims a difference that is not there stays alpha = 1 - ctx.confidence (Bonferroni).
    confidence = row_confidence(ctx.confidence, len(chosen))
    comparison = Comparison(ctx, confidence)
    out: dict[str, Any] = {}
    decided: list[stats.RatioInterval | None] = []
    for digest, record in chosen.items():
        beyond = open_beyond(ctx.ci_target, decided)
        entry = comparison.compare(ExperimentConfiguration.from_dict(record.config), record, beyond)
        # What the row's verdict was judged at, so a table that later holds more compared rows (another session on
        # the same study) can judge it again at its stricter share (`report.table_verdicts`).
        out[digest] = {
            **entry,
            "row_confidence": confidence,
            "table_confidence": ctx.confidence,
            "max_pairs": ctx.max_pairs,
        }
        speedup = entry["speedup"]
        if speedup is not None:
            decided.append(stats.RatioInterval(speedup["speedup"], speedup["low"], speedup["high"]))
        log.info(
            "trial %d vs the recorded configuration: %s after %d pairs (%d after the first look; %s)",
            record.number,
            stats.format_interval(speedup),
            entry["pairs"],
            entry["extra_pairs"],
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
        "family_confidence": ctx.confidence,
        "compared": len(chosen),
        **Looks(1.0 - confidence, ctx.max_pairs).to_dict(),
        "extra_pairs": sum(e.get("extra_pairs", 0) for e in out.values() if not e["baseline"]),
    }
    for note in notes:
        log.warning("%s", note)
    return out, measurement
