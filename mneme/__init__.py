"""Mneme: record GPU kernel launches, replay them as verified experiments, autotune them.

The public Python API: ``mneme.capture`` (the module; ``mneme.capture.capture(...)``, or call it
directly), ``mneme.replay(...)`` and ``mneme.tune(...)`` (from :mod:`mneme.api`). They load on
first use, so ``import mneme`` stays fast (no llvmlite, numpy or optuna).
"""

from mneme._version import __version__

__all__ = ["__version__", "capture", "replay", "tune"]


def __getattr__(name: str):
    if name in ("replay", "tune"):
        from mneme import api

        return getattr(api, name)
    if name == "capture":
        import importlib

        return importlib.import_module("mneme.capture")
    raise AttributeError(f"module 'mneme' has no attribute {name!r}")
