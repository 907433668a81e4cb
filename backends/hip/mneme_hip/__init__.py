"""Mneme's HIP backend: AMDGPU code generation (the device layer and recorder come later)."""

# The backends' variables (Backend.environment) are registered through mneme.core.backend: a module of
# this package that reads one (envvars.get) may be imported before anything else of Mneme's.
import mneme.core.backend  # noqa: E402,F401
