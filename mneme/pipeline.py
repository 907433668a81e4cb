"""The original Mneme API's `mneme.pipeline` (see `mneme.compat`)."""

from mneme.compat.pipeline import PipelineManager

__all__ = ["PipelineManager"]
