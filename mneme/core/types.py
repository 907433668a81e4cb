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

import functools
from typing import TYPE_CHECKING

import attrs

from mneme.core import params
from mneme.core.errors import FormatError

if TYPE_CHECKING:
    import cattrs

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
        return _converter().structure(data, cls)

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


@attrs.frozen(init=False)
class ExperimentConfiguration:
    """One variant of one kernel launch: the original Mneme API's fields, and the plugins' knobs.

    `knobs` holds the values of parameters that plugins declare (`mneme.core.params`) where
    they differ from the default; read them as attributes (`config.fast_math`), set them as
    keywords (`replace(fast_math=True)`). Fields not used by the configuration (launch-bound
    values while launch bounds are off) are reset by `ground()`, so equal experiments hash equally.
    """

    grid: dim3 = attrs.field(converter=dim3.of)
    block: dim3 = attrs.field(converter=dim3.of)
    shared_mem: int = attrs.field(default=0, validator=[_strict_int, _non_negative])
    specialize: bool = False
    set_launch_bounds: bool = False
    max_threads: int = attrs.field(default=1024, validator=[_strict_int, _in_range(1, 1024)])
    min_blocks_per_sm: int = attrs.field(default=1, validator=[_strict_int, _positive])
    specialize_dims: bool = False
    passes: str = "default<O3>"
    codegen_opt: int = attrs.field(default=3, validator=[_strict_int, _in_range(0, 3)])
    codegen_method: str = attrs.field(default="serial", validator=attrs.validators.in_(CODEGEN_METHODS))
    prune: bool = True
    internalize: bool = True
    knobs: Mapping[str, Any] = attrs.field(factory=dict, repr=lambda k: repr(dict(k)))

    def __init__(self, *args: Any, knobs: Mapping[str, Any] | None = None, **fields: Any):
        values = dict(knobs or {})
        values.update({name: fields.pop(name) for name in list(fields) if name not in _CORE_FIELDS})
        self.__attrs_init__(*args, knobs=params.normalize(values), **fields)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: a knob, at its value or its default.
        if name.startswith("_") or name == "knobs":
            raise AttributeError(name)
        knobs = object.__getattribute__(self, "knobs")
        if name in knobs:
            return knobs[name]
        try:
            return params.default_of(name)
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} has no field or parameter {name!r}") from None

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
        # A knob a core field makes moot (assumptions about dimensions that are constants).
        unused = [name for name in self.knobs if (field := params.unused_when(name)) and getattr(self, field)]
        if unused:
            changes["knobs"] = {k: v for k, v in self.knobs.items() if k not in unused}
        return self.replace(**changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: schema, the core fields, then every knob by name (docs/design/parameters.md)."""
        data = self._flat()
        for name in params.knobs():
            data.setdefault(name, getattr(self, name))
        return {"schema": params.SCHEMA, **data}

    def _flat(self) -> dict[str, Any]:
        """Core fields, schema 1's knobs (at their values or defaults) and the other knobs that are set."""
        # what the converter makes of the core fields (dim3 -> its dict, the rest as they are), without cattrs:
        # every build hashes its configuration
        data = {name: _unstructure_core(getattr(self, name)) for name in _CORE_FIELDS}
        data.update({name: getattr(self, name) for name in params.schema1_knobs()})
        data.update(self.knobs)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExperimentConfiguration:
        # the converter's own hook for this class, called directly: a command line needs no cattrs
        try:
            return _structure_config(data, cls)
        except (TypeError, ValueError) as exc:
            raise FormatError(source, f"invalid {cls.__name__}: {exc}") from exc

    def canonical_json(self) -> str:
        # Schema 1's text for schema 1's fields: hashes written before knobs existed stay valid.
        return canonical_json(self.ground()._flat())

    def hash(self) -> str:
        """SHA-256 of the grounded configuration's canonical JSON, as hex."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def replace(self, **changes: Any) -> ExperimentConfiguration:
        """A copy with fields or knobs changed (`knobs=` replaces the whole mapping)."""
        data = {name: getattr(self, name) for name in _CORE_FIELDS}
        knobs = dict(changes.pop("knobs", self.knobs))
        knobs.update({name: changes.pop(name) for name in list(changes) if name not in _CORE_FIELDS})
        data.update(changes)
        return ExperimentConfiguration(**data, knobs=knobs)


_CORE_FIELDS = tuple(a.name for a in attrs.fields(ExperimentConfiguration) if a.name != "knobs")


#: The configuration fields that reach optimization and code generation but not the preprocessed IR
#: (the transforms' fields are in the variant hash): with the backend's toolchain and the variant
#: hash they decide a build. The one list the build cache and the loaded-kernel cache read.
def build_fields(config: ExperimentConfiguration, *, assemble: bool = True) -> dict[str, Any]:
    """The values of `config`'s fields that reach optimization and code generation, by name.

    Which fields those are is declared once, by the parameters' stages (`params.build_fields()`).
    `assemble=False` leaves out the assemble stage's: what a backend's intermediate code depends on.
    """
    names = params.build_fields(params.BUILD_STAGES if assemble else params.INTERMEDIATE_STAGES)
    return {name: getattr(config, name) for name in names if hasattr(config, name)}


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
    #: SHA-256 of the loaded binary: equal for configurations that compile to the same code.
    code_hash: str = ""
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
    #: What assembled the machine code the resources were read from ("assembler 13.5", as the backend names it); "" when none did.
    assembler: str = ""
    #: Why the device run was skipped though the build succeeded: "equivalent" (the code and launch of an
    #: experiment measured already; a tuning session answers it from that one); "" when it ran.
    skipped: str = ""

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
        return _converter().unstructure(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ExperimentResult:
        return structure(data, cls, source=source)


@functools.lru_cache(maxsize=1)
def _converter() -> cattrs.Converter:
    """The converter, made on first use: cattrs is imported only by what converts (start-up)."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=True)

    def structure_dim3(value: Any, _type: type) -> dim3:
        return dim3.of(value)

    conv.register_structure_hook(dim3, structure_dim3)
    conv.register_structure_hook(ExperimentConfiguration, _structure_config)
    conv.register_unstructure_hook(ExperimentConfiguration, ExperimentConfiguration.to_dict)
    return conv


def _structure_config(data: Any, _type: type) -> ExperimentConfiguration:
    """A configuration from JSON data of any schema (schema 1 had no `schema` key and no plugin knobs)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a configuration is a mapping of fields, not {type(data).__name__}")
    data = dict(data)
    schema = data.pop("schema", 1)
    if isinstance(schema, bool) or not isinstance(schema, int) or schema > params.SCHEMA:
        raise ValueError(
            f"configuration schema {schema!r} is newer than this Mneme reads (up to {params.SCHEMA}); upgrade Mneme"
        )
    # Schema 1's fields are schema 2's core fields and knobs under the same names: nothing to rename.
    return ExperimentConfiguration(**data)


def __getattr__(name: str) -> Any:
    if name == "converter":  # `from mneme.core.types import converter`: the one converter
        return _converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _unstructure_core(value: Any) -> Any:
    return value.to_dict() if isinstance(value, dim3) else value


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the same text for the same data everywhere."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def structure(data: Any, cls: type, *, source: str | None = None):
    """Structure `data` into `cls`; errors name the source and the offending fields."""
    import cattrs

    try:
        return _converter().structure(data, cls)
    except cattrs.BaseValidationError as exc:
        raise FormatError(source, f"invalid {cls.__name__}: {_describe(exc)}") from exc
    except (TypeError, ValueError) as exc:
        raise FormatError(source, f"invalid {cls.__name__}: {exc}") from exc


def _describe(exc: BaseException) -> str:
    import cattrs

    messages = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
    return "; ".join(messages)
