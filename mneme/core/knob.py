"""The declaration of a configuration parameter a plugin adds (`Knob`), and the core's own knobs.

Plugins return `Knob`s from the hook `mneme_parameters`; the registry (`mneme.core.plugins`)
collects them and `mneme.core.params` turns them into CLI flags, space dimensions and build
fields. This module depends on nothing else of Mneme's but the hook markers, so the registry
can register the core's own knobs without a circle. Why the knobs live where they do:
docs/design/parameters.md.
"""

from __future__ import annotations

from typing import Any

import attrs

from mneme.core.hookspecs import hookimpl

STAGES = ("preprocess", "optimize", "codegen", "assemble", "launch")
TYPES = {"bool": bool, "int": int, "float": float, "str": str}
# The original Mneme API's fields of ExperimentConfiguration (mneme.core.types): a knob must not
# take one of these names, nor "schema" or "knobs".
CORE_FIELDS = (
    "grid",
    "block",
    "shared_mem",
    "specialize",
    "set_launch_bounds",
    "max_threads",
    "min_blocks_per_sm",
    "specialize_dims",
    "passes",
    "codegen_opt",
    "codegen_method",
    "prune",
    "internalize",
)


@attrs.frozen
class Knob:
    """One parameter a plugin adds to the configuration.

    `type` is bool, int, float or str; `optional` allows None (leave it to the tool).
    `low`/`high` bound an int or float, `choices` a str. `stage` is what it changes:
    preprocess, optimize, codegen, assemble (only the backend's last step, from its intermediate
    code to the binary: `Backend.assemble`) or launch. `search` is how the built-in spaces tune it:
    "range" (low..high), "bool", or a tuple of values; None leaves it untuned. `feature` is
    the built-in spaces' toggle that adds it (`-o FEATURE=true`); `backends` limits where that
    toggle is on by default. `unused_when`: a core bool field whose truth makes it irrelevant.
    `schema1`: it was a field of configuration schema 1 (before plugins declared knobs), so every
    configuration's hash holds it at its value or default and the hashes written then stay valid
    (docs/design/parameters.md, "Compatibility").
    """

    name: str
    type: str = attrs.field(validator=attrs.validators.in_(tuple(TYPES)))
    default: Any
    stage: str = attrs.field(validator=attrs.validators.in_(STAGES))
    help: str = ""
    optional: bool = False
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    search: Any = None
    feature: str = ""
    backends: tuple[str, ...] = ()
    unused_when: str | None = None
    schema1: bool = False
    plugin: str = ""  # filled in by the registry: who declared it

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """The value if it fits the declaration; ValueError/TypeError naming the knob otherwise."""
        if value is None:
            if self.optional:
                return None
            raise TypeError(f"{self.name} must be a {self.type}, got None")
        wanted = TYPES[self.type]
        if self.type == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) != (wanted is bool) or not isinstance(value, wanted):
            raise TypeError(f"{self.name} must be a {self.type}, got {type(value).__name__} {value!r}")
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise ValueError(f"{self.name} must be in {self.low}..{self.high}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {list(self.choices)}, got {value!r}")
        return value


# -- the core's own knobs: the optimize stage (mneme.core.pipeline reads them) ------------------

# The pass toggles of LLVM's default pipelines: each is left to LLVM unless set, and tuned as all three.
_PIPELINE_TOGGLES = (
    ("loop_unrolling", "Unroll loops in the default<O..> pipelines (default: LLVM's)."),
    ("loop_vectorization", "Vectorize loops in the default pipelines (default: LLVM's)."),
    ("slp_vectorization", "SLP-vectorize in the default pipelines (default: LLVM's)."),
)

OPTIMIZE_KNOBS = [
    *(
        Knob(
            name,
            "bool",
            None,
            "optimize",
            help_text,
            optional=True,
            search=(None, True, False),
            feature="knobs",
            schema1=True,
        )
        for name, help_text in _PIPELINE_TOGGLES
    ),
    Knob(
        "inlining_threshold",
        "int",
        None,
        "optimize",
        "Inliner threshold (default: the level's).",
        optional=True,
        low=0,
        high=1 << 20,
        schema1=True,
    ),
    # nvcc fully unrolls larger loops than LLVM's O3 (300), e.g. those over a small local array, which then
    # lives in registers (docs/design/investigations/ir-vs-nvcc-2026-12-06.md)
    Knob(
        "unroll_threshold",
        "int",
        None,
        "optimize",
        "Full-unrolling size threshold (default: the level's, 300 at O3; nvcc unrolls as at about 1200).",
        optional=True,
        low=0,
        high=1 << 20,
        search=(None, 600, 1200, 2400),
        feature="knobs",
    ),
]


@hookimpl
def mneme_parameters():
    return OPTIMIZE_KNOBS
