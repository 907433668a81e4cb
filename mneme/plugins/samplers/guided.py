"""`guided`: the default sampler. The recorded configuration, a space-filling start sized to the budget, then a
local search around the best points measured, narrowing the values that keep failing.

Why this shape, and why these settings, is docs/design/default-sampler.md. In short: a tuning budget
is usually a small share of the space (tens of trials), too small for a model-based sampler to leave its
random start-up; the recorded launch is the developer's own choice and a strong first point; a
space-filling design then covers every dimension's range once; and the remaining trials go to the
unmeasured neighbours (one dimension changed by one step, or one category swapped) of the best points,
best first, which is where the optimum of a launch/compiler space lies once its region is known.

The sampler is deterministic given its seed. Results it did not ask for (`observe`) join its history.
Failures (a told value equal to the loop's penalty, `Sampler.penalty`) feed
`failures.FailureMemory`, which bans the values blamed for them and freezes a dimension whose changes keep
failing, so that failures do not crowd out valid trials.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from mneme.core.errors import UsageError
from mneme.core.tuning import distributions as domains
from mneme.core.tuning.samplers import Ask, Sampler
from mneme.core.types import canonical_json
from mneme.plugins.samplers.failures import FailureMemory

log = logging.getLogger(__name__)

#: Share of the budget spent on the space-filling start (after the recorded configuration), rounded down:
#: one point per ten trials; the rest goes to the local search. docs/design/default-sampler.md says why.
START_SHARE = 0.1
MAX_LISTED = 5_000  # spaces up to this size are enumerated for the design; larger ones design over a random sample
RANDOM_POOL = 1_000  # points drawn for the design of a continuous or very large space
REAL_STEP = 0.1  # a real dimension's neighbour moves by this share of its range
DESIGN_ORDERED = 256  # points put in space-filling order (each costs a pass over the candidates); the rest shuffled


def _key(encoded: Mapping[str, Any]) -> str:
    return canonical_json(dict(encoded))


class GuidedSampler(Sampler):
    """Recorded configuration, space-filling start, then best-first local search (see the module's doc).

    Options (``--sampler-option``): ``start`` (share of the budget for the space-filling start, default
    0.1, rounded down), ``recorded`` (``false``: do not propose the recorded configuration first), ``narrow``
    (``false``: do not narrow failing values).
    """

    name = "guided"
    default_variant = ""  # `mneme tune`'s default sampler

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        if variant:
            raise UsageError(f"sampler 'guided' has no variants, got 'guided:{variant}'")
        from mneme.core.keys import check_keys

        check_keys(options, {"start", "recorded", "narrow"}, None, "sampler guided options", error=UsageError)
        super().__init__(variant, seed=seed, **options)
        try:
            self.start_share = float(options.get("start", START_SHARE))
        except (TypeError, ValueError):
            raise UsageError(f"sampler guided: start={options.get('start')!r} is not a number in [0, 1]") from None
        if not 0.0 <= self.start_share <= 1.0:
            raise UsageError(f"sampler guided: start={self.start_share} must be in [0, 1]")
        self.use_recorded = _flag(options.get("recorded", True), "recorded")
        self.narrow = _flag(options.get("narrow", True), "narrow")
        self._rng = random.Random(seed)
        self._prims: dict[str, Any] = {}
        self._values: dict[str, list[Any] | None] = {}  # a finite dimension's encoded values, in order
        self._taken: set[str] = set()  # asked, observed or running: never proposed again
        self._grounded: set[str] = set()  # their configurations' hashes (two points may derive one configuration)
        self._told: dict[str, tuple[dict[str, Any], float]] = {}  # key -> (encoded, value)
        self._start: list[dict[str, Any]] = []  # the recorded configuration, then the design, in order
        self._design: list[dict[str, Any]] = []  # the rest of the design, for when the local search runs dry
        self._anchor: dict[str, Any] | None = None
        self._enumerated = True  # False: the design is a sample of a larger space, which random draws continue
        self.failures = FailureMemory()
        self.note = ""

    @property
    def penalty(self) -> float | None:
        """`Sampler.penalty`, kept where it is read: the failure memory tells failures by it."""
        return self.failures.penalty

    @penalty.setter
    def penalty(self, value: float | None) -> None:
        self.failures.penalty = value

    # -- binding: the start ------------------------------------------------------------------------
    def bind(self, space: Any, *, parallel: int = 1, budget: int | None = None) -> None:
        super().bind(space, parallel=parallel, budget=budget)
        self._prims = {n: p for n, p in space.primitives().items() if p.distribution() is not None}
        if not self._prims:
            raise UsageError(f"space {space.name!r} has no sampled dimension; nothing for guided to search")
        self._values = {n: (list(p.encoded_values()) if p.finite else None) for n, p in self._prims.items()}
        self.failures.bind(self._values)
        points = self._candidates(space)
        recorded = self._recorded(space, points) if self.use_recorded else None
        start_budget = budget if budget is not None else len(points)
        count = math.floor(self.start_share * start_budget) if start_budget else 0
        chosen = [recorded] if recorded is not None else []
        design = self._space_filling(points, chosen, max(count, DESIGN_ORDERED))
        ordered = {_key(p) for p in design + chosen}
        rest = [p for p in points if _key(p) not in ordered]
        random.Random(f"{self.seed}:rest").shuffle(rest)  # for when the local search runs dry (own stream)
        self._start = chosen + design[:count]
        self._anchor = recorded  # what the local search starts from while no answer is in yet
        self._design = design[count:] + rest
        self.note = (
            f"guided: {'the recorded configuration, ' if recorded is not None else ''}"
            f"{min(count, len(design))} space-filling point(s), then a local search around the best"
        )
        log.info("%s", self.note)

    def _candidates(self, space: Any) -> list[dict[str, Any]]:
        """Feasible points to design over: every one of a finite space (up to MAX_LISTED), else a random sample."""
        size = space.size() if space.finite else None
        self._enumerated = size is not None and size <= MAX_LISTED
        if self._enumerated:  # bounded before constraints: enumerating costs a derivation each
            return list(space.sample_exhaustive())
        rng = random.Random(self._rng.random())
        drawn: dict[str, dict[str, Any]] = {}
        for _ in range(RANDOM_POOL):
            try:
                encoded = space.sample_random(rng)
            except UsageError:
                break
            drawn.setdefault(_key(encoded), encoded)
        return list(drawn.values())

    def _recorded(self, space: Any, points: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The encoded point whose configuration is the recorded launch (None when the space has none).

        Built from the recorded configuration's fields (``block_x`` from its block, ``specialize`` from its
        field, a knob from its knobs) and checked by hash; else looked up among the candidates.
        """
        baseline = getattr(space, "baseline", None)
        if baseline is None:
            return None
        try:
            config = baseline()
            target = config.hash()
        except (TypeError, ValueError, AttributeError):
            return None
        direct = self._encode_config(space, config)
        if direct is not None and self._digest(direct) == target:
            return direct
        for encoded in points:
            if self._digest(encoded) == target:
                return encoded
        return None

    def _encode_config(self, space: Any, config: Any) -> dict[str, Any] | None:
        values = {}
        for name, prim in space.primitives().items():
            kind, _, axis = name.partition("_")
            if kind in ("block", "grid") and axis in ("x", "y", "z"):
                value = getattr(getattr(config, kind), axis)
            elif hasattr(config, name) and name != "knobs":
                value = getattr(config, name)
            elif name in (getattr(config, "knobs", None) or {}):
                value = config.knobs[name]
            elif prim.distribution() is None:
                continue
            else:
                return None
            values[name] = value
        try:
            return space.encode(values)
        except (KeyError, ValueError, TypeError, UsageError):
            return None

    def _coordinates(self, points: list[dict[str, Any]]) -> np.ndarray:
        """Each point's dimensions as ranks scaled to [0, 1] (a boolean counts as much as 11 block sizes)."""
        columns = []
        for name in self._prims:
            values = self._values[name]
            dist = self._prims[name].distribution()
            if values is not None:
                rank = {canonical_json(v): i / max(1, len(values) - 1) for i, v in enumerate(values)}
                columns.append([rank.get(canonical_json(p.get(name)), 0.5) for p in points])
            else:
                low, high = _real_bounds(dist)
                columns.append([_unit(dist, p.get(name), low, high) for p in points])
        return np.asarray(columns, dtype=float).T

    def _space_filling(
        self, points: list[dict[str, Any]], chosen: list[dict[str, Any]], count: int
    ) -> list[dict[str, Any]]:
        """Up to `count` of `points` (not in `chosen`) in a greedy maximin order that complements `chosen`.

        Each next point is the farthest from every point chosen so far and brings new values along each
        dimension (the projection term: booleans alone would otherwise take every corner first); ties go
        to the seeded random stream, so seeds give different designs of the same quality.
        """
        taken = {_key(p) for p in chosen}
        pool = [p for p in points if _key(p) not in taken]
        if not pool or count <= 0:
            return []
        coords = self._coordinates(pool)
        jitter = np.asarray([self._rng.random() for _ in pool]) * 1e-6
        if chosen:
            anchors = self._coordinates(chosen)
            nearest = np.min(((coords[:, None, :] - anchors[None, :, :]) ** 2).sum(axis=2), axis=1)
            marginal = np.min(np.abs(coords[:, None, :] - anchors[None, :, :]), axis=1)
        else:
            nearest = np.full(len(pool), np.inf)
            marginal = np.ones_like(coords)
        order: list[int] = []
        for _ in range(min(count, len(pool))):
            score = np.sqrt(np.minimum(nearest, 1e9)) + 2.0 * marginal.sum(axis=1) + jitter
            score[order] = -1.0
            pick = int(np.argmax(score))
            order.append(pick)
            nearest = np.minimum(nearest, ((coords - coords[pick]) ** 2).sum(axis=1))
            marginal = np.minimum(marginal, np.abs(coords - coords[pick]))
        return [pool[i] for i in order]

    # -- asking ------------------------------------------------------------------------------------
    def ask(self) -> Ask | None:
        assert self.space is not None, "bind() first"
        while self._start:
            encoded = self._start.pop(0)
            if self._admissible(encoded):
                return self._take(encoded)
        encoded = self._neighbour()
        if encoded is None:
            while self._design:
                candidate = self._design.pop(0)
                if self._admissible(candidate):
                    encoded = candidate
                    break
        if encoded is None and not self._enumerated:  # a sampled space is not covered: draw more of it
            for _ in range(RANDOM_POOL):
                try:
                    candidate = self.space.sample_random(self._rng)
                except UsageError:
                    break
                if self._admissible(candidate):
                    encoded = candidate
                    break
        return self._take(encoded) if encoded is not None else None

    def _take(self, encoded: dict[str, Any]) -> Ask:
        self._mark(encoded)
        return Ask(dict(encoded))

    def _mark(self, encoded: Mapping[str, Any]) -> None:
        self._taken.add(_key(encoded))
        digest = self._digest(encoded)
        if digest is not None:
            self._grounded.add(digest)

    def _digest(self, encoded: Mapping[str, Any]) -> str | None:
        try:
            config = self.space.feasible(self.space.decode(encoded))
        except UsageError:
            return None
        return config.hash() if config is not None else None

    def _admissible(self, encoded: Mapping[str, Any]) -> bool:
        """Not proposed or measured yet (as a point or as the configuration it derives), feasible, and not
        ruled out by the failures so far."""
        if _key(encoded) in self._taken:
            return False
        if self.narrow and not self.failures.allows(encoded):
            return False
        digest = self._digest(encoded)
        if digest is None or digest in self._grounded:
            self._taken.add(_key(encoded))  # infeasible or measured already: never a candidate again
            return False
        return True

    def _neighbour(self) -> dict[str, Any] | None:
        """An unmeasured feasible neighbour of the best told point that has one, best first."""
        ranked = sorted(self._told.values(), key=lambda item: item[1])
        if not ranked and self._anchor is not None:
            # Asked while the first points are still running (the loop prefetches): the recorded launch is the
            # best bet there is, so search around it rather than far off in the design.
            ranked = [(self._anchor, math.inf)]
        for encoded, value in ranked:
            if self.failures.is_failure(value):
                break  # only failures are left: their neighbours are no better bets than the design
            options = [n for n in self._neighbours(encoded) if self._admissible(n)]
            if options:
                return self._rng.choice(options)
        return None

    def _neighbours(self, encoded: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for name, prim in self._prims.items():
            current = encoded.get(name)
            values = self._values[name]
            dist = prim.distribution()
            if values is None:  # a real dimension: one step of REAL_STEP of its range either way
                low, high = _real_bounds(dist)
                for sign in (-1, 1):
                    moved = _from_unit(
                        dist, min(1.0, max(0.0, _unit(dist, current, low, high) + sign * REAL_STEP)), low, high
                    )
                    if moved != current:
                        out.append({**encoded, name: moved})
                continue
            if isinstance(dist, domains.Categorical) and not _ordered(values):
                out.extend({**encoded, name: v} for v in values if v != current)
                continue
            try:
                i = values.index(current)
            except ValueError:
                continue
            out.extend({**encoded, name: values[j]} for j in (i - 1, i + 1) if 0 <= j < len(values))
        return out

    # -- telling -----------------------------------------------------------------------------------
    def tell(self, ask: Ask, value: float) -> None:
        self._learn(ask.encoded, value)

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        self._mark(encoded)
        if value is not None:
            self._learn(dict(encoded), value)

    def infeasible(self, encoded: Mapping[str, Any]) -> None:
        self._taken.add(_key(encoded))
        self.failures.infeasible(encoded)

    def _learn(self, encoded: dict[str, Any], value: float) -> None:
        key = _key(encoded)
        if not math.isfinite(value):
            return
        self._told[key] = (dict(encoded), float(value))
        self.failures.told(encoded, float(value))


def _flag(value: Any, name: str) -> bool:
    from mneme.core.tuning.space import as_bool

    return as_bool(value, f"sampler guided option {name}")


def _ordered(values: list[Any]) -> bool:
    """Numbers (an order to step along); False for strings and booleans (swap freely)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _real_bounds(dist: Any) -> tuple[float, float]:
    if isinstance(dist, domains.FloatRange) and dist.log:
        return math.log(dist.low), math.log(dist.high)
    return float(dist.low), float(dist.high)


def _unit(dist: Any, value: Any, low: float, high: float) -> float:
    try:
        x = math.log(float(value)) if isinstance(dist, domains.FloatRange) and dist.log else float(value)
    except (TypeError, ValueError):
        return 0.5
    return 0.5 if high == low else min(1.0, max(0.0, (x - low) / (high - low)))


def _from_unit(dist: Any, u: float, low: float, high: float) -> Any:
    x = low + u * (high - low)
    if isinstance(dist, domains.FloatRange):
        return float(math.exp(x)) if dist.log else float(x)
    step = getattr(dist, "step", 1)
    snapped = dist.low + round((x - dist.low) / step) * step
    return int(min(max(snapped, dist.low), dist.high))
