"""The original Mneme API's `mneme.tuning.search_space` (see `mneme.compat`)."""

from mneme.compat.search_space import (
    BaseParam,
    BoolParam,
    CategoricalParam,
    FixedParam,
    IntRangeParam,
    PipelineParam,
    RealRangeParam,
    SearchSpace,
    sample_optuna_param,
    sample_random_param,
)

__all__ = [
    "BaseParam",
    "BoolParam",
    "CategoricalParam",
    "FixedParam",
    "IntRangeParam",
    "PipelineParam",
    "RealRangeParam",
    "SearchSpace",
    "sample_optuna_param",
    "sample_random_param",
]
