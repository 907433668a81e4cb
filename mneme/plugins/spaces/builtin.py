"""The built-in search spaces: presets over launch geometry, specialization and code generation.

Options (``--space-option KEY=VALUE``, or ``options:`` in a YAML space that extends one):
``axes`` (``auto``: the axes whose recorded block is > 1; or e.g. ``x``, ``xy``),
``grid_stride`` (the kernel loops over its data, so the grid is tuned too and may shrink),
``max_threads`` / ``min_threads`` (thread budget of a block), ``max_block`` (largest block
size tried along one axis), ``pipeline`` (draws of a pass-pipeline parameter instead of
optimization levels), and feature toggles ``launch``, ``launch_bounds``, ``specialize``,
``opt``, ``codegen``, ``contracts`` (default true: keep only the block shapes the kernel's code
supports, see `mneme.core.tuning.contracts`) and the plugins' knob groups (``knobs``: the optimize stage's, ``ptxas``:
the CUDA code generator's and fast math; any ``feature`` a `Knob` declares) that add or
remove groups of dimensions. A knob group whose declarations name backends is on by default
only on those backends (``-o ptxas=true`` asks for it anywhere).
"""

from __future__ import annotations

from typing import Any, ClassVar

from mneme.core.errors import UsageError
from mneme.core.tuning import params as P
from mneme.core.tuning.space import AXES, MAX_THREADS_PER_BLOCK, ConfigSpace, as_bool

OPT_LEVELS = ("default<O1>", "default<O2>", "default<O3>", "default<Os>", "default<Oz>")
CORE_FEATURES = ("launch", "launch_bounds", "specialize", "opt", "codegen")
# The knob groups of the built-in plugins; a plugin's Knob(feature=...) may add others.
KNOB_FEATURES = ("knobs", "ptxas")
# Within a group, dimensions go in stage order (then declaration order): the same order as before knobs.
_STAGE_ORDER = {"optimize": 0, "codegen": 1, "assemble": 1, "preprocess": 2, "launch": 3}


def features() -> tuple[str, ...]:
    """Every feature toggle: the core's groups, then the knob groups the declarations name."""
    from mneme.core import params

    declared = [k.feature for k in params.knobs().values() if k.feature and k.search is not None]
    return CORE_FEATURES + tuple(dict.fromkeys([*KNOB_FEATURES, *declared]))


def knob_param(knob) -> P.Param:
    """The dimension a built-in space tunes a declared knob over (its `search`)."""
    if knob.search == "bool":
        return P.BoolParam(knob.name)
    if knob.search == "range":
        return P.IntRangeParam(knob.name, int(knob.low), int(knob.high))
    values = tuple(knob.search)
    if knob.type == "int" and all(isinstance(v, int) for v in values):
        return P.OrdinalParam(knob.name, values)
    return P.CategoricalParam(knob.name, values)


ALL = frozenset({"*"})  # every feature toggle, the plugins' included


BUILTIN_OPTIONS = ("axes", "grid_stride", "max_threads", "min_threads", "max_block", "pipeline", "contracts")


class BuiltinSpace(ConfigSpace):
    """A preset: which groups of dimensions it tunes (each one a feature toggle)."""

    name: ClassVar[str] = "builtin"
    features: ClassVar[frozenset[str]] = frozenset()
    opt_levels: ClassVar[tuple[str, ...]] = OPT_LEVELS

    def __init__(self, recording: Any = None, instance: Any = None, **options: Any):
        from mneme.core import params

        toggles = features()
        from mneme.core.keys import check_keys

        check_keys(options, {*toggles, *BUILTIN_OPTIONS}, None, f"space {self.name!r} options", error=UsageError)
        super().__init__(recording, instance, **options)
        wanted = self.features if self.features != ALL else frozenset(toggles)
        self.enabled = {f for f in toggles if as_bool(options.get(f, f in wanted), f)}
        self.knobs = sorted(
            (k for k in params.knobs().values() if k.feature and k.search is not None),
            key=lambda k: _STAGE_ORDER[k.stage],
        )
        for feature in {k.feature for k in self.knobs} - set(options):
            backends = {b for k in self.knobs if k.feature == feature for b in k.backends}
            if backends and self.backend not in backends:
                self.enabled.discard(feature)  # e.g. ptxas knobs mean nothing elsewhere; ask explicitly
        self.max_block = int(options.get("max_block", MAX_THREADS_PER_BLOCK))
        self.pipeline_draws = int(options.get("pipeline", 0))
        self.axes = self._axes(options.get("axes", "auto"))

    @property
    def backend(self) -> str:
        return getattr(self.recording, "backend", "") or ""

    def _axes(self, spec: Any) -> str:
        spec = str(spec).strip().lower()
        if spec in ("auto", ""):
            block = self.baseline().block.as_tuple()
            chosen = "".join(axis for axis, b in zip(AXES, block) if b > 1)
            return chosen or "x"
        if not spec or any(c not in AXES for c in spec) or len(set(spec)) != len(spec):
            raise UsageError(f"space {self.name!r}: axes={spec!r} must be 'auto' or distinct letters of xyz")
        return "".join(a for a in AXES if a in spec)

    def _block_values(self, axis: str) -> list[int]:
        return [v for v in self._candidate_block_values(axis) if v not in self.removed_block_values(axis)]

    def _candidate_block_values(self, axis: str) -> list[int]:
        recorded = self.baseline().block.as_tuple()[AXES.index(axis)]
        limit = min(self.max_block, self.max_threads)
        values = set(P.powers_of_two(1, limit))
        if recorded <= limit:
            values.add(recorded)
        return sorted(values)

    def removed_block_values(self, axis: str) -> dict[int, str]:
        """Block extents along `axis` the launch contract refuses on their own, with the reason."""
        recorded = self.baseline().block.as_tuple()
        removed = {}
        for value in self._candidate_block_values(axis):
            rule = self.contract.axis_violation(axis, value, recorded)
            if rule is not None:
                removed[value] = rule.reason
        return removed

    def contract_lines(self) -> list[str]:
        lines, shown = [], set()
        if "launch" in self.enabled:
            for axis in self.axes:
                by_reason: dict[str, list[int]] = {}
                for value, reason in self.removed_block_values(axis).items():
                    by_reason.setdefault(reason, []).append(value)
                for reason, values in by_reason.items():
                    lines.append(f"launch contract removed block_{axis} = {', '.join(map(str, values))}: {reason}")
                    shown.add(reason)
        # rules over several axes (or the total) leave each axis's values and apply as a constraint
        return lines + [f"launch contract: {r.reason}" for r in self.contract.rules if r.reason not in shown]

    def _grid_values(self, axis: str) -> list[int]:
        recorded = self.baseline().grid.as_tuple()[AXES.index(axis)]
        values = {
            max(1, recorded // 8),
            max(1, recorded // 4),
            max(1, recorded // 2),
            recorded,
            recorded * 2,
            recorded * 4,
        }
        return sorted(values)

    def dimensions(self) -> dict[str, P.Param]:
        dims: dict[str, P.Param] = {}
        on = self.enabled
        if "launch" in on:
            for axis in self.axes:
                dims[f"block_{axis}"] = P.OrdinalParam(f"block_{axis}", self._block_values(axis))
                if self.grid_stride:
                    dims[f"grid_{axis}"] = P.OrdinalParam(f"grid_{axis}", self._grid_values(axis))
        if "launch_bounds" in on:
            dims["set_launch_bounds"] = P.BoolParam("set_launch_bounds")
            dims["max_threads"] = P.OrdinalParam("max_threads", P.powers_of_two(32, MAX_THREADS_PER_BLOCK))
            dims["min_blocks_per_sm"] = P.OrdinalParam("min_blocks_per_sm", (1, 2, 4, 8))
        if "specialize" in on:
            dims["specialize"] = P.BoolParam("specialize")
            dims["specialize_dims"] = P.BoolParam("specialize_dims")
        if "opt" in on:
            if self.pipeline_draws > 0:
                dims["passes"] = P.PipelineParam("passes", self.pipeline_draws)
            else:
                dims["passes"] = P.CategoricalParam("passes", self.opt_levels)
        if "codegen" in on:
            dims["codegen_opt"] = P.IntRangeParam("codegen_opt", 0, 3)
        for feature in KNOB_FEATURES + tuple(sorted({k.feature for k in self.knobs} - set(KNOB_FEATURES))):
            if feature in on:
                for knob in self.knobs:
                    if knob.feature == feature and (
                        not knob.backends or self.backend in knob.backends or feature in self.options
                    ):
                        dims[knob.name] = knob_param(knob)
        if not dims:
            raise UsageError(f"space {self.name!r}: every feature is off; nothing to tune")
        return dims


class QuickSpace(BuiltinSpace):
    """Block size along the launch's axes, and argument specialization: a first look in minutes."""

    name = "quick"
    features = frozenset({"launch", "specialize"})


class LaunchSpace(BuiltinSpace):
    """Launch geometry (block, and grid for grid-stride kernels) with launch bounds."""

    name = "launch"
    features = frozenset({"launch", "launch_bounds"})


class CompilerSpace(BuiltinSpace):
    """Specialization, optimization pipeline, code generation level and ptxas knobs at the recorded launch."""

    name = "compiler"
    features = frozenset({"specialize", "opt", "codegen", "ptxas"})


class StandardSpace(BuiltinSpace):
    """Block size, specialization, optimization level and code generation level."""

    name = "standard"
    features = frozenset({"launch", "specialize", "opt", "codegen"})


class FullSpace(BuiltinSpace):
    """Everything: launch geometry and bounds, specialization, pipeline, codegen, LLVM and ptxas knobs."""

    name = "full"
    features = ALL


SPACES = [QuickSpace, LaunchSpace, CompilerSpace, StandardSpace, FullSpace]
