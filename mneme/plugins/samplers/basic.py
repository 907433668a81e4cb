"""`exhaustive` (every feasible point, in order) and `random` (uniform, seeded)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

from mneme.core.errors import UsageError
from mneme.core.tuning.samplers import Ask, Sampler
from mneme.core.types import canonical_json


def _key(encoded: Mapping[str, Any]) -> str:
    return canonical_json(dict(encoded))


class ExhaustiveSampler(Sampler):
    """Every feasible point of a finite space once (distinct grounded configurations only).

    Points already finished or running in the study (an earlier run, another process) are
    skipped, so resumed and shared runs split the enumeration instead of repeating it.
    """

    name = "exhaustive"

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        if variant:
            raise UsageError(f"sampler 'exhaustive' has no variants, got 'exhaustive:{variant}'")
        super().__init__(variant, seed=seed, **options)
        self._points: Iterator[dict[str, Any]] | None = None
        self._taken: set[str] = set()

    def bind(self, space: Any, **kwargs: Any) -> None:
        super().bind(space, **kwargs)
        self._points = space.sample_exhaustive()

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
