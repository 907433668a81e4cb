"""Search strategies tried offline: a sweep answers for the device (an oracle), with its measured noise.

`simulate` runs one sampler against a `Sweep` as `mneme tune` would run it against a
device: the sampler proposes, the point's stored times answer (with ``noise``, the median of
its timed runs drawn again with replacement, so a sampler sees the spread a real run
shows), duplicates are answered for free and ``budget`` counts distinct configurations.
Its result says how close the configuration the run would pick comes to the sweep's
optimum (true medians, not the noisy draws). `compare` repeats that over seeds, samplers
and budgets and puts intervals on the figures (see docs/design/tuning.md, "Simulation").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from mneme.core.errors import UsageError
from mneme.core.tuning import stats
from mneme.core.tuning.loop import MAX_DUPLICATES
from mneme.core.tuning.outcome import PENALTY_FACTOR
from mneme.core.tuning.samplers import create_sampler
from mneme.core.tuning.space import MAX_SAMPLE_RETRIES
from mneme.core.tuning.sweep import Sweep

log = logging.getLogger(__name__)
NEAR = 0.95  # "reached the optimum": within 5% of its time


@attrs.define
class Simulation:
    """One simulated run: what it measured, what it would pick, and how good that is."""

    sampler: str
    budget: int
    seed: int
    trials: int = 0  # distinct configurations measured
    duplicates: int = 0
    infeasible: int = 0
    missing: int = 0  # proposed configurations the sweep has no measurement of (answered as failures)
    pick: str = ""  # hash of the configuration with the best observed time
    pick_time: float | None = None  # its true (median) time
    fraction: float = 0.0  # optimum time / pick's true time (1.0: the optimum)
    reached_at: int | None = None  # distinct trials until a point within NEAR of the optimum was measured
    stop: str = ""

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def simulate(
    sweep: Sweep, sampler_spec: str, budget: int, seed: int = 0, *, noise: bool = True, space: Any = None
) -> Simulation:
    """Run `sampler_spec` for `budget` distinct configurations against `sweep`."""
    space = space if space is not None else sweep.load_space()
    sampler = create_sampler(sampler_spec, seed=seed)
    sampler.bind(space, parallel=1, budget=budget)
    rng = np.random.default_rng(seed)
    penalty = (sweep.baseline.value or sweep.optimum) * PENALTY_FACTOR
    optimum = sweep.optimum
    run = Simulation(sampler_spec, budget, seed)
    observed: dict[str, float] = {}
    streak = infeasible_streak = 0
    while run.trials < budget:
        if streak >= MAX_DUPLICATES:
            run.stop = "exhausted"
            break
        if infeasible_streak >= MAX_SAMPLE_RETRIES:
            run.stop = "no feasible point"
            break
        ask = sampler.ask()
        if ask is None:
            run.stop = "exhausted"
            break
        config = space.feasible(space.decode(ask.encoded))
        if config is None:
            value = penalty
            run.infeasible += 1
            infeasible_streak += 1
            sampler.infeasible(ask.encoded)
        else:
            infeasible_streak = 0
            digest = config.hash()
            if digest in observed:
                value = observed[digest]
                run.duplicates += 1
                streak += 1
            else:
                streak = 0
                value = _answer(sweep, digest, rng, noise, penalty)
                if digest not in sweep.points and digest != sweep.baseline_hash:
                    run.missing += 1
                observed[digest] = value
                run.trials += 1
                true = _true_time(sweep, digest)
                if run.reached_at is None and true is not None and optimum / true >= NEAR:
                    run.reached_at = run.trials
        sampler.tell(ask, value)
    else:
        run.stop = "budget"
    if observed:
        run.pick = min(observed, key=observed.get)
        run.pick_time = _true_time(sweep, run.pick)
        run.fraction = optimum / run.pick_time if run.pick_time else 0.0
    return run


def _true_time(sweep: Sweep, digest: str) -> float | None:
    if digest == sweep.baseline_hash:
        return sweep.baseline.value
    point = sweep.points.get(digest)
    return point.value if point is not None and point.ok else None


def _answer(sweep: Sweep, digest: str, rng: np.random.Generator, noise: bool, penalty: float) -> float:
    """What a run of the configuration would report: the median of its timed runs, drawn again when `noise`."""
    point = sweep.points.get(digest)
    if digest == sweep.baseline_hash:
        times, value = sweep.baseline.times, sweep.baseline.value
    elif point is None or not point.ok:
        return penalty  # failed, did not verify, or not in the sweep
    else:
        times, value = point.times, point.value
    if not noise or len(times) < 2:
        return float(value)
    return float(np.median(rng.choice(times, size=len(times), replace=True)))


# -- comparing samplers --------------------------------------------------------------------------------


def budget_of(text: str, size: int) -> int:
    """A budget given as a count (``20``) or a fraction of the sweep's points (``10%``)."""
    text = text.strip()
    try:
        if text.endswith("%"):
            return max(1, round(float(text[:-1]) / 100.0 * size))
        return max(1, int(text))
    except ValueError:
        raise UsageError(f"--budget {text!r}: give a count (20) or a percentage of the sweep (10%)") from None


def _mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if len(array) < 2 or array.std() == 0.0:
        return mean, mean, mean
    half = stats.t_quantile(0.975, len(array) - 1) * float(array.std(ddof=1)) / math.sqrt(len(array))
    return mean, mean - half, mean + half


def _wilson(hits: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    z = 1.959963984540054
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if hits == 0 else max(0.0, centre - half)  # exact at the ends (rounding would leave 1e-17)
    high = 1.0 if hits == n else min(1.0, centre + half)
    return low, high


def compare(
    sweep: Sweep, samplers: Sequence[str], budgets: Sequence[str], repeats: int = 20, *, noise: bool = True
) -> list[dict[str, Any]]:
    """Every sampler at every budget, `repeats` seeds each: the fraction of the optimum reached (mean and 95%
    interval, and median), how often it got within 5% of the optimum (Wilson interval), and the distinct trials
    that took (median and range over the runs that did)."""
    if repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {repeats}")
    space = sweep.load_space()
    size = sum(1 for p in sweep.points.values() if p.status)
    rows = []
    for spec in samplers:
        for text in budgets:
            budget = budget_of(text, size)
            try:
                runs = [simulate(sweep, spec, budget, seed, noise=noise, space=space) for seed in range(repeats)]
            except (UsageError, ImportError) as exc:  # a family not installed (one from an extra)
                if isinstance(exc, UsageError) and "unknown sampler" not in str(exc):
                    raise
                rows.append({"sampler": spec, "budget": text, "trials": budget, "error": str(exc)})
                continue
            fractions = [r.fraction for r in runs]
            mean, low, high = _mean_interval(fractions)
            reached = [r.reached_at for r in runs if r.reached_at is not None]
            hit_low, hit_high = _wilson(len(reached), len(runs))
            rows.append(
                {
                    "sampler": spec,
                    "budget": text,
                    "trials": budget,
                    "repeats": repeats,
                    "fraction": mean,
                    "fraction_ci": [max(0.0, low), min(1.0, high)],
                    "fraction_median": float(np.median(fractions)),
                    "reached": len(reached) / len(runs),
                    "reached_ci": [hit_low, hit_high],
                    "trials_needed": float(np.median(reached)) if reached else None,
                    "trials_needed_range": [min(reached), max(reached)] if reached else None,
                    "duplicates": float(np.mean([r.duplicates for r in runs])),
                    "missing": sum(r.missing for r in runs),
                }
            )
    return rows
