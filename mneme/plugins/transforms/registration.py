"""One plugin per IR transform (entry points named as the transforms), each with the knobs it reads.

Each can be listed, disabled (``mneme -p no:fast_math``) or replaced by name on its own.
Where the knobs live and why: docs/design/parameters.md.
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.params import Knob


class _Transform:
    def __init__(self, module: str, cls: str, knobs: tuple[Knob, ...] = ()):
        self._where = (module, cls)
        self._knobs = list(knobs)

    @hookimpl
    def mneme_transforms(self):
        import importlib

        module, cls = self._where
        return [getattr(importlib.import_module(module), cls)]

    @hookimpl
    def mneme_parameters(self):
        return self._knobs


_T = "mneme.plugins.transforms."
internalize = _Transform(_T + "linkage", "Internalize")
prune = _Transform(_T + "linkage", "Prune")
remove_auto_init = _Transform(_T + "auto_init", "RemoveAutoInit", (
    Knob("remove_auto_init", "bool", False, "preprocess",
         "Remove the stores clang marked as automatic variable initialization.", schema1=True),))
specialize_args = _Transform(_T + "specialize", "SpecializeArgs")
specialize_dims = _Transform(_T + "specialize", "SpecializeDims")
specialize_dims_assume = _Transform(_T + "specialize", "SpecializeDimsAssume", (
    Knob("specialize_dims_assume", "bool", False, "preprocess",
         "Grid and block sizes and index ranges as optimizer facts.", unused_when="specialize_dims", schema1=True),))
set_launch_bounds = _Transform(_T + "launch_bounds", "LaunchBounds")
# fast_math is tuned with the code generator's knobs, and by default only where they are (as before).
fast_math = _Transform(_T + "math", "FastMath", (
    Knob("fast_math", "bool", False, "preprocess", "Fast-math flags on floating-point operations, f32 denormals "
         "flushed.", search="bool", feature="ptxas", schema1=True),))
