"""One plugin per sampler family (entry points `guided`, `exhaustive`, `random`, `optuna`, `nevergrad`).

Each can be listed, disabled (``mneme -p no:nevergrad``) or replaced by name on its own.
A family whose library is an extra says so (``mneme_requires``: module -> extra).
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


class _Family:
    # Described, not imported: listing the samplers must not import Optuna or numpy.
    def __init__(self, name: str, target: str, requires: dict[str, str] | None = None):
        self._described = Described(name, target)
        self.mneme_requires = requires or {}

    @hookimpl
    def mneme_samplers(self):
        return [self._described]


guided = _Family("guided", "mneme.plugins.samplers.guided:GuidedSampler")
exhaustive = _Family("exhaustive", "mneme.plugins.samplers.basic:ExhaustiveSampler")
random = _Family("random", "mneme.plugins.samplers.basic:RandomSampler")
optuna = _Family("optuna", "mneme.plugins.samplers.optuna_family:OptunaSampler")
nevergrad = _Family("nevergrad", "mneme.plugins.samplers.nevergrad_family:NevergradSampler", {"nevergrad": "nevergrad"})
