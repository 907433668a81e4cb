"""One plugin per IR transform (entry points named as the transforms), each with the knobs it reads.

Each can be listed, disabled (``mneme -p no:fast_math``) or replaced by name on its own.
Where the knobs live and why: docs/design/parameters.md.
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.knob import Knob
from mneme.core.plugins import Described


class _Transform:
    # Described, not imported: listing the transforms (`mneme plugins`, `mneme ir passes`) must not import LLVM.
    def __init__(self, name: str, target: str, description: str, knobs: tuple[Knob, ...] = ()):
        self._described = Described(name, target, description=description)
        self._knobs = list(knobs)

    @hookimpl
    def mneme_transforms(self):
        return [self._described]

    @hookimpl
    def mneme_parameters(self):
        return self._knobs


_T = "mneme.plugins.transforms."
internalize = _Transform(
    "internalize",
    _T + "linkage:Internalize",
    "every function but the kernel becomes internal (device globals keep their linkage)",
)
prune = _Transform("prune", _T + "linkage:Prune", "drop the functions and declarations the kernel cannot reach")
remove_auto_init = _Transform(
    "remove_auto_init",
    _T + "auto_init:RemoveAutoInit",
    "remove stores clang marked as automatic variable initialization (-ftrivial-auto-var-init)",
    (
        Knob(
            "remove_auto_init",
            "bool",
            False,
            "preprocess",
            "Remove the stores clang marked as automatic variable initialization.",
            schema1=True,
        ),
    ),
)
specialize_args = _Transform(
    "specialize_args", _T + "specialize:SpecializeArgs", "fold recorded argument values into the kernel"
)
specialize_dims = _Transform(
    "specialize_dims", _T + "specialize:SpecializeDims", "grid and block sizes become constants"
)
specialize_dims_assume = _Transform(
    "specialize_dims_assume",
    _T + "specialize:SpecializeDimsAssume",
    "grid and block sizes and index ranges as facts for the optimizer",
    (
        Knob(
            "specialize_dims_assume",
            "bool",
            False,
            "preprocess",
            "Grid and block sizes and index ranges as optimizer facts.",
            unused_when="specialize_dims",
            schema1=True,
        ),
    ),
)
set_launch_bounds = _Transform(
    "set_launch_bounds",
    _T + "launch_bounds:LaunchBounds",
    "max threads per block / min blocks per SM as the back end reads them",
)
# fast_math is tuned with the code generator's knobs, and by default only where they are (as before).
fast_math = _Transform(
    "fast_math",
    _T + "math:FastMath",
    "fast-math flags on floating-point operations, f32 denormals flushed to zero",
    (
        Knob(
            "fast_math",
            "bool",
            False,
            "preprocess",
            "Fast-math flags on floating-point operations, f32 denormals flushed.",
            search="bool",
            feature="ptxas",
            schema1=True,
        ),
    ),
)
