"""The original Mneme API's `mneme.mneme_types` (see `mneme.compat`)."""

from mneme.compat.types import ExperimentConfiguration, ExperimentResult, dim3

__all__ = ["ExperimentConfiguration", "ExperimentResult", "dim3"]
