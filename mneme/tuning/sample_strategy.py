"""The original Mneme API's `mneme.tuning.sample_strategy` (see `mneme.compat`)."""

from mneme.compat.sample_strategy import (
    ExhaustiveSamplingStrategy,
    OptunaSamplingStrategy,
    RandomSamplingStrategy,
    SamplingStrategy,
)

__all__ = ["ExhaustiveSamplingStrategy", "OptunaSamplingStrategy", "RandomSamplingStrategy", "SamplingStrategy"]
