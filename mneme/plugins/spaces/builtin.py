"""The built-in search spaces: presets over launch geometry, specialization and code generation.

Options (``--space-option KEY=VALUE``, or ``options:`` in a YAML space that extends one):
``axes`` (``auto``: the axes whose recorded block is > 1; or e.g. ``x``, ``xy``),
``grid_stride`` (the kernel loops over its data, so the grid is tuned too and may shrink),
``max_threads`` / ``min_threads`` (thread budget of a block), ``max_block`` (largest block
size tried along one axis), ``pipeline`` (draws of a pass-pipeline parameter instead of
optimization levels), and feature toggles ``launch``, ``launch_bounds``, ``specialize``,
``opt``, ``codegen``, ``ptxas``, ``knobs`` that add or remove groups of dimensions.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mneme.core.errors import UsageError
from mneme.core.tuning import params as P
from mneme.core.tuning.space import AXES, MAX_THREADS_PER_BLOCK, ConfigSpace, _as_bool

OPT_LEVELS = ("default<O1>", "default<O2>", "default<O3>", "default<Os>", "default<Oz>")
FEATURES = ("launch", "launch_bounds", "specialize", "opt", "codegen", "ptxas", "knobs")
# Backends whose code generation goes through ptxas / the CUDA driver JIT.
PTXAS_BACKENDS = ("cuda",)


class BuiltinSpace(ConfigSpace):
    """A preset: which groups of dimensions it tunes (each one a feature toggle)."""

    name: ClassVar[str] = "builtin"
    features: ClassVar[frozenset[str]] = frozenset()
    opt_levels: ClassVar[tuple[str, ...]] = OPT_LEVELS

    def __init__(self, recording: Any = None, instance: Any = None, **options: Any):
        unknown = set(options) - set(FEATURES) - {"axes", "grid_stride", "max_threads", "min_threads",
                                                  "max_block", "pipeline"}
        if unknown:
            raise UsageError(f"space {self.name!r}: unknown options {', '.join(sorted(unknown))}; known: axes, "
                             "grid_stride, max_threads, min_threads, max_block, pipeline, " + ", ".join(FEATURES))
        super().__init__(recording, instance, **options)
        self.enabled = {f for f in FEATURES if _as_bool(options.get(f, f in self.features), f)}
        if "ptxas" not in options and self.backend not in PTXAS_BACKENDS:
            self.enabled.discard("ptxas")  # ptxas knobs mean nothing elsewhere; ask explicitly
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
        recorded = self.baseline().block.as_tuple()[AXES.index(axis)]
        limit = min(self.max_block, self.max_threads)
        values = set(P.powers_of_two(1, limit))
        if recorded <= limit:
            values.add(recorded)
        return sorted(values)

    def _grid_values(self, axis: str) -> list[int]:
        recorded = self.baseline().grid.as_tuple()[AXES.index(axis)]
        values = {max(1, recorded // 8), max(1, recorded // 4), max(1, recorded // 2), recorded,
                  recorded * 2, recorded * 4}
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
        if "knobs" in on:
            for knob in ("loop_unrolling", "loop_vectorization", "slp_vectorization"):
                dims[knob] = P.CategoricalParam(knob, (None, True, False))
        if "ptxas" in on:
            dims["ptxas_opt"] = P.IntRangeParam("ptxas_opt", 0, 3)
            dims["max_registers"] = P.OrdinalParam("max_registers", (0, 32, 64, 128, 255))
            dims["cache_mode"] = P.CategoricalParam("cache_mode", ("", "ca", "cg"))
            dims["fast_math"] = P.BoolParam("fast_math")
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
    features = frozenset(FEATURES)


SPACES = [QuickSpace, LaunchSpace, CompilerSpace, StandardSpace, FullSpace]
