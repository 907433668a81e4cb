"""`mneme.tuning.builtin_spaces` of the original Mneme API: the search space `mneme tune` builds from options.

`BuiltinTuneSearchSpace(kernel, preset=..., launch_dim=..., ...)` offers block shapes derived
from the recorded launch (the grid follows so the same work is covered), pipelines, codegen
levels and the specialization switches, per preset (`quick`, `standard`, `launch`, `compiler`,
`full`). `load_custom_space("file.py:Class", kernel, kwargs)` builds a user's `SearchSpace`.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mneme.compat.search_space import (
    BaseParam,
    BoolParam,
    CategoricalParam,
    FixedParam,
    IntRangeParam,
    RealRangeParam,
    SearchSpace,
)
from mneme.compat.types import ExperimentConfiguration, dim3

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
PRESETS = ("quick", "standard", "launch", "compiler", "full")
DEFAULT_PIPELINES = ["default<O3>", "default<O2>", "default<O1>", "default<Os>", "default<Oz>"]
QUICK_PIPELINES = ["default<O3>", "default<O2>"]


def parse_range(spec: str) -> tuple[int, int, int]:
    """`LOW:HIGH[:STEP]` -> (low, high, step); a bad range raises `ValueError`."""
    parts = [p for p in str(spec).split(":") if p != ""]
    if len(parts) not in (2, 3):
        raise ValueError(f"Expected range LOW:HIGH[:STEP], got {spec!r}")
    low, high = int(parts[0]), int(parts[1])
    step = int(parts[2]) if len(parts) == 3 else 1
    if step <= 0:
        raise ValueError(f"Range step must be positive, got {spec!r}")
    if low > high:
        raise ValueError(f"Range low must be <= high, got {spec!r}")
    return low, high, step


def parse_key_value_args(values: Sequence[str] | None) -> dict[str, Any]:
    """`--space-arg KEY=VALUE` strings -> dict; a value is JSON when it parses as JSON, else the text."""
    out: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"Expected KEY=VALUE for --space-arg, got {item!r}")
        if not key:
            raise ValueError(f"Empty --space-arg key in {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def dim3_to_shape(value: Any) -> str:
    return f"{int(value.x)}x{int(value.y)}x{int(value.z)}"


def shape_to_dim3(value: str) -> dim3:
    try:
        x, y, z = (int(v) for v in value.split("x"))
    except ValueError as exc:
        raise ValueError(f"Invalid block shape {value!r}; expected XxYxZ") from exc
    return dim3(x, y, z)


def launch_layout_key(block: Sequence[int], grid: Sequence[int]) -> str:
    """The current release's name of a whole launch layout: `BXxBYxBZ/GXxGYxGZ`."""
    return "x".join(str(v) for v in block) + "/" + "x".join(str(v) for v in grid)


def normalize_launch_candidates(candidates: Any, recorded_kernel: Any = None) -> list[dict]:
    """Supplied launch layouts, checked and deduplicated in order, as the current release takes them.

    Each is `{"block": [x, y, z]}` with an optional `"grid"`, three integers each (no booleans,
    strings or floats) within the hardware limits. A missing grid is the one covering the
    recorded work (ceiling division per axis) when the recorded kernel is given, else left out.
    """
    if not isinstance(candidates, list):
        raise ValueError("launch_candidates must be a list of dictionaries")  # noqa: TRY004 - the current release's
    out, seen = [], set()
    for i, item in enumerate(candidates):
        where = f"launch_candidates[{i}]"
        if not isinstance(item, Mapping) or "block" not in item:
            raise ValueError(f"{where} requires a block")
        if set(item) - {"block", "grid"}:
            raise ValueError(f"{where} only accepts block and grid")
        layout = {}
        for name, limits in (("block", MAX_BLOCK_DIMS), ("grid", MAX_GRID_DIMS)):
            if name not in item:
                continue
            values = item[name]
            if not isinstance(values, (list, tuple)) or len(values) != 3 or any(type(v) is not int for v in values):
                raise ValueError(f"{where}.{name} must contain three integers")
            if any(not 0 < v <= m for v, m in zip(values, limits)):
                raise ValueError(f"{where}.{name} exceeds launch dimension limits")
            layout[name] = list(values)
        if math.prod(layout["block"]) > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"{where}.block exceeds the threads-per-block limit")
        if "grid" not in layout and recorded_kernel is not None:
            work = [
                int(getattr(recorded_kernel.block_dim, a)) * int(getattr(recorded_kernel.grid_dim, a)) for a in "xyz"
            ]
            layout["grid"] = [-(-w // b) for w, b in zip(work, layout["block"])]
            if any(not 0 < v <= m for v, m in zip(layout["grid"], MAX_GRID_DIMS)):
                raise ValueError(f"{where}.grid exceeds launch dimension limits after resolution")
        key = (tuple(layout["block"]), tuple(layout.get("grid", ())))
        if key not in seen:
            seen.add(key)
            out.append(layout)
    return out


def _axis_values(recorded: int, total_work: int, axis_limit: int) -> list[int]:
    """Sizes worth trying on one axis: powers of two, scalings of the recorded size, divisors of the work."""
    values = {max(1, recorded)}
    power = 1
    while power <= min(axis_limit, max(1, total_work)):
        values.add(power)
        power *= 2
    values.update(max(1, round(recorded * s)) for s in (0.5, 0.75, 1.25, 1.5, 2.0))
    for d in range(1, min(math.isqrt(max(1, total_work)), 2048) + 1):
        if total_work % d == 0:
            values.update((d, total_work // d))
    return sorted(v for v in values if 0 < v <= axis_limit)


def _active_axes(kernel: Any, launch_dim: str) -> tuple[bool, bool, bool]:
    fixed = {
        "none": (False, False, False),
        "x": (True, False, False),
        "xy": (True, True, False),
        "xyz": (True, True, True),
    }
    if launch_dim in fixed:
        return fixed[launch_dim]
    if launch_dim != "auto":
        raise ValueError(f"Unknown launch_dim {launch_dim!r}")
    return tuple(getattr(kernel.block_dim, a) > 1 or getattr(kernel.grid_dim, a) > 1 for a in "xyz")


def _launch_budget(recorded_threads: int, safety: str) -> int:
    budgets = {
        "conservative": max(1, recorded_threads),
        "balanced": max(1, recorded_threads * 2),
        "aggressive": MAX_THREADS_PER_BLOCK,
    }
    if safety not in budgets:
        raise ValueError(f"Unknown launch_safety {safety!r}")
    return min(MAX_THREADS_PER_BLOCK, budgets[safety])


def _candidate_block_shapes(kernel: Any, launch_dim: str, launch_safety: str) -> list[str]:
    """Block shapes (`XxYxZ`) whose derived grids cover the recorded work within the hardware limits."""
    recorded = tuple(int(getattr(kernel.block_dim, a)) for a in "xyz")
    grid = tuple(int(getattr(kernel.grid_dim, a)) for a in "xyz")
    work = tuple(max(1, recorded[i] * grid[i]) for i in range(3))
    active = _active_axes(kernel, launch_dim)
    budget = _launch_budget(math.prod(recorded), launch_safety)
    axes = [_axis_values(recorded[i], work[i], MAX_BLOCK_DIMS[i]) if active[i] else [recorded[i]] for i in range(3)]
    shapes = {dim3_to_shape(kernel.block_dim)}
    for shape in itertools.product(*axes):
        threads = math.prod(shape)
        if not 0 < threads <= MAX_THREADS_PER_BLOCK or (threads > budget and shape != recorded):
            continue
        if all(0 < math.ceil(work[i] / shape[i]) <= MAX_GRID_DIMS[i] for i in range(3)):
            shapes.add("x".join(map(str, shape)))
    return sorted(shapes, key=lambda s: tuple(int(v) for v in s.split("x")))


def _pipeline_choices(
    preset: str, passes: Sequence[str] | None, fixed_passes: str | None, pipeline_file: str | None
) -> tuple[list[str] | None, str]:
    """(choices or None for a fixed pipeline, the baseline's pipeline)."""
    if fixed_passes:
        return None, fixed_passes
    choices = [str(p) for p in passes or []]
    if pipeline_file:
        lines = Path(pipeline_file).read_text().splitlines()
        choices += [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if choices:
        return list(dict.fromkeys(choices)), choices[0]
    if preset == "quick":
        return list(QUICK_PIPELINES), QUICK_PIPELINES[0]
    if preset == "launch":
        return None, "default<O3>"
    return list(DEFAULT_PIPELINES), DEFAULT_PIPELINES[0]


def _space_param(name: str, mode: str, fixed_default: bool = False) -> BaseParam:
    modes = {"fixed": fixed_default, "on": True, "off": False}
    if mode in modes:
        return FixedParam(name, modes[mode])
    if mode == "on-off":
        return BoolParam(name)
    raise ValueError(f"Unknown {name} mode {mode!r}")


def param_to_description(param: BaseParam) -> dict[str, Any]:
    if isinstance(param, FixedParam):
        return {"type": "fixed", "value": param.value}
    if isinstance(param, BoolParam):
        return {"type": "bool", "choices": list(param.choices)}
    if isinstance(param, CategoricalParam):
        return {"type": "categorical", "choices": list(param.choices)}
    if isinstance(param, IntRangeParam):
        return {"type": "int_range", "low": param.low, "high": param.high, "step": param.step}
    if isinstance(param, RealRangeParam):
        return {"type": "real_range", "low": param.low, "high": param.high}
    return {"type": type(param).__name__}


def describe_search_space(space: Any, *, preset: str | None = None, custom: bool = False) -> dict[str, Any]:
    """The JSON description written to `search_space.json`."""
    data: dict[str, Any] = {
        "type": "custom" if custom else "builtin",
        "dimensions": {name: param_to_description(p) for name, p in space.dimensions().items()},
    }
    if preset:
        data["preset"] = preset
    if hasattr(space, "metadata"):
        data["metadata"] = space.metadata
    return data


class BuiltinTuneSearchSpace(SearchSpace):
    """The space of the original's `mneme tune` options (see the module docstring)."""

    def __init__(
        self,
        recorded_kernel: Any,
        *,
        preset: str = "standard",
        launch_dim: str = "auto",
        launch_safety: str | None = None,
        passes: Sequence[str] | None = None,
        fixed_passes: str | None = None,
        pipeline_file: str | None = None,
        codegen_opt_range: str | None = None,
        fixed_codegen_opt: int | None = None,
        specialize_space: str | None = None,
        specialize_dims_space: str | None = None,
        launch_bounds_space: str | None = None,
        min_blocks_per_sm_range: str | None = None,
        fixed_min_blocks_per_sm: int | None = None,
        max_threads_range: str | None = None,
        max_threads_policy: str = "block-threads",
        codegen_method: str | None = None,
        launch_candidates: list[dict] | None = None,
    ):
        if preset not in PRESETS:
            raise ValueError(f"Unknown tuning preset {preset!r}; one of {', '.join(PRESETS)}")
        self.recorded_kernel = recorded_kernel
        self.preset = preset
        self.codegen_method = codegen_method
        self.launch_dim = "none" if preset == "compiler" else launch_dim
        self.launch_safety = launch_safety or {"quick": "conservative", "full": "aggressive"}.get(preset, "balanced")
        self._passes_choices, self._baseline_passes = _pipeline_choices(preset, passes, fixed_passes, pipeline_file)
        if fixed_codegen_opt is None and codegen_opt_range is None and preset == "launch":
            fixed_codegen_opt = 3
        if fixed_codegen_opt is None:
            low, high, step = parse_range(codegen_opt_range or ("2:3" if preset == "quick" else "1:3"))
            codegen: BaseParam = IntRangeParam("codegen_opt", low, high, step)
            self._baseline_codegen_opt = high
        else:
            codegen = FixedParam("codegen_opt", int(fixed_codegen_opt))
            self._baseline_codegen_opt = int(fixed_codegen_opt)
        switch = "on-off" if preset == "full" else "fixed"

        dims: dict[str, BaseParam] = {}
        if self.launch_dim != "none":
            shapes = _candidate_block_shapes(recorded_kernel, self.launch_dim, self.launch_safety)
            dims["block_shape"] = CategoricalParam("block_shape", shapes)
        else:
            dims["block_shape"] = FixedParam("block_shape", dim3_to_shape(recorded_kernel.block_dim))
        self.launch_candidates = normalize_launch_candidates(launch_candidates or [], recorded_kernel)
        self.launch_layouts: dict[str, dict] = {}
        if self.launch_candidates:  # explicit layouts join the derived ones as one categorical dimension
            for shape in finite_param_values(dims.pop("block_shape")):
                block = shape_to_dim3(shape)
                grid = self._derive_grid(block)
                layout = {"block": [block.x, block.y, block.z], "grid": [grid.x, grid.y, grid.z]}
                self.launch_layouts[launch_layout_key(layout["block"], layout["grid"])] = layout
            for layout in self.launch_candidates:
                self.launch_layouts[launch_layout_key(layout["block"], layout["grid"])] = layout
            dims["launch_layout"] = CategoricalParam("launch_layout", list(self.launch_layouts))
        dims["passes"] = (
            FixedParam("passes", self._baseline_passes)
            if self._passes_choices is None
            else CategoricalParam("passes", self._passes_choices)
        )
        dims["codegen_opt"] = codegen
        dims["specialize"] = _space_param("specialize", specialize_space or switch)
        dims["specialize_dims"] = _space_param("specialize_dims", specialize_dims_space or switch)
        dims["set_launch_bounds"] = _space_param("set_launch_bounds", launch_bounds_space or switch)
        if fixed_min_blocks_per_sm is not None:
            dims["min_blocks_per_sm"] = FixedParam("min_blocks_per_sm", int(fixed_min_blocks_per_sm))
        elif min_blocks_per_sm_range is not None or preset == "full":
            dims["min_blocks_per_sm"] = IntRangeParam(
                "min_blocks_per_sm", *parse_range(min_blocks_per_sm_range or "1:8")
            )
        else:
            dims["min_blocks_per_sm"] = FixedParam("min_blocks_per_sm", 0)
        self.max_threads_policy = max_threads_policy
        if max_threads_range:
            dims["max_threads"] = IntRangeParam("max_threads", *parse_range(max_threads_range))
        elif max_threads_policy == "powers-of-two":
            dims["max_threads"] = CategoricalParam("max_threads", [64, 128, 256, 512, 1024])
        elif max_threads_policy in ("recorded", "block-threads", "hardware"):
            dims["max_threads"] = FixedParam("max_threads", 0)
        else:
            raise ValueError(f"Unknown max_threads_policy {max_threads_policy!r}")
        self._dimensions = dims
        self.metadata: dict[str, Any] = {
            "launch_dim": self.launch_dim,
            "launch_safety": self.launch_safety,
            "baseline_passes": self._baseline_passes,
            "baseline_codegen_opt": self._baseline_codegen_opt,
            "codegen_method": self.codegen_method,
        }
        if self.launch_candidates:
            self.metadata["launch_layouts"] = list(self.launch_layouts.values())

    def dimensions(self) -> dict[str, BaseParam]:
        return dict(self._dimensions)

    def _derive_grid(self, block: dim3) -> dim3:
        """The grid that covers the recorded work with `block` on the active axes (the recorded grid elsewhere)."""
        active = _active_axes(self.recorded_kernel, self.launch_dim)
        rb, rg = self.recorded_kernel.block_dim, self.recorded_kernel.grid_dim
        return dim3(
            *(
                math.ceil(max(1, getattr(rb, a) * getattr(rg, a)) / getattr(block, a)) if on else int(getattr(rg, a))
                for a, on in zip("xyz", active)
            )
        )

    def _max_threads(self, params: Mapping[str, Any], block: dim3) -> int:
        if not params.get("set_launch_bounds", False):
            return 0
        explicit = int(params.get("max_threads", 0) or 0)
        if explicit > 0:
            return explicit
        if self.max_threads_policy == "recorded":
            rb = self.recorded_kernel.block_dim
            return int(rb.x) * int(rb.y) * int(rb.z)
        if self.max_threads_policy == "hardware":
            return MAX_THREADS_PER_BLOCK
        return int(block.x) * int(block.y) * int(block.z)

    def derived(self, params: dict[str, Any]) -> ExperimentConfiguration:
        if "launch_layout" in params:
            layout = self.launch_layouts[params["launch_layout"]]
            block, grid = dim3(*layout["block"]), dim3(*layout["grid"])
        else:
            block = shape_to_dim3(params["block_shape"])
            grid = self._derive_grid(block)
        bounds = bool(params.get("set_launch_bounds", False))
        return ExperimentConfiguration(
            grid=grid,
            block=block,
            shared_mem=int(self.recorded_kernel.shared_mem),
            specialize=bool(params.get("specialize", False)),
            set_launch_bounds=bounds,
            max_threads=self._max_threads(params, block) if bounds else 0,
            min_blocks_per_sm=int(params.get("min_blocks_per_sm", 0) or 0) if bounds else 0,
            specialize_dims=bool(params.get("specialize_dims", False)),
            passes=str(params.get("passes", self._baseline_passes)),
            codegen_opt=int(params.get("codegen_opt", self._baseline_codegen_opt)),
            prune=True,
            internalize=True,
        )

    def constraints(self, params: Any) -> bool:
        config = params if isinstance(params, ExperimentConfiguration) else self.derived(dict(params))
        block, grid = config.block, config.grid
        if not 0 < int(block.x) * int(block.y) * int(block.z) <= MAX_THREADS_PER_BLOCK:
            return False
        for i, a in enumerate("xyz"):
            if not 0 < int(getattr(block, a)) <= MAX_BLOCK_DIMS[i] or not 0 < int(getattr(grid, a)) <= MAX_GRID_DIMS[i]:
                return False
        return config.is_valid()

    def baseline(self) -> ExperimentConfiguration:
        k = self.recorded_kernel
        return ExperimentConfiguration(
            grid=dim3(int(k.grid_dim.x), int(k.grid_dim.y), int(k.grid_dim.z)),
            block=dim3(int(k.block_dim.x), int(k.block_dim.y), int(k.block_dim.z)),
            shared_mem=int(k.shared_mem),
            max_threads=0,
            min_blocks_per_sm=0,
            passes=self._baseline_passes,
            codegen_opt=self._baseline_codegen_opt,
            prune=True,
            internalize=True,
        )


def load_custom_space(spec: str, recorded_kernel: Any, kwargs: Mapping[str, Any] | None = None) -> Any:
    """`MODULE_OR_PATH:CLASS` -> `CLASS(recorded_kernel, **kwargs)`, a user's space of the original API."""
    if ":" not in spec:
        raise ValueError("--space-module must have the form MODULE_OR_PATH:CLASS")
    module_name, class_name = spec.rsplit(":", 1)
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name).resolve()
        if not path.is_file():
            raise ValueError(f"--space-module {spec}: {path} does not exist")
        name = f"mneme_user_space_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, str(path))
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"Could not import custom search space from {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"--space-module {spec}: {module_name} defines no {class_name!r}")
    return cls(recorded_kernel, **dict(kwargs or {}))


def finite_param_values(param: BaseParam) -> list[Any]:
    if isinstance(param, FixedParam):
        return [param.value]
    if isinstance(param, (BoolParam, CategoricalParam)):
        return list(param.choices)
    if isinstance(param, IntRangeParam):
        return param.values()
    raise ValueError(f"Parameter {param.name!r} is not finite/enumerable")


def iter_finite_params(space: Any) -> Iterable[dict[str, Any]]:
    """Every assignment of the space's (finite) dimensions, in the cartesian product's order."""
    dims = space.dimensions()
    for combo in itertools.product(*(finite_param_values(p) for p in dims.values())):
        yield dict(zip(dims, combo))
