"""The original Mneme API's `mneme.tuning.builtin_spaces` (see `mneme.compat`)."""

from mneme.compat.builtin_spaces import (
    DEFAULT_PIPELINES,
    QUICK_PIPELINES,
    BuiltinTuneSearchSpace,
    describe_search_space,
    dim3_to_shape,
    finite_param_values,
    iter_finite_params,
    load_custom_space,
    param_to_description,
    parse_key_value_args,
    parse_range,
    shape_to_dim3,
)

__all__ = [
    "DEFAULT_PIPELINES",
    "QUICK_PIPELINES",
    "BuiltinTuneSearchSpace",
    "describe_search_space",
    "dim3_to_shape",
    "finite_param_values",
    "iter_finite_params",
    "load_custom_space",
    "param_to_description",
    "parse_key_value_args",
    "parse_range",
    "shape_to_dim3",
]
