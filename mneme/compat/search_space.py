"""`mneme.tuning.search_space` of the original Mneme API: parameters, `SearchSpace` and its samplers.

A user's space subclasses `SearchSpace` with `dimensions()`, `derived()` and
`constraints()`, as in the original. The samplers keep the original's shapes:
`sample_random()` returns `{"parameters": ...}`, `sample_optuna(study)` returns
`(configuration, trial)` and tells the study a failed value for a rejected sample,
`sample_exhaustive()` yields derived configurations.
"""

from __future__ import annotations

import abc
import itertools
import random
from collections import defaultdict
from typing import Any

from mneme.compat.pipeline import PipelineManager
from mneme.compat.types import ExperimentConfiguration

MAX_RETRIES = 1000
#: What `sample_optuna` tells the study for a sample that breaks the constraints.
REJECTED_VALUE = (1 << 64) - 1
_OPTUNA_CHOICE = (type(None), bool, int, float, str)


class BaseParam(abc.ABC):  # noqa: B024 - the original's abstract base without abstract methods
    """One tunable dimension of a search space."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class FixedParam(BaseParam):
    """A dimension with a single value."""

    def __init__(self, name: str, value: Any):
        super().__init__(name)
        self.value = value

    @property
    def config(self) -> Any:
        return self.value


class BoolParam(BaseParam):
    """True or False."""

    def __init__(self, name: str):
        super().__init__(name)
        self.choices: list[bool] = [True, False]


class CategoricalParam(BaseParam):
    """One of `choices` (any values, `dim3` included)."""

    def __init__(self, name: str, choices: list[Any]):
        super().__init__(name)
        if not choices:
            raise ValueError("CategoricalParam must have at least one choice.")
        self.choices = list(choices)


class IntRangeParam(BaseParam):
    """Integers low, low + step, ... up to high (inclusive when on the grid)."""

    def __init__(self, name: str, low: int, high: int, step: int = 1):
        super().__init__(name)
        if low > high:
            raise ValueError("IntRangeParam low must be <= high.")
        if not isinstance(step, int) or step <= 0:
            raise ValueError("IntRangeParam step must be a positive integer.")
        self.low, self.high, self.step = low, high, step

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


class RealRangeParam(BaseParam):
    """A real in [low, high]; not enumerable."""

    def __init__(self, name: str, low: float, high: float):
        super().__init__(name)
        if low > high:
            raise ValueError("RealRangeParam low must be <= high.")
        self.low, self.high = low, high


class PipelineParam(BaseParam):
    """A pass pipeline: up to `num_draws` passes of `PipelineManager`, ordered by per-draw priorities."""

    def __init__(self, name: str, num_draws: int):
        super().__init__(name)
        self.pass_manager = PipelineManager()
        self.num_draws = num_draws
        self.available_passes = sorted(self.pass_manager.get_passes())


def sample_optuna_param(trial, param: BaseParam) -> Any:
    """Sample one parameter through an Optuna trial, with the original's parameter names."""
    name = param.name
    if isinstance(param, FixedParam):
        return param.value
    if isinstance(param, (BoolParam, CategoricalParam)):
        if all(isinstance(c, _OPTUNA_CHOICE) for c in param.choices):
            return trial.suggest_categorical(name, param.choices)
        # Optuna stores only plain values: other choices (dim3, tuples) are sampled by index.
        return param.choices[trial.suggest_categorical(name, list(range(len(param.choices))))]
    if isinstance(param, IntRangeParam):
        return (
            param.values()[trial.suggest_int(name, 0, len(param.values()) - 1)]
            if ((param.high - param.low) % param.step)
            else trial.suggest_int(name, param.low, param.high, step=param.step)
        )
    if isinstance(param, RealRangeParam):
        return trial.suggest_float(name, param.low, param.high)
    if isinstance(param, PipelineParam):
        chosen, counts, pass_id = [], defaultdict(int), 0
        for _ in range(param.num_draws):
            pass_name = param.available_passes[pass_id]
            count = counts[pass_name]
            if not trial.suggest_categorical(f"use_{pass_name}_{count}", [0, 1]):
                continue
            priority = trial.suggest_int(f"prio_{pass_name}_{count}", 0, param.num_draws)
            chosen.append((priority, count, pass_name))
            counts[pass_name] += 1
            pass_id = (pass_id + 1) % len(param.available_passes)
        concrete = param.pass_manager.get_concrete_passes()
        return param.pass_manager.to_string([concrete[p] for _, _, p in sorted(chosen, key=lambda c: c[:2])])
    raise TypeError(f"Unsupported parameter type in Optuna: {type(param)}")


def sample_random_param(param: BaseParam, rng: random.Random | None = None) -> Any:
    """Sample one parameter uniformly."""
    rng = rng or random
    if isinstance(param, FixedParam):
        return param.value
    if isinstance(param, (BoolParam, CategoricalParam)):
        return rng.choice(param.choices)
    if isinstance(param, IntRangeParam):
        return rng.choice(param.values())
    if isinstance(param, RealRangeParam):
        return rng.uniform(param.low, param.high)
    if isinstance(param, PipelineParam):
        concrete = param.pass_manager.get_concrete_passes()
        drawn = [rng.choice(param.available_passes) for _ in range(rng.randint(0, param.num_draws))]
        return param.pass_manager.to_string([concrete[p] for p in drawn])
    raise TypeError(f"Unsupported parameter type: {type(param)}")


class SearchSpace(abc.ABC):
    """A space of experiment configurations: subclass it with `dimensions`, `derived`, `constraints`."""

    @abc.abstractmethod
    def dimensions(self) -> dict[str, BaseParam]:
        """The primary dimensions, by name."""

    @abc.abstractmethod
    def derived(self, params: dict[str, Any]) -> ExperimentConfiguration:
        """The configuration of one assignment of the dimensions."""

    @abc.abstractmethod
    def constraints(self, params: Any) -> bool:
        """True when a sample is valid (given the parameters, or the derived configuration)."""

    def sample_random(self) -> dict[str, Any]:
        """`{"parameters": {...}}` of a random assignment that satisfies the constraints."""
        dims = self.dimensions()
        for _ in range(MAX_RETRIES):
            params = {name: sample_random_param(p) for name, p in dims.items()}
            if self.constraints(params):
                return {"parameters": params}
        raise RuntimeError(f"Failed to produce a valid random sample after {MAX_RETRIES} attempts.")

    def sample_optuna(self, study) -> tuple[ExperimentConfiguration, Any]:
        """Ask the study, derive, check; a rejected trial is told a failing value. Returns (config, trial)."""
        dims = self.dimensions()
        for _ in range(MAX_RETRIES):
            trial = study.ask()
            config = self.derived({name: sample_optuna_param(trial, p) for name, p in dims.items()})
            if self.constraints(config):
                return config, trial
            study.tell(trial, REJECTED_VALUE)
        raise RuntimeError(f"Failed to generate a valid Optuna sample after {MAX_RETRIES} attempts.")

    def sample_exhaustive(self):
        """Every derived configuration of the finite dimensions' product that satisfies the constraints."""
        dims = self.dimensions()
        lists = []
        for dim in dims.values():
            if isinstance(dim, FixedParam):
                lists.append([dim.value])
            elif isinstance(dim, (BoolParam, CategoricalParam)):
                lists.append(list(dim.choices))
            elif isinstance(dim, IntRangeParam):
                lists.append(dim.values())
            elif isinstance(dim, RealRangeParam):
                raise ValueError("Cannot enumerate real space.")
            else:
                raise ValueError("Cannot enumerate custom dimension.")
        for combo in itertools.product(*lists):
            config = self.derived(dict(zip(dims, combo)))
            if self.constraints(config):
                yield config
