"""Parameters of a search space: the seed's types, plus helpers for launch-geometry domains.

Every parameter has two faces. Its *values* are what a search space's `derived()` sees
(a block size, a pass pipeline string). Its *encoded* values are what a sampler and the
study store: the values of a `distributions` domain (an ordinal parameter is stored as the
index of its value, so CMA-ES, GP and TPE see an order). A composite parameter
(`PipelineParam`) expands into several primitive ones.
"""

from __future__ import annotations

import abc
import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from mneme.core.tuning import distributions as dist

# What a store keeps in a categorical distribution.
_STORABLE = (type(None), bool, int, float, str)


def powers_of_two(low: int, high: int) -> list[int]:
    """Powers of two in [low, high], ascending."""
    if low < 1 or high < low:
        raise ValueError(f"powers_of_two needs 1 <= low <= high, got {low}..{high}")
    out, value = [], 1
    while value <= high:
        if value >= low:
            out.append(value)
        value *= 2
    return out


def divisors(n: int, low: int = 1, high: int | None = None) -> list[int]:
    """Divisors of n in [low, high], ascending."""
    if n < 1:
        raise ValueError(f"divisors needs n >= 1, got {n}")
    high = n if high is None else high
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    every = sorted(set(small) | {n // d for d in small})
    return [d for d in every if low <= d <= high]


class Param(abc.ABC):
    """A named dimension of a search space."""

    name: str

    # -- structure -----------------------------------------------------------------------
    def primitives(self) -> dict[str, Param]:
        """The primitive parameters this one is made of (itself, for a primitive)."""
        return {self.name: self}

    def combine(self, decoded: Mapping[str, Any]) -> Any:
        """This parameter's value from its primitives' decoded values."""
        return decoded[self.name]

    # -- domain --------------------------------------------------------------------------
    @property
    def finite(self) -> bool:
        return True

    @abc.abstractmethod
    def encoded_values(self) -> list[Any]:
        """Every encoded value, in order (finite parameters only)."""

    @abc.abstractmethod
    def distribution(self) -> dist.Distribution | None:
        """The domain of the encoded value; None for a fixed parameter."""

    def decode(self, encoded: Any) -> Any:
        return encoded

    def encode(self, value: Any) -> Any:
        return value

    def sample(self, rng: random.Random) -> Any:
        """A uniformly random encoded value."""
        return rng.choice(self.encoded_values())

    def cardinality(self) -> int | None:
        return len(self.encoded_values()) if self.finite else None

    @abc.abstractmethod
    def describe(self) -> str:
        """The domain, for `--print-space`."""

    @property
    def kind(self) -> str:
        return type(self).__name__


def _check_name(instance, attribute, value):
    if not isinstance(value, str) or not value:
        raise ValueError(f"a parameter needs a non-empty name, got {value!r}")


@attrs.frozen
class FixedParam(Param):
    """A dimension with one value; not sampled, but passed to `derived()`."""

    name: str = attrs.field(validator=_check_name)
    value: Any = None

    def encoded_values(self) -> list[Any]:
        return [self.value]

    def distribution(self) -> None:
        return None

    def sample(self, rng: random.Random) -> Any:
        return self.value

    def describe(self) -> str:
        return f"= {self.value!r}"


@attrs.frozen
class BoolParam(Param):
    name: str = attrs.field(validator=_check_name)

    def encoded_values(self) -> list[Any]:
        return [False, True]

    def distribution(self) -> dist.Categorical:
        return dist.Categorical([False, True])

    def describe(self) -> str:
        return "{False, True}"


def _check_choices(instance, attribute, value):
    if not value:
        raise ValueError(f"parameter {instance.name!r}: choices must not be empty")
    if len(set(map(repr, value))) != len(value):
        raise ValueError(f"parameter {instance.name!r}: choices must be distinct, got {list(value)!r}")
    for choice in value:
        if not isinstance(choice, _STORABLE):
            raise ValueError(f"parameter {instance.name!r}: choice {choice!r} must be None, bool, int, float or str")


@attrs.frozen
class CategoricalParam(Param):
    """Unordered choices."""

    name: str = attrs.field(validator=_check_name)
    choices: tuple = attrs.field(converter=tuple, validator=_check_choices)

    def encoded_values(self) -> list[Any]:
        return list(self.choices)

    def distribution(self) -> dist.Categorical:
        return dist.Categorical(list(self.choices))

    def describe(self) -> str:
        return "{" + ", ".join(repr(c) for c in self.choices) + "}"


@attrs.frozen
class OrdinalParam(Param):
    """Ordered choices (block sizes, register limits): stored as the index of the value."""

    name: str = attrs.field(validator=_check_name)
    values: tuple = attrs.field(converter=tuple, validator=_check_choices)

    def encoded_values(self) -> list[Any]:
        return list(range(len(self.values)))

    def distribution(self) -> dist.IntRange:
        return dist.IntRange(0, len(self.values) - 1)

    def decode(self, encoded: Any) -> Any:
        return self.values[int(encoded)]

    def encode(self, value: Any) -> Any:
        try:
            return self.values.index(value)
        except ValueError:
            raise ValueError(f"parameter {self.name!r}: {value!r} is not one of {list(self.values)!r}") from None

    def describe(self) -> str:
        return "[" + ", ".join(repr(v) for v in self.values) + "] (ordered)"


@attrs.frozen
class IntRangeParam(Param):
    """Integers low..high inclusive, every `step`."""

    name: str = attrs.field(validator=_check_name)
    low: int = attrs.field()
    high: int = attrs.field()
    step: int = 1

    def __attrs_post_init__(self):
        if self.step <= 0:
            raise ValueError(f"parameter {self.name!r}: step must be > 0, got {self.step}")
        if self.low > self.high:
            raise ValueError(f"parameter {self.name!r}: low {self.low} > high {self.high}")
        if (self.high - self.low) % self.step:
            raise ValueError(f"parameter {self.name!r}: high - low must be a multiple of step {self.step}")

    def encoded_values(self) -> list[Any]:
        return list(range(self.low, self.high + 1, self.step))

    def distribution(self) -> dist.IntRange:
        return dist.IntRange(self.low, self.high, step=self.step)

    def sample(self, rng: random.Random) -> Any:
        return self.low + self.step * rng.randrange((self.high - self.low) // self.step + 1)

    def cardinality(self) -> int:
        return (self.high - self.low) // self.step + 1

    def describe(self) -> str:
        step = f" step {self.step}" if self.step != 1 else ""
        return f"{self.low}..{self.high}{step}"


@attrs.frozen
class RealRangeParam(Param):
    """Reals in [low, high]; not enumerable."""

    name: str = attrs.field(validator=_check_name)
    low: float = attrs.field(converter=float)
    high: float = attrs.field(converter=float)
    log: bool = False

    def __attrs_post_init__(self):
        if self.low > self.high:
            raise ValueError(f"parameter {self.name!r}: low {self.low} > high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"parameter {self.name!r}: a log range needs low > 0")

    @property
    def finite(self) -> bool:
        return False

    def encoded_values(self) -> list[Any]:
        raise ValueError(f"parameter {self.name!r} is a real range and cannot be enumerated")

    def distribution(self) -> dist.FloatRange:
        return dist.FloatRange(self.low, self.high, log=self.log)

    def sample(self, rng: random.Random) -> Any:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def describe(self) -> str:
        return f"[{self.low:g}, {self.high:g}]" + (" log" if self.log else "")


@attrs.frozen
class PipelineParam(Param):
    """An optimization pipeline: `num_draws` passes drawn from `passes`, ordered by per-draw priorities.

    Each draw is two primitives, `<name>[i].pass` (a pass name, or "" to draw nothing) and
    `<name>[i].priority` (a real in [0, 1]); the pipeline runs the drawn passes by decreasing
    priority, joined by commas, which is LLVM's textual pipeline syntax.
    """

    name: str = attrs.field(validator=_check_name)
    num_draws: int = attrs.field(default=4)
    passes: tuple = attrs.field(converter=tuple, factory=tuple)

    def __attrs_post_init__(self):
        if self.num_draws < 1:
            raise ValueError(f"parameter {self.name!r}: num_draws must be >= 1, got {self.num_draws}")
        if not self.passes:
            object.__setattr__(self, "passes", tuple(available_passes()))

    def primitives(self) -> dict[str, Param]:
        out: dict[str, Param] = {}
        for i in range(self.num_draws):
            out[f"{self.name}[{i}].pass"] = CategoricalParam(f"{self.name}[{i}].pass", ("",) + self.passes)
            out[f"{self.name}[{i}].priority"] = RealRangeParam(f"{self.name}[{i}].priority", 0.0, 1.0)
        return out

    def combine(self, decoded: Mapping[str, Any]) -> str:
        draws = [
            (decoded[f"{self.name}[{i}].priority"], -i, decoded[f"{self.name}[{i}].pass"])
            for i in range(self.num_draws)
        ]
        return ",".join(p for _, _, p in sorted(draws, reverse=True) if p)

    @property
    def finite(self) -> bool:
        return False

    def encoded_values(self) -> list[Any]:
        raise ValueError(f"parameter {self.name!r} is a pass pipeline and cannot be enumerated")

    def distribution(self) -> None:
        return None

    def describe(self) -> str:
        return f"{self.num_draws} draws over {len(self.passes)} passes"


# Used when the IR toolkit exposes no pass registry: function passes of LLVM's new pass manager.
_FALLBACK_PASSES = (
    "sroa",
    "early-cse",
    "instcombine",
    "simplifycfg",
    "reassociate",
    "gvn",
    "licm",
    "loop-rotate",
    "loop-unroll",
    "loop-vectorize",
    "slp-vectorizer",
    "sccp",
    "dce",
    "adce",
    "dse",
    "mem2reg",
    "indvars",
    "jump-threading",
    "correlated-propagation",
    "tailcallelim",
)


def available_passes() -> list[str]:
    """Pass names of the IR toolkit's registry (`mneme.core.pipeline`), or LLVM's common ones."""
    try:
        from mneme.core import pipeline  # lazily: the pipelines load llvmlite
    except ImportError:
        return list(_FALLBACK_PASSES)
    for attr in ("PASS_NAMES", "PASSES", "pass_names", "available_passes"):
        found = getattr(pipeline, attr, None)
        if found is None:
            continue
        names = found() if callable(found) else found
        names = list(names.keys() if isinstance(names, Mapping) else names)
        if names:
            return [str(n) for n in names]
    return list(_FALLBACK_PASSES)


def flatten(params: Iterable[Param]) -> dict[str, Param]:
    out: dict[str, Param] = {}
    for param in params:
        for name, prim in param.primitives().items():
            if name in out:
                raise ValueError(f"two parameters are both named {name!r}")
            out[name] = prim
    return out


def product(params: Sequence[Param]) -> Iterable[dict[str, Any]]:
    """Cartesian product of the encoded values of finite primitive parameters."""
    names = [p.name for p in params]
    for values in itertools.product(*(p.encoded_values() for p in params)):
        yield dict(zip(names, values))
