"""The original Mneme API's `mneme.profile` (see `mneme.compat`)."""

from mneme.compat.profile import gpu_profile_start, gpu_profile_stop, init_profiler

__all__ = ["gpu_profile_start", "gpu_profile_stop", "init_profiler"]
