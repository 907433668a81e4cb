"""One plugin per sampler family (entry points `exhaustive`, `random`, `optuna`, `nevergrad`).

Each can be listed, disabled (``mneme -p no:nevergrad``) or replaced by name on its own.
A family whose library is an extra says so (``mneme_requires``: module -> extra).
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


class _Family:
    def __init__(self, module: str, cls: str, requires: dict[str, str] | None = None):
        self._where = (module, cls)
        self.mneme_requires = requires or {}

    @hookimpl
    def mneme_samplers(self):
        import importlib

        module, cls = self._where
        return [getattr(importlib.import_module(module), cls)]


exhaustive = _Family("mneme.plugins.samplers.basic", "ExhaustiveSampler")
random = _Family("mneme.plugins.samplers.basic", "RandomSampler")
optuna = _Family("mneme.plugins.samplers.optuna_family", "OptunaSampler")
nevergrad = _Family("mneme.plugins.samplers.nevergrad_family", "NevergradSampler", {"nevergrad": "nevergrad"})
