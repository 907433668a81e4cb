"""A third-party Mneme sampler: hill climbing with restarts (the plugin author's guide's example).

It proposes points through the ask/tell interface (`mneme.core.tuning.samplers`): start from
a random point, try each neighbour (one step along one dimension's ordered values), move to the
first neighbour that is faster, and restart from a fresh random point once no neighbour is.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from mneme.core.hookspecs import hookimpl
from mneme.core.tuning.samplers import Ask, Sampler


def _key(encoded: Mapping[str, Any]) -> tuple:
    return tuple(sorted((name, repr(value)) for name, value in encoded.items()))


class HillClimbSampler(Sampler):
    """`hillclimb`: first-improvement hill climbing over the space's finite dimensions."""

    name = "hillclimb"

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        super().__init__(variant, seed=seed, **options)
        self._rng = random.Random(seed)
        self._current: dict[str, Any] | None = None
        self._current_value = float("inf")
        self._queue: list[dict[str, Any]] = []
        self._seen: dict[tuple, float | None] = {}

    def _domains(self) -> dict[str, list[Any]]:
        return {name: param.encoded_values() for name, param in self.space.primitives().items() if param.finite}

    def _neighbours(self, point: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for name, values in self._domains().items():
            if point.get(name) not in values:
                continue
            index = values.index(point[name])
            for step in (-1, 1):
                if 0 <= index + step < len(values):
                    out.append({**point, name: values[index + step]})
        self._rng.shuffle(out)
        return out

    def _restart(self) -> dict[str, Any]:
        self._current, self._current_value = None, float("inf")
        return self.space.sample_random(self._rng)

    def ask(self) -> Ask | None:
        for _ in range(1000):  # skip points already measured, by us or by another process
            point = self._queue.pop(0) if self._queue else self._restart()
            if _key(point) not in self._seen:
                self._seen[_key(point)] = None
                return Ask(point)
        return None

    def tell(self, ask: Ask, value: float) -> None:
        self._seen[_key(ask.encoded)] = value
        if value < self._current_value:  # a better point: climb from it
            self._current, self._current_value = dict(ask.encoded), value
            self._queue = self._neighbours(ask.encoded)

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        self._seen.setdefault(_key(encoded), value)


@hookimpl
def mneme_samplers():
    return [HillClimbSampler]
