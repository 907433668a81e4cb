"""`mneme.mneme_types` of the original Mneme API: mutable `dim3`, configuration and result.

The core's types are frozen attrs classes with validators and times in seconds; these
are the original's plain, mutable records. `to_core()` / `from_core()` convert.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from mneme.core import types as core

#: Seconds (the core) to the original's integer timer units (nanoseconds).
NS_PER_SECOND = 1_000_000_000


@dataclasses.dataclass
class dim3:  # noqa: N801 - the original's name
    """Grid or block dimensions, mutable as in the original Mneme API."""

    x: int = 1
    y: int = 1
    z: int = 1

    def to_dict(self) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "z": self.z}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> dim3:
        return cls(**data)

    @classmethod
    def of(cls, value: Any) -> dim3:
        if isinstance(value, dim3):
            return value
        if isinstance(value, core.dim3):
            return cls(value.x, value.y, value.z)
        if isinstance(value, dict):
            return cls.from_dict(value)
        got = core.dim3.of(value)
        return cls(got.x, got.y, got.z)

    def to_core(self) -> core.dim3:
        return core.dim3(int(self.x), int(self.y), int(self.z))

    def __str__(self) -> str:
        return f"dim3(x={self.x}, y={self.y}, z={self.z})"


def _serializable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _serializable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_serializable(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _serializable(v) for k, v in obj.items()}
    return obj


def _digest(data: dict[str, Any]) -> str:
    payload = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _core_codegen_method(value: Any) -> str:
    # The original's "rtc" (NVRTC) and any other name have no counterpart: the backend's one code generator.
    return value if value in core.CODEGEN_METHODS else "serial"


@dataclasses.dataclass
class ExperimentConfiguration:
    """One experiment's knobs with the original's fields, defaults and in-place `ground()`."""

    grid: dim3 = dataclasses.field(default_factory=dim3)
    block: dim3 = dataclasses.field(default_factory=dim3)
    shared_mem: int = 0
    specialize: bool = False
    set_launch_bounds: bool = False
    max_threads: int = 1024
    min_blocks_per_sm: int = 1
    specialize_dims: bool = False
    passes: str = "default<O3>"
    codegen_opt: int = 3
    # The documented version's field; the current release dropped it (Proteus picks its code generator).
    codegen_method: str = "serial"
    prune: bool = True
    internalize: bool = True

    def __post_init__(self) -> None:
        self.grid = dim3.of(self.grid)
        self.block = dim3.of(self.block)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentConfiguration:
        data = dict(data)
        grid, block = data.pop("grid"), data.pop("block")
        return cls(grid=dim3.of(grid), block=dim3.of(block), **data)

    def to_dict(self) -> dict[str, Any]:
        """The fields as the current release writes them: `codegen_method` only where it changes the experiment.

        The current release has no `codegen_method`; the documented version's values other than
        "parallel" all build with the backend's one code generator, so they are left out and the
        dictionary (and `hash()`) is the current release's. `documented_dict()` keeps every field.
        """
        data = self.documented_dict()
        if _core_codegen_method(data["codegen_method"]) == "serial":
            del data["codegen_method"]
        return data

    def documented_dict(self) -> dict[str, Any]:
        """Every field, `codegen_method` included, as the documented version wrote them."""
        return _serializable(self)

    def is_valid(self) -> bool:
        """False when launch bounds are set below the block's thread count."""
        threads = self.block.x * self.block.y * self.block.z
        return not (self.set_launch_bounds and self.max_threads < threads)

    def ground(self) -> None:
        """Zero the launch-bound values when launch bounds are off (in place, as the original)."""
        if not self.set_launch_bounds:
            self.max_threads = 0
            self.min_blocks_per_sm = 0

    def hash(self) -> str:
        """SHA-256 of the sorted, compact JSON of `to_dict()`: the current release's digest."""
        return _digest(self.to_dict())

    def documented_hash(self) -> str:
        """The documented version's digest (all 13 fields): the key of results files it wrote."""
        return _digest(self.documented_dict())

    def to_core(self) -> core.ExperimentConfiguration:
        """The core's configuration; unused launch-bound values (bounds off) become the core's defaults.

        Raises `ValueError` for a value the core cannot build (a block of 0 threads, a fraction as
        `max_threads` with launch bounds on); the executors turn that into a failed result.
        """
        bounds = self.set_launch_bounds
        return core.ExperimentConfiguration(
            grid=self.grid.to_core(),
            block=self.block.to_core(),
            shared_mem=int(self.shared_mem),
            specialize=bool(self.specialize),
            set_launch_bounds=bool(bounds),
            # launch-bound values are unused without launch bounds (the original grounds them): any value goes
            max_threads=int(self.max_threads) if bounds else 1024,
            min_blocks_per_sm=int(self.min_blocks_per_sm) if bounds else 1,
            specialize_dims=bool(self.specialize_dims),
            passes=self.passes,
            codegen_opt=int(self.codegen_opt),
            codegen_method=_core_codegen_method(self.codegen_method),
            prune=bool(self.prune),
            internalize=bool(self.internalize),
        )

    @classmethod
    def from_core(cls, config: core.ExperimentConfiguration) -> ExperimentConfiguration:
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class ExperimentResult:
    """What one experiment measured, in the original's units: `exec_time` in integer nanoseconds.

    `exec_time` holds every timed run, the two warm-up runs first (iterations + 2 entries).
    The core's full result stays available as `.mneme` (not a field: `to_dict()` is the original's).
    """

    preprocess_ir_time: float = 0.0
    opt_time: float = 0.0
    codegen_time: float = 0.0
    obj_size: int = 0
    exec_time: list[int] = dataclasses.field(default_factory=list)
    verified: bool = False
    executed: bool = False
    failed: bool = False
    start_time: str = ""
    end_time: str = ""
    gpu_id: int = 0
    const_mem_usage: int = 0
    local_mem_usage: int = 0
    reg_usage: int = 0
    error: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentResult:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_core(cls, result: core.ExperimentResult) -> ExperimentResult:
        runs = [*result.warmup_time, *result.exec_time]
        out = cls(
            preprocess_ir_time=result.preprocess_ir_time,
            opt_time=result.opt_time,
            codegen_time=result.codegen_time,
            obj_size=result.obj_size,
            exec_time=[round(t * NS_PER_SECOND) for t in runs],
            verified=result.verified,
            executed=result.executed,
            failed=result.failed,
            start_time=result.start_time,
            end_time=result.end_time,
            gpu_id=max(result.gpu_id, 0),
            const_mem_usage=max(result.const_mem_usage, 0),
            local_mem_usage=max(result.local_mem_usage, 0),
            reg_usage=max(result.reg_usage, 0),
            error=result.error,
        )
        out.mneme = result
        return out
