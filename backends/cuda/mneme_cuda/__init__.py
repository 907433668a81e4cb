"""Mneme's CUDA backend (distribution `mneme-cuda`): replay and verify kernel launches on NVIDIA GPUs."""

__version__ = "0.1.0"

# The backends' variables (Backend.environment) are registered through mneme.core.backend: a module of
# this package that reads one (envvars.get) may be imported before anything else of Mneme's.
import mneme.core.backend  # noqa: E402,F401
