"""The original Mneme API's `mneme.tuning.session` (see `mneme.compat`)."""

from mneme.compat.tune_options import TuneOptions, merge_config_and_args
from mneme.compat.tuning_session import (
    EXIT_BASELINE_FAILED,
    EXIT_INTERNAL_ERROR,
    EXIT_INVALID_CONFIGURATION,
    EXIT_RECORD_LOAD_FAILED,
    BaselineVerificationError,
    Candidate,
    CompletedCandidate,
    TuningSession,
    classify_result,
    metric_value,
    stored_result_and_metric,
)

__all__ = [
    "EXIT_BASELINE_FAILED",
    "EXIT_INTERNAL_ERROR",
    "EXIT_INVALID_CONFIGURATION",
    "EXIT_RECORD_LOAD_FAILED",
    "BaselineVerificationError",
    "Candidate",
    "CompletedCandidate",
    "TuneOptions",
    "TuningSession",
    "classify_result",
    "merge_config_and_args",
    "metric_value",
    "stored_result_and_metric",
]
