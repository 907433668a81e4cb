"""`exhaustive` (every feasible point, in order) and `random` (uniform, seeded)."""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mneme.core.errors import UsageError
from mneme.core.tuning.samplers import Ask, Sampler
from mneme.core.types import canonical_json

log = logging.getLogger(__name__)


def _key(encoded: Mapping[str, Any]) -> str:
    return canonical_json(dict(encoded))


MAX_LISTED = 1_000_000  # points enumerated up front to order them
MAX_ORDERED = 20_000  # larger spaces are visited in a seeded random order (farthest-point costs N x budget)


def space_filling_order(points: list[dict[str, Any]], count: int, seed: int | None = None) -> list[dict[str, Any]]:
    """`points` reordered so that any prefix up to `count` spreads over the space (greedy farthest point).

    Each dimension's values are ranked and scaled to [0, 1], so an ordinal dimension of 11
    block sizes counts as much as a boolean. The first point is the centre-most; each next
    one is the point farthest from all chosen so far. Beyond `MAX_ORDERED` points, a seeded
    random permutation (which also covers the space, less evenly).
    """
    if len(points) <= 1 or count <= 0:
        return list(points)
    if len(points) > MAX_ORDERED:
        shuffled = list(points)
        random.Random(seed).shuffle(shuffled)
        return shuffled
    keys = sorted({k for p in points for k in p})
    columns = []
    for key in keys:
        distinct = {canonical_json(p.get(key)): p.get(key) for p in points}
        try:  # numbers in their order (as text, 16 would sort before 2)
            values = sorted(distinct, key=lambda text: distinct[text])
        except TypeError:
            values = sorted(distinct)
        rank = {v: i / max(1, len(values) - 1) for i, v in enumerate(values)}
        columns.append([rank[canonical_json(p.get(key))] for p in points])
    coords = np.asarray(columns, dtype=float).T
    start = int(np.argmin(((coords - coords.mean(axis=0)) ** 2).sum(axis=1)))
    order = [start]
    nearest = ((coords - coords[start]) ** 2).sum(axis=1)  # squared distance to the nearest chosen point
    marginal = np.abs(coords - coords[start])  # per dimension: distance to the nearest chosen value
    for _ in range(min(count, len(points)) - 1):
        # Far from every chosen point, and bringing new values along each dimension (a maximin design
        # with a projection term: booleans alone would otherwise take every corner first).
        score = np.sqrt(nearest) + 2.0 * marginal.sum(axis=1)
        score[order] = -1.0
        pick = int(np.argmax(score))
        order.append(pick)
        nearest = np.minimum(nearest, ((coords - coords[pick]) ** 2).sum(axis=1))
        marginal = np.minimum(marginal, np.abs(coords - coords[pick]))
    chosen = set(order)
    return [points[i] for i in order] + [p for i, p in enumerate(points) if i not in chosen]


class ExhaustiveSampler(Sampler):
    """Every feasible point of a finite space once (distinct grounded configurations only).

    Points already finished or running in the study (an earlier run, another process) are
    skipped, so resumed and shared runs split the enumeration instead of repeating it. When
    the budget is smaller than the space, the points are visited in a space-filling order
    (`space_filling_order`), not from one corner, and `note` says so.
    """

    name = "exhaustive"

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        if variant:
            raise UsageError(f"sampler 'exhaustive' has no variants, got 'exhaustive:{variant}'")
        if options:  # an option it ignored would let a misspelt one look accepted
            raise UsageError(
                f"sampler 'exhaustive' takes no options (--sampler-option), got {', '.join(sorted(options))}"
            )
        super().__init__(variant, seed=seed, **options)
        self._points: Iterator[dict[str, Any]] | None = None
        self._taken: set[str] = set()

    def bind(self, space: Any, **kwargs: Any) -> None:
        super().bind(space, **kwargs)
        self.note = ""
        enumeration = space.sample_exhaustive()
        points = list(itertools.islice(enumeration, MAX_LISTED))
        if len(points) == MAX_LISTED:  # too many to hold: the enumeration's order, said so
            self.note = (
                f"exhaustive: the space has more than {MAX_LISTED} points; they are visited in the "
                "enumeration's order (use another sampler to cover it within --trials)"
            )
            log.warning("%s", self.note)
            self._points = itertools.chain(points, enumeration)
            return
        if self.budget is not None and self.budget < len(points):
            points = space_filling_order(points, self.budget, self.seed)
            self.note = (
                f"exhaustive: the space has {len(points)} feasible points and --trials {self.budget} covers "
                f"{self.budget} of them, visited in a space-filling order (farthest point first), not "
                "the enumeration's first corner"
            )
            log.info("%s", self.note)
        self._points = iter(points)

    def ask(self) -> Ask | None:
        assert self._points is not None, "bind() first"
        for encoded in self._points:
            key = _key(encoded)
            if key not in self._taken:
                self._taken.add(key)
                return Ask(encoded)
        return None

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        self._taken.add(_key(encoded))


class RandomSampler(Sampler):
    """Independent uniform draws of every dimension (seeded with ``--seed``)."""

    name = "random"

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        if variant:
            raise UsageError(f"sampler 'random' has no variants, got 'random:{variant}'")
        if options:  # an option it ignored would let a misspelt one look accepted
            raise UsageError(f"sampler 'random' takes no options (--sampler-option), got {', '.join(sorted(options))}")
        super().__init__(variant, seed=seed, **options)
        self._rng = random.Random(seed)
        self._observed = 0

    def ask(self) -> Ask | None:
        prims = [p for p in self.space.primitives().values() if p.distribution() is not None]
        return Ask({p.name: p.sample(self._rng) for p in prims})

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        # A resumed run must not replay the interrupted run's draws: advance the stream.
        if value is not None:
            self._observed += 1
            self._rng.random()
