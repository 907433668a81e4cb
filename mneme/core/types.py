"""Value types shared by every phase: `dim3`, `ExperimentConfiguration`, `ExperimentResult`.

All are attrs classes with validators; one cattrs converter (`converter`) turns them into
plain JSON-ready data and back. `ExperimentConfiguration.hash()` is stable across
processes, runs and Python versions: SHA-256 of canonical JSON of the grounded configuration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import cattrs

from mneme.core.errors import FormatError

# Fields that only matter for the launch-bounds transform; grounded when it is off.
_LAUNCH_BOUNDS_DEFAULTS = {"max_threads": 1024, "min_blocks_per_sm": 1}
CODEGEN_METHODS = ("serial", "parallel")


def _positive(instance, attribute, value):
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


def _non_negative(instance, attribute, value):
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _in_range(low: int, high: int):
    def check(instance, attribute, value):
        if not low <= value <= high:
            raise ValueError(f"{attribute.name} must be in {low}..{high}, got {value}")

    return check


def _strict_int(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")


@attrs.frozen
class dim3:  # noqa: N801 - the field's own name for it
    """Grid or block dimensions; every component is at least 1."""

    x: int = attrs.field(default=1, validator=[_strict_int, _positive])
    y: int = attrs.field(default=1, validator=[_strict_int, _positive])
    z: int = attrs.field(default=1, validator=[_strict_int, _positive])

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)

    def to_dict(self) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "z": self.z}

    @classmethod
    def from_dict(cls, data: Mapping[str, int]) -> dim3:
        return converter.structure(data, cls)

    @classmethod
    def of(cls, value: dim3 | Sequence[int] | Mapping[str, int] | int) -> dim3:
        """Coerce a dim3, an int, a 1-3 element sequence or an {x, y, z} mapping."""
        if isinstance(value, dim3):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, Mapping):
            return cls(**{k: int(v) for k, v in value.items()})
        if isinstance(value, Sequence) and 1 <= len(value) <= 3:
            return cls(*(int(v) for v in value))
        raise TypeError(f"cannot make a dim3 from {value!r}")

    def __str__(self) -> str:
        return f"({self.x}, {self.y}, {self.z})"


@attrs.frozen
class ExperimentConfiguration:
    """One variant of one kernel launch: launch geometry, IR transforms, pipeline, code generation.

    Fields not used by the configuration (launch-bound values while launch bounds are off)
    are reset by `ground()`, so that equal experiments hash equally.
    """

    grid: dim3 = attrs.field(converter=dim3.of)
    block: dim3 = attrs.field(converter=dim3.of)
    shared_mem: int = attrs.field(default=0, validator=[_strict_int, _non_negative])
    specialize: bool = False
    set_launch_bounds: bool = False
    max_threads: int = attrs.field(default=1024, validator=[_strict_int, _in_range(1, 1024)])
    min_blocks_per_sm: int = attrs.field(default=1, validator=[_strict_int, _positive])
    specialize_dims: bool = False
    specialize_dims_assume: bool = False
    passes: str = "default<O3>"
    codegen_opt: int = attrs.field(default=3, validator=[_strict_int, _in_range(0, 3)])
    codegen_method: str = attrs.field(default="serial", validator=attrs.validators.in_(CODEGEN_METHODS))
    prune: bool = True
    internalize: bool = True
    # Drop compiler-inserted auto-initialization stores (only those the compiler marked).
    remove_auto_init: bool = False
    # Pipeline tuning knobs (llvmlite's PipelineTuningOptions); None keeps LLVM's default.
    loop_unrolling: bool | None = None
    loop_vectorization: bool | None = None
    slp_vectorization: bool | None = None
    inlining_threshold: int | None = None
    # Machine-code generation knobs of the device toolchain (ptxas / driver JIT).
    ptxas_opt: int = attrs.field(default=3, validator=[_strict_int, _in_range(0, 3)])
    max_registers: int = attrs.field(default=0, validator=[_strict_int, _in_range(0, 255)])
    cache_mode: str = attrs.field(default="", validator=attrs.validators.in_(("", "ca", "cg", "cs", "lu", "cv")))
    fast_math: bool = False

    @property
    def threads_per_block(self) -> int:
        return self.block.size

    def is_valid(self) -> bool:
        """False when launch bounds are set below the block's thread count, or the block exceeds 1024."""
        if self.block.size > 1024:
            return False
        return not (self.set_launch_bounds and self.block.size > self.max_threads)

    def ground(self) -> ExperimentConfiguration:
        """Reset the fields the configuration does not use, so equal experiments compare equal."""
        changes: dict[str, Any] = {}
        if not self.set_launch_bounds:
            changes.update(_LAUNCH_BOUNDS_DEFAULTS)
        if self.specialize_dims:
            # Constants already carry everything the assumptions would say.
            changes["specialize_dims_assume"] = False
        return attrs.evolve(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        return converter.unstructure(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExperimentConfiguration:
        return structure(data, cls, source=source)

    def canonical_json(self) -> str:
        return canonical_json(self.ground().to_dict())

    def hash(self) -> str:
        """SHA-256 of the grounded configuration's canonical JSON, as hex."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def replace(self, **changes: Any) -> ExperimentConfiguration:
        return attrs.evolve(self, **changes)


#: The configuration fields that reach optimization and code generation but not the preprocessed IR
#: (the transforms' fields are in the variant hash): with the backend's toolchain and the variant
#: hash they decide a build. The one list the build cache and the loaded-kernel cache read.
BUILD_FIELDS = (
    "passes", "codegen_opt", "codegen_method", "loop_unrolling", "loop_vectorization", "slp_vectorization",
    "inlining_threshold", "ptxas_opt", "max_registers", "cache_mode",
)  # fmt: skip


def build_fields(config: ExperimentConfiguration) -> dict[str, Any]:
    """The `BUILD_FIELDS` of `config`, by name (those it has)."""
    return {name: getattr(config, name) for name in BUILD_FIELDS if hasattr(config, name)}


@attrs.define
class ExperimentResult:
    """What one experiment measured. Times are in seconds; `exec_time` has one entry per timed run."""

    preprocess_ir_time: float = 0.0
    opt_time: float = 0.0
    codegen_time: float = 0.0
    load_time: float = 0.0
    obj_size: int = 0
    exec_time: list[float] = attrs.Factory(list)
    warmup_time: list[float] = attrs.Factory(list)
    verified: bool = False
    executed: bool = False
    failed: bool = False
    start_time: str = ""
    end_time: str = ""
    gpu_id: int = -1
    device: str = ""
    backend: str = ""
    variant_hash: str = ""
    const_mem_usage: int = -1
    local_mem_usage: int = -1
    shared_mem_usage: int = -1
    reg_usage: int = -1
    spill_stores: int = -1
    spill_loads: int = -1
    error: str = ""
    # crash | timeout | compile | load | launch | fault | verify | invalid | error; empty when fine
    error_kind: str = ""
    mismatches: list[str] = attrs.Factory(list)
    #: What measured `exec_time` (the backend's name for it: "cupti", "events", "host-clock"); "" when not timed.
    timer: str = ""

    @property
    def median_time(self) -> float | None:
        if not self.exec_time:
            return None
        ordered = sorted(self.exec_time)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    @property
    def ok(self) -> bool:
        return self.executed and self.verified and not self.failed

    def to_dict(self) -> dict[str, Any]:
        return converter.unstructure(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExperimentResult:
        return structure(data, cls, source=source)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def structure_dim3(value: Any, _type: type) -> dim3:
        return dim3.of(value)

    conv.register_structure_hook(dim3, structure_dim3)
    return conv


converter = _make_converter()


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the same text for the same data everywhere."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def structure(data: Any, cls: type, *, source: str | None = None):
    """Structure `data` into `cls`; errors name the source and the offending fields."""
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        raise FormatError(source, f"invalid {cls.__name__}: {_describe(exc)}") from exc
    except (TypeError, ValueError) as exc:
        raise FormatError(source, f"invalid {cls.__name__}: {exc}") from exc


def _describe(exc: BaseException) -> str:
    messages = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
    return "; ".join(messages)
