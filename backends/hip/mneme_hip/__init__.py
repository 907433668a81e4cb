"""Mneme's HIP backend: AMDGPU code generation (the device layer and recorder come later)."""
