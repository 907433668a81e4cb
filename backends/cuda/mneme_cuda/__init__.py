"""Mneme's CUDA backend (distribution `mneme-cuda`): replay and verify kernel launches on NVIDIA GPUs."""

__version__ = "0.1.0"
