"""The original Mneme API's `mneme.pipeline` (see `mneme.compat`)."""

from mneme.compat.pipeline import (
    AbstractPass,
    PassLevel,
    PassOption,
    PipelineManager,
    flatten_passes,
    parse_pass_options,
    split_top_level,
)

__all__ = [
    "AbstractPass",
    "PassLevel",
    "PassOption",
    "PipelineManager",
    "flatten_passes",
    "parse_pass_options",
    "split_top_level",
]
