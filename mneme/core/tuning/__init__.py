"""The tuning engine: parameters and search spaces, the sampler interface, the result store, sessions."""

from mneme.core.tuning.params import (
    BoolParam,
    CategoricalParam,
    FixedParam,
    IntRangeParam,
    OrdinalParam,
    Param,
    PipelineParam,
    RealRangeParam,
    divisors,
    powers_of_two,
)
from mneme.core.tuning.samplers import Ask, Sampler, create_sampler
from mneme.core.tuning.space import ConfigSpace, SearchSpace, load_space

__all__ = [
    "Ask",
    "BoolParam",
    "CategoricalParam",
    "ConfigSpace",
    "FixedParam",
    "IntRangeParam",
    "OrdinalParam",
    "Param",
    "PipelineParam",
    "RealRangeParam",
    "Sampler",
    "SearchSpace",
    "create_sampler",
    "divisors",
    "load_space",
    "powers_of_two",
]
