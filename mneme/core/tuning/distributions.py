"""The domains of encoded parameter values, as the core states them: what a sampler draws from and the store records.

Three shapes cover every primitive parameter (`params`): a categorical choice, an integer
range with a step (an ordinal parameter is the range of its value's indices, so samplers see
an order) and a real range, linear or logarithmic. The result store and each sampler library
translate them into their own types (the result store, when it records a trial).
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Categorical:
    """One of `choices` (None, bools, numbers or strings: what every store keeps)."""

    choices: tuple[Any, ...] = attrs.field(converter=tuple)


@attrs.frozen
class IntRange:
    """An integer in [low, high] on a grid of `step` from `low`."""

    low: int
    high: int
    step: int = 1


@attrs.frozen
class FloatRange:
    """A real number in [low, high], sampled on a logarithmic scale when `log`."""

    low: float
    high: float
    log: bool = False


Distribution = Categorical | IntRange | FloatRange
