"""Search strategies tried offline: a sweep answers for the device (an oracle), with its measured noise.

`simulate` runs one sampler against a `Sweep` as `mneme tune` runs it against a device, with
`mneme tune`'s defaults (`TuneOptions`, read here so the two cannot drift apart):

- the search: the sampler proposes, the point's stored times answer (with ``noise``, an experiment of
  ``--iterations`` timed runs drawn with replacement from the point's measured runs, and its median: the
  spread a real run shows), duplicates are answered for free, and so is a configuration that compiled to
  code measured already in the run (the sweep's ``equivalent_to``: the first one's answer, as the loop
  does); ``budget`` counts distinct configurations measured; as many experiments are in flight as the loop keeps (one worker and as many
  prefetched), so the sampler proposes its next point before the last one's answer is in;
- the end: the ``--retime-top`` leading candidates by search time are each compared with the recorded
  configuration in interleaved pairs of such experiments (`measure.interleave`, the code `mneme tune`
  runs), until the interval is narrower than ``--ci-target`` and, while a verdict is open, in more pairs up to
  ``--max-pairs`` (`measure.Looks`, `measure.open_beyond`); the configuration the run picks is the one
  ``best.json`` would hold (`report.choose_best`): the fastest candidate significantly faster than the
  recorded configuration, else the recorded configuration.

Its result says how close that pick comes to the sweep's optimum (true medians, not the noisy draws),
and how close the fastest configuration by search time alone comes (``search_fraction``: the search's
quality before the comparison). `compare` repeats that over seeds, samplers and budgets and puts
intervals on the figures (see docs/design/tuning.md, "Simulation", and docs/design/default-sampler.md).
"""

from __future__ import annotations

import collections
import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from mneme.core.errors import UsageError
from mneme.core.tuning import stats
from mneme.core.tuning.loop import MAX_DUPLICATES
from mneme.core.tuning.measure import interleave, open_beyond, row_confidence
from mneme.core.tuning.options import TuneOptions
from mneme.core.tuning.outcome import PENALTY_FACTOR
from mneme.core.tuning.report import choose_best, rank_key
from mneme.core.tuning.samplers import create_sampler
from mneme.core.tuning.space import MAX_SAMPLE_RETRIES
from mneme.core.tuning.sweep import Sweep

log = logging.getLogger(__name__)
NEAR = 0.95  # "reached the optimum": within 5% of its time


def _tune_default(name: str) -> Any:
    return attrs.fields_dict(TuneOptions)[name].default


@attrs.frozen
class Protocol:
    """What `mneme tune` does around the sampler, by default: the options a simulated run follows."""

    iterations: int = _tune_default("iterations")  # timed runs per experiment (their median is its time)
    in_flight: int = 2  # experiments in flight: one worker, and as many prefetched (`TuneOptions.prefetch`)
    retime_top: int = _tune_default("retime_top")
    retime_repeats: int = _tune_default("retime_repeats")
    ci_target: float = _tune_default("ci_target")
    max_pairs: int = _tune_default("max_pairs")
    accept_insignificant: bool = _tune_default("accept_insignificant")
    confidence: float = _tune_default("confidence")  # the final table's level (`measure.row_confidence`)


@attrs.define
class Simulation:
    """One simulated run: what it measured, what it would pick, and how good that is."""

    sampler: str
    budget: int
    seed: int
    trials: int = 0  # distinct configurations measured
    duplicates: int = 0
    equivalent: int = 0  # configurations that compiled to code measured already: answered from it, no budget
    infeasible: int = 0
    missing: int = 0  # proposed configurations the sweep has no measurement of (answered as failures)
    pick: str = ""  # hash of the configuration best.json would hold (after the final comparison)
    pick_time: float | None = None  # its true (median) time
    fraction: float = 0.0  # optimum time / pick's true time (1.0: the optimum)
    search_pick: str = ""  # hash of the configuration with the best observed time during the search
    search_fraction: float = 0.0  # optimum time / its true time
    compared: int = 0  # candidates compared with the recorded configuration at the end
    pairs: int = 0  # interleaved pairs those comparisons took, together
    extra_pairs: int = 0  # of those, the pairs made after a comparison's first look (its verdict open)
    decision: str = ""  # why best.json holds the pick (`report.choose_best`)
    reached_at: int | None = None  # distinct trials until a point within NEAR of the optimum was measured
    stop: str = ""

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def simulate(
    sweep: Sweep,
    sampler_spec: str,
    budget: int,
    seed: int = 0,
    *,
    noise: bool = True,
    space: Any = None,
    protocol: Protocol | None = None,
) -> Simulation:
    """Run `sampler_spec` for `budget` distinct configurations against `sweep`, then `mneme tune`'s final
    comparison (`protocol`, by default `mneme tune`'s defaults)."""
    protocol = protocol or Protocol()
    space = space if space is not None else sweep.load_space()
    sampler = create_sampler(sampler_spec, seed=seed)
    sampler.bind(space, parallel=1, budget=budget)
    rng = np.random.default_rng(seed)
    penalty = (sweep.baseline.value or sweep.optimum) * PENALTY_FACTOR
    sampler.penalty = penalty  # as the loop sets it
    optimum = sweep.optimum
    run = Simulation(sampler_spec, budget, seed)
    observed: dict[str, float] = {}
    code: dict[str, float] = {}  # the answer of each code measured (a point's own hash, or its `equivalent_to`)
    answered: set[str] = set()  # configurations answered from code measured already: no trial of their own
    running: collections.deque = collections.deque()  # (ask, value) of experiments in flight, oldest first
    streak = infeasible_streak = 0
    while True:
        if len(running) >= max(1, protocol.in_flight) or (running and (run.trials >= budget or run.stop)):
            ask, value = running.popleft()  # the oldest experiment ends (one worker: in order)
            sampler.tell(ask, value)
            continue
        if run.trials >= budget or run.stop:
            break
        if streak >= MAX_DUPLICATES:
            run.stop = "exhausted"
            continue
        if infeasible_streak >= MAX_SAMPLE_RETRIES:
            run.stop = "no feasible point"
            continue
        ask = sampler.ask()
        if ask is None:
            run.stop = "exhausted"
            continue
        config = space.feasible(space.decode(ask.encoded))
        if config is None:
            run.infeasible += 1
            infeasible_streak += 1
            sampler.infeasible(ask.encoded)
            sampler.tell(ask, penalty)
            continue
        infeasible_streak = 0
        digest = config.hash()
        if digest in observed:  # measured, or in flight (its answer is drawn already): no budget
            run.duplicates += 1
            streak += 1
            sampler.tell(ask, observed[digest])
            continue
        point = sweep.points.get(digest)
        shared = point.equivalent_to if point is not None and point.equivalent_to else digest
        if shared in code:  # the loop's equivalence: the first experiment's answer, no budget (`TrialLoop.finish`)
            run.equivalent += 1
            streak += 1
            observed[digest] = code[shared]
            answered.add(digest)
            running.append((ask, code[shared]))
            continue
        streak = 0
        value = _answer(sweep, digest, rng, noise, penalty, protocol.iterations)
        if digest not in sweep.points and digest != sweep.baseline_hash:
            run.missing += 1
        observed[digest] = code[shared] = value
        run.trials += 1
        true = _true_time(sweep, digest)
        if run.reached_at is None and true is not None and optimum / true >= NEAR:
            run.reached_at = run.trials
        running.append((ask, value))
    run.stop = run.stop or "budget"
    if observed:
        run.search_pick = min(observed, key=observed.get)
        search_time = _true_time(sweep, run.search_pick)
        run.search_fraction = optimum / search_time if search_time else 0.0
    _finish(run, sweep, {d: v for d, v in observed.items() if d not in answered}, rng, noise, penalty, protocol)
    return run


def _finish(
    run: Simulation,
    sweep: Sweep,
    observed: dict[str, float],
    rng: np.random.Generator,
    noise: bool,
    penalty: float,
    protocol: Protocol,
) -> None:
    """`mneme tune`'s end: compare the leading candidates with the recorded configuration, pick as best.json does."""
    base = sweep.baseline_hash
    base_value = sweep.baseline.value
    ok = {d: v for d, v in observed.items() if v < penalty and _true_time(sweep, d) is not None}
    # `measure.leaders`: the best distinct verified configurations by search time, the baseline aside.
    leaders = sorted((d for d in ok if d != base), key=lambda d: ok[d])[: protocol.retime_top]
    confidence = row_confidence(protocol.confidence, len(leaders))
    rows: dict[str, dict[str, Any]] = {}
    decided: list[stats.RatioInterval | None] = []
    for digest in leaders:
        pairs = compare_points(
            sweep,
            digest,
            rng,
            protocol,
            confidence,
            noise=noise,
            penalty=penalty,
            beyond=open_beyond(protocol.ci_target, decided),  # as `measure.measure` passes it
        )
        decided.append(pairs.interval)
        run.compared += 1
        run.pairs += len(pairs.cand)
        run.extra_pairs += pairs.extra
        if pairs.interval is not None and pairs.cand:
            rows[digest] = _row(digest, pairs.interval.ratio, pairs.interval.significant, "interleaved")
            rows[digest]["time"] = statistics.median(pairs.cand)
    for digest, value in ok.items():  # known from the search only: an estimate, never a verdict
        if digest not in rows and digest != base and base_value:
            rows[digest] = {**_row(digest, base_value / value, False, "search"), "time": value}
    if base_value is not None:
        rows[base] = {**_row(base, 1.0, False, "baseline"), "baseline": True, "time": base_value}
    best, run.decision = choose_best(sorted(rows.values(), key=rank_key), protocol.accept_insignificant)
    if best is not None:
        run.pick = best["hash"]
        run.pick_time = _true_time(sweep, run.pick)
        run.fraction = sweep.optimum / run.pick_time if run.pick_time else 0.0


def compare_points(
    sweep: Sweep,
    digest: str,
    rng: np.random.Generator,
    protocol: Protocol,
    confidence: float,
    noise: bool = True,
    penalty: float = 1.0,
    beyond: float | None = None,
) -> Any:
    """Sweep point `digest` against the recorded configuration, compared as `mneme tune`'s final comparison does
    (`measure.interleave` at `confidence`, each pair's order from `rng`); the `Pairs` it returns."""
    return interleave(
        lambda: _answer(sweep, sweep.baseline_hash, rng, noise, penalty, protocol.iterations),
        lambda: _answer(sweep, digest, rng, noise, penalty, protocol.iterations),
        repeats=protocol.retime_repeats,
        ci_target=protocol.ci_target,
        confidence=confidence,
        out_of_time=lambda: False,  # --measure-time: see docs/design/default-sampler.md, "What is simulated"
        max_pairs=protocol.max_pairs,
        beyond=beyond,
        coin=lambda: bool(rng.random() < 0.5),  # each pair's order, from the run's seed
    )


def _row(digest: str, speedup: float, significant: bool, method: str) -> dict[str, Any]:
    return {"hash": digest, "speedup": speedup, "significant": significant, "method": method, "baseline": False}


def _true_time(sweep: Sweep, digest: str) -> float | None:
    if digest == sweep.baseline_hash:
        return sweep.baseline.value
    point = sweep.points.get(digest)
    return point.value if point is not None and point.ok else None


def _answer(
    sweep: Sweep, digest: str, rng: np.random.Generator, noise: bool, penalty: float, iterations: int = 3
) -> float:
    """What an experiment of the configuration would report: the median of `iterations` timed runs, drawn
    with replacement from the point's measured runs when `noise`, else the point's median."""
    point = sweep.points.get(digest)
    if digest == sweep.baseline_hash:
        times, value = sweep.baseline.times, sweep.baseline.value
    elif point is None or not point.ok:
        return penalty  # failed, did not verify, or not in the sweep
    else:
        times, value = point.times, point.value
    if not noise or len(times) < 2:
        return float(value)
    return float(np.median(rng.choice(times, size=max(1, iterations), replace=True)))


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
    sweep: Sweep,
    samplers: Sequence[str],
    budgets: Sequence[str],
    repeats: int = 20,
    *,
    noise: bool = True,
    protocol: Protocol | None = None,
) -> list[dict[str, Any]]:
    """Every sampler at every budget, `repeats` seeds each: the fraction of the optimum that the pick reaches
    (the configuration best.json would hold; mean and 95% interval, and median), the same for the fastest
    configuration by search time alone (``search_fraction``), how often the search measured a point within
    5% of the optimum (Wilson interval), and the distinct trials that took (median and range over the runs
    that did)."""
    if repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {repeats}")
    space = sweep.load_space()
    size = sum(1 for p in sweep.points.values() if p.status)
    rows = []
    for spec in samplers:
        for text in budgets:
            budget = budget_of(text, size)
            try:
                runs = [
                    simulate(sweep, spec, budget, seed, noise=noise, space=space, protocol=protocol)
                    for seed in range(repeats)
                ]
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
                    "search_fraction": float(np.mean([r.search_fraction for r in runs])),
                    "search_fraction_median": float(np.median([r.search_fraction for r in runs])),
                    "pairs": float(np.median([r.pairs for r in runs])),
                    "pairs_max": max(r.pairs for r in runs),
                    "extra_pairs": float(np.median([r.extra_pairs for r in runs])),
                    "extra_pairs_mean": float(np.mean([r.extra_pairs for r in runs])),
                    "recorded_picked": sum(r.pick == sweep.baseline_hash for r in runs) / len(runs),
                    "reached": len(reached) / len(runs),
                    "reached_ci": [hit_low, hit_high],
                    "trials_needed": float(np.median(reached)) if reached else None,
                    "trials_needed_range": [min(reached), max(reached)] if reached else None,
                    "duplicates": float(np.mean([r.duplicates for r in runs])),
                    "missing": sum(r.missing for r in runs),
                }
            )
    return rows
