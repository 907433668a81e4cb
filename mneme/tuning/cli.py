"""The original Mneme API's `mneme.tuning.cli` (see `mneme.compat`)."""

from mneme.compat.tune_cli import add_tune_args, main, options_from_mapping, run_tune

__all__ = ["add_tune_args", "main", "options_from_mapping", "run_tune"]
