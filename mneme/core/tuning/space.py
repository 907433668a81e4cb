"""Search spaces: named dimensions, the configuration they derive, and the constraints they impose.

A `SearchSpace` is built from a recording (`from_recording(rec, instance, **options)`).
`dimensions()` names its parameters, `derived(params)` turns one point into an
`ExperimentConfiguration`, and `constraints(params)` says whether the point may run at all.
`ConfigSpace` maps parameter names onto configuration fields (`block_x`, `grid_y`,
`passes`, `specialize`, ...), which is what the built-in spaces and YAML/JSON spaces use.
"""

from __future__ import annotations

import abc
import hashlib
import importlib.util
import json
import logging
import math
import random
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from mneme.core import limits, params, plugins
from mneme.core.errors import FormatError, UsageError
from mneme.core.keys import check_keys
from mneme.core.tuning import contracts
from mneme.core.tuning import params as P
from mneme.core.tuning.constraints import Constraint, parse_all
from mneme.core.types import ExperimentConfiguration, canonical_json, dim3

log = logging.getLogger(__name__)

MAX_SAMPLE_RETRIES = 1000
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
AXES = "xyz"


def config_fields() -> set[str]:
    """Names a space's parameter may set: the configuration's fields but grid/block, and the plugins' knobs."""
    return ({f.name for f in attrs.fields(ExperimentConfiguration)} - {"grid", "block", "knobs"}) | params.known_names()


DIM_NAMES = {f"{kind}_{axis}" for kind in ("block", "grid") for axis in AXES}


class SearchSpace(abc.ABC):
    """A parameterized space over `ExperimentConfiguration`; subclasses define the three methods."""

    name: ClassVar[str] = "custom"

    def __init__(self, recording: Any = None, instance: Any = None, **options: Any):
        self.recording = recording
        self.instance = instance
        self.options = dict(options)
        self._dims: dict[str, P.Param] | None = None

    @classmethod
    def from_recording(cls, recording: Any, instance: Any, **options: Any) -> SearchSpace:
        return cls(recording, instance, **options)

    @abc.abstractmethod
    def dimensions(self) -> dict[str, P.Param]:
        """Name -> parameter."""

    @abc.abstractmethod
    def derived(self, params: Mapping[str, Any]) -> ExperimentConfiguration:
        """The configuration of one point (parameter name -> value)."""

    def constraints(self, params: Mapping[str, Any]) -> bool:
        """False for a point that must not run."""
        return True

    # -- helpers built on the three methods ---------------------------------------------------
    def dims(self) -> dict[str, P.Param]:
        if self._dims is None:
            self._dims = dict(self.dimensions())
        return self._dims

    def primitives(self) -> dict[str, P.Param]:
        return P.flatten(self.dims().values())

    def distributions(self) -> dict[str, Any]:
        """The store's distributions of every sampled primitive (fixed ones are left out; `params`)."""
        out = {}
        for name, prim in self.primitives().items():
            dist = prim.distribution()
            if dist is not None:
                out[name] = dist
        return out

    def decode(self, encoded: Mapping[str, Any]) -> dict[str, Any]:
        """Parameter values from encoded primitive values (as stored in a trial)."""
        decoded = {}
        for name, prim in self.primitives().items():
            if prim.distribution() is None:
                decoded[name] = prim.sample(random.Random(0))
            elif name not in encoded:
                raise UsageError(f"space {self.name!r}: the trial has no value for parameter {name!r}")
            else:
                decoded[name] = prim.decode(encoded[name])
        return {name: param.combine(decoded) for name, param in self.dims().items()}

    def encode(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Encoded primitive values of a point whose parameters are all primitive."""
        out = {}
        for name, prim in self.primitives().items():
            if prim.distribution() is not None:
                out[name] = prim.encode(values[name])
        return out

    def feasible(self, params: Mapping[str, Any]) -> ExperimentConfiguration | None:
        """The derived configuration when the point satisfies every constraint, else None."""
        try:
            if not self.constraints(params):
                return None
            config = self.derived(params)
        except (ValueError, TypeError) as exc:
            log.debug("space %s: point %s is infeasible: %s", self.name, params, exc)
            return None
        return config if config.is_valid() else None

    @property
    def finite(self) -> bool:
        return all(p.finite for p in self.primitives().values())

    def size(self) -> int | None:
        """Number of points before constraints; None when a dimension is continuous."""
        if not self.finite:
            return None
        return math.prod(p.cardinality() or 1 for p in self.primitives().values())

    def sample_random(self, rng: random.Random | None = None) -> dict[str, Any]:
        """Encoded values of a random feasible point (up to 1000 tries)."""
        rng = rng or random.Random()
        prims = [p for p in self.primitives().values() if p.distribution() is not None]
        for _ in range(MAX_SAMPLE_RETRIES):
            encoded = {p.name: p.sample(rng) for p in prims}
            if self.feasible(self.decode(encoded)) is not None:
                return encoded
        raise UsageError(
            f"space {self.name!r}: {MAX_SAMPLE_RETRIES} random points in a row violate its constraints; loosen them"
        )

    def sample_exhaustive(self) -> Iterator[dict[str, Any]]:
        """Encoded values of every feasible point whose grounded configuration is new, in order.

        Raises `UsageError` at once (not at the first point) when a dimension is continuous.
        """
        prims = [p for p in self.primitives().values() if p.distribution() is not None]
        infinite = [p.name for p in prims if not p.finite]
        if infinite:
            raise UsageError(
                f"space {self.name!r} cannot be enumerated: {', '.join(infinite)} "
                "are continuous; use a sampler other than exhaustive"
            )
        return self._enumerate(prims)

    def _enumerate(self, prims: list[P.Param]) -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        for encoded in P.product(prims):
            config = self.feasible(self.decode(encoded))
            if config is None:
                continue
            digest = config.hash()
            if digest not in seen:
                seen.add(digest)
                yield encoded

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (what `--print-space` shows, and what resume compares)."""
        return {
            "name": self.name,
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "options": {k: _jsonable(v) for k, v in sorted(self.options.items())},
            "dimensions": {name: {"kind": p.kind, "domain": p.describe()} for name, p in self.dims().items()},
            "size": self.size(),
        }

    def fingerprint(self) -> str:
        """Hash of the description: two runs with the same fingerprint search the same space."""
        return hashlib.sha256(canonical_json(self.describe()).encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


class ConfigSpace(SearchSpace):
    """A space whose parameter names are configuration fields (plus `block_x`.. and `grid_x`..).

    Launch geometry: when the block is tuned and the grid is not, the grid is derived per axis
    to cover at least the recorded number of threads along it (ceil division), so a kernel with
    a bounds check sees the same index range. Constraints: the configuration is valid, a block
    holds at most `max_threads` threads (default 1024) and at least `min_threads`, a grid
    stays inside the hardware limits, unless the kernel is declared grid-stride
    (`grid_stride=True`) never fewer threads run than were recorded, and the block satisfies the
    kernel's launch contract (`contracts`: the shapes its code supports, read from its IR; option
    ``contracts=false`` turns it off).
    """

    name: ClassVar[str] = "config"
    user_constraints: tuple[str, ...] = ()

    def __init__(self, recording: Any = None, instance: Any = None, **options: Any):
        super().__init__(recording, instance, **options)
        self.grid_stride = as_bool(options.get("grid_stride", False), "grid_stride")
        self.max_threads = int(options.get("max_threads", MAX_THREADS_PER_BLOCK))
        self.min_threads = int(options.get("min_threads", 1))
        self.use_contract = as_bool(options.get("contracts", True), "contracts")
        self._contract: contracts.LaunchContract | None = None
        if not 1 <= self.min_threads <= self.max_threads <= MAX_THREADS_PER_BLOCK:
            raise UsageError(
                f"space {self.name!r}: need 1 <= min_threads <= max_threads <= 1024, got "
                f"min_threads={self.min_threads}, max_threads={self.max_threads}"
            )

    # -- the launch contract -----------------------------------------------------------------
    @property
    def contract(self) -> contracts.LaunchContract:
        """The block shapes the kernel's code supports (inferred once, from the recording's IR)."""
        if self._contract is None:
            self._contract = contracts.EMPTY
            if self.use_contract:
                self._contract = contracts.for_recording(self.recording, self.instance)
                for line in self.contract_lines():
                    log.info("space %s: %s", self.name, line)
        return self._contract

    def contract_lines(self) -> list[str]:
        """What the launch contract removes from this space and why, one line each (empty: nothing)."""
        return [f"launch contract: {rule.reason}" for rule in self.contract.rules]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.contract.rules:  # only then, so spaces the contract leaves alone keep their fingerprint
            out["launch_contract"] = self.contract.describe()
        return out

    # -- the recorded launch ----------------------------------------------------------------
    def baseline(self) -> ExperimentConfiguration:
        """The recorded launch with default compilation settings."""
        if self.instance is None:
            return ExperimentConfiguration(grid=dim3(1), block=dim3(1))
        return ExperimentConfiguration(
            grid=self.instance.grid_dim, block=self.instance.block_dim, shared_mem=int(self.instance.shared_mem)
        )

    def recorded_threads(self) -> tuple[int, int, int]:
        base = self.baseline()
        return tuple(g * b for g, b in zip(base.grid.as_tuple(), base.block.as_tuple()))  # type: ignore[return-value]

    def check_names(self) -> None:
        fields = config_fields()
        unknown = sorted(set(self.dims()) - fields - DIM_NAMES)
        if unknown:
            raise UsageError(
                f"space {self.name!r}: parameters {', '.join(unknown)} are not configuration "
                f"fields; known: block_x..z, grid_x..z, {', '.join(sorted(fields))}"
            )

    def derived(self, params: Mapping[str, Any]) -> ExperimentConfiguration:
        base = self.baseline()
        block = list(base.block.as_tuple())
        grid = list(base.grid.as_tuple())
        for i, axis in enumerate(AXES):
            if f"block_{axis}" in params:
                block[i] = int(params[f"block_{axis}"])
        threads = self.recorded_threads()
        for i, axis in enumerate(AXES):
            if f"grid_{axis}" in params:
                grid[i] = int(params[f"grid_{axis}"])
            elif f"block_{axis}" in params:
                grid[i] = max(1, -(-threads[i] // block[i]))
        fields = {k: v for k, v in params.items() if k in config_fields()}
        return base.replace(grid=dim3(*grid), block=dim3(*block), **fields)

    def constraints(self, params: Mapping[str, Any]) -> bool:
        config = self.derived(params)
        if not self.min_threads <= config.block.size <= self.max_threads:
            return False
        if any(g > limit for g, limit in zip(config.grid.as_tuple(), MAX_GRID)):
            return False
        if not self.contract.allows(config.block.as_tuple()):
            return False
        if not self.grid_stride:
            launched = (g * b for g, b in zip(config.grid.as_tuple(), config.block.as_tuple()))
            if any(n < r for n, r in zip(launched, self.recorded_threads())):
                return False
        for constraint in self._parsed_constraints:
            if not constraint.holds(params):
                return False
        return True

    @property
    def _parsed_constraints(self) -> tuple[Constraint, ...]:
        parsed = self.__dict__.get("_constraint_cache")
        if parsed is None or parsed[0] != self.user_constraints:
            parsed = (
                self.user_constraints,
                parse_all(list(self.user_constraints), source=getattr(self, "source", None)),
            )
            self.__dict__["_constraint_cache"] = parsed
        return parsed[1]


def as_bool(value: Any, name: str) -> bool:
    """A space option's boolean (true/false, yes/no, on/off, 1/0); `name` names it in the error."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"space option {name}={value!r} is not a boolean; use true or false")


# -- user spaces: YAML/JSON descriptions --------------------------------------------------------


def _integer(value: Any, where: str) -> int:
    """An integer field of a space file (a float with an integral value too); never inf, NaN or text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where} must be an integer, got {value!r}"[:200])
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    return int(value)


# The keys each form of a parameter's description may use, by the key that names the form.
PARAM_KEYS = {
    "fixed": ("fixed",),
    "choices": ("choices",),
    "ordinal": ("ordinal",),
    "powers_of_two": ("powers_of_two",),
    "pipeline": ("pipeline", "passes"),
    "low": ("low", "high", "step", "real", "log"),
    "type": ("type",),
}
SPACE_KEYS = ("name", "base", "options", "parameters", "constraints")
CONFIG_SPACE_OPTIONS = ("grid_stride", "max_threads", "min_threads", "contracts")


def param_from_spec(name: str, spec: Any, *, source: str) -> P.Param:
    """One parameter from its YAML/JSON description.

    ``bool``; ``{fixed: V}``; ``{choices: [...]}``; ``{ordinal: [...]}``; ``{powers_of_two: [lo, hi]}``;
    ``{low: L, high: H, step: S}`` (integers); ``{low: L, high: H, real: true, log: false}``;
    ``{pipeline: N, passes: [...]}``.
    """
    where = f"parameters.{name}"
    try:
        if spec == "bool" or spec == {"type": "bool"}:
            return P.BoolParam(name)
        if not isinstance(spec, Mapping):
            return P.FixedParam(name, spec)
        kind = next((k for k in PARAM_KEYS if k in spec), None)
        check_keys(spec, PARAM_KEYS[kind] if kind else {k for keys in PARAM_KEYS.values() for k in keys}, source, where)
        if "fixed" in spec:
            return P.FixedParam(name, spec["fixed"])
        if "choices" in spec or "ordinal" in spec:
            key = "choices" if "choices" in spec else "ordinal"
            values = spec[key]
            if not isinstance(values, list):
                raise TypeError(f"{key} is a list of values, got {type(values).__name__}")
            limits.check("param_values", len(values), f"{source}: parameters.{name}.{key}: the number of values")
            return P.CategoricalParam(name, values) if key == "choices" else P.OrdinalParam(name, values)
        if "powers_of_two" in spec:
            low, high = (_integer(v, f"{where}.powers_of_two") for v in spec["powers_of_two"])
            return P.OrdinalParam(name, P.powers_of_two(low, high))
        if "pipeline" in spec:
            draws = _integer(spec["pipeline"], f"{where}.pipeline")
            limits.check("pipeline_draws", draws, f"{source}: parameters.{name}.pipeline")
            return P.PipelineParam(name, draws, tuple(spec.get("passes", ())))
        if "low" in spec and "high" in spec:
            real = spec.get("real", False) or any(isinstance(spec[k], float) for k in ("low", "high"))
            if real:
                low, high = float(spec["low"]), float(spec["high"])
                if not (math.isfinite(low) and math.isfinite(high)):
                    raise ValueError(f"low and high must be finite numbers, got {low} and {high}")
                return P.RealRangeParam(name, low, high, log=bool(spec.get("log", False)))
            low, high = _integer(spec["low"], f"{where}.low"), _integer(spec["high"], f"{where}.high")
            step = _integer(spec.get("step", 1), f"{where}.step")
            param = P.IntRangeParam(name, low, high, step)
            limits.check("param_values", param.cardinality(), f"{source}: parameters.{name}: the number of values")
            return param
    except (ValueError, TypeError, OverflowError) as exc:
        raise FormatError(source, str(exc)[:500], field=where) from None
    raise FormatError(
        source,
        f"cannot tell the parameter's type from {spec!r}; use bool, fixed, choices, "
        "ordinal, powers_of_two, low/high or pipeline",
        field=where,
    )


class DescribedSpace(ConfigSpace):
    """A space from a YAML/JSON description, optionally extending a built-in space (`base`)."""

    name: ClassVar[str] = "described"

    def __init__(
        self,
        recording: Any,
        instance: Any,
        description: Mapping[str, Any],
        source: str,
        *,
        _chain: tuple[str, ...] = (),
        **options: Any,
    ):
        check_keys(description, SPACE_KEYS, source)
        merged = dict(description.get("options") or {})
        merged.update(options)
        super().__init__(recording, instance, **merged)
        self.source = source
        self.description = description
        self.name = str(description.get("name") or Path(source).stem)  # type: ignore[misc]
        self._base: SearchSpace | None = None
        if description.get("base"):
            self._base = _load_base(description["base"], source, recording, instance, merged, _chain)
        else:  # the base checks its own options; without one, only ConfigSpace's apply
            check_keys(merged, CONFIG_SPACE_OPTIONS, source, "options")
        raw = description.get("parameters") or {}
        if not isinstance(raw, Mapping):
            raise FormatError(source, "must map parameter names to descriptions", field="parameters")
        self._own = {name: param_from_spec(name, spec, source=source) for name, spec in raw.items()}
        self.user_constraints = tuple(c.text for c in parse_all(description.get("constraints"), source=source))
        self.check_names()

    def dimensions(self) -> dict[str, P.Param]:
        dims = dict(self._base.dims()) if self._base is not None else {}
        dims.update(self._own)
        return dims

    def constraints(self, params: Mapping[str, Any]) -> bool:
        if self._base is not None and not self._base.constraints(params):
            return False
        return super().constraints(params)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["source"] = self.source
        out["constraints"] = list(self.user_constraints)
        return out


#: Space files a chain of ``base:`` may pass through (a base naming itself would never end).
MAX_BASE_CHAIN = 8


def load_space(
    spec: str, recording: Any, instance: Any, options: Mapping[str, Any] | None = None, *, code: bool = False
) -> SearchSpace:
    """A space from a plugin name, a YAML/JSON file, or (with `code=True`) ``path.py:ClassName``.

    `code` is True only for a space the user names on the command line or in the Python API: a
    space, sweep or results file is data, and data never names code (docs/security.md).
    """
    options = dict(options or {})
    if ".py:" in spec or spec.endswith(".py"):
        if not code:
            raise UsageError(
                f"{spec!r} names Python code; a file or a stored study may name only a built-in space "
                "or a YAML/JSON space file. Give code explicitly: --space path.py:ClassName"
            )
        if ".py:" not in spec:
            raise UsageError(f"{spec!r}: name the space's class too, as path.py:ClassName")
        path, _, cls_name = spec.rpartition(":")
        cls = _load_class(Path(path), cls_name)
        return cls.from_recording(recording, instance, **options)
    path = Path(spec)
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        return _load_file(path, recording, instance, options, ())
    try:
        cls = plugins.lookup("space", spec)
    except Exception as exc:
        raise UsageError(f"{exc}; or give a YAML/JSON file or path.py:ClassName") from exc
    return cls.from_recording(recording, instance, **options)


def _load_file(path: Path, recording: Any, instance: Any, options: dict[str, Any], chain: tuple[str, ...]):
    if not path.is_file():
        raise UsageError(f"space file {path} does not exist")
    text = limits.read_text(path, "space description", limit_name="space_bytes")
    if path.suffix.lower() == ".json":
        data = limits.load_json(text, path)
    else:
        data = limits.load_yaml(text, path)
    if not isinstance(data, Mapping):
        raise FormatError(path, "a space description must be a mapping with 'parameters'")
    return DescribedSpace(recording, instance, data, str(path), _chain=(*chain, str(path)), **options)


def _load_base(
    base: Any, source: str, recording: Any, instance: Any, options: dict[str, Any], chain: tuple[str, ...]
) -> SearchSpace:
    """The space a file's ``base:`` names: a built-in space, or a YAML/JSON file beside it (never code)."""
    if not isinstance(base, str):
        raise FormatError(source, f"names a built-in space or a YAML/JSON file, got {base!r}"[:200], field="base")
    suffix = Path(base).suffix.lower()
    if ".py:" in base or suffix not in ("", ".yaml", ".yml", ".json"):
        raise FormatError(
            source,
            f"{base!r} is not a built-in space or a YAML/JSON space file; a space file never "
            "names code (give a Python space on the command line: --space path.py:ClassName)",
            field="base",
        )
    if not suffix:
        try:
            return load_space(base, recording, instance, options)
        except UsageError as exc:  # the file's mistake: name the file and the field
            raise FormatError(source, str(exc)[:300], field="base") from None
    path = Path(base) if Path(base).is_absolute() else Path(source).parent / base
    if str(path) in chain or len(chain) >= MAX_BASE_CHAIN:
        raise FormatError(
            source,
            f"{base!r} makes a chain of bases that comes back to itself or is longer than {MAX_BASE_CHAIN} files",
            field="base",
        )
    return _load_file(path, recording, instance, options, chain)


def _load_class(path: Path, cls_name: str) -> type[SearchSpace]:
    if not path.is_file():
        raise UsageError(f"space file {path} does not exist")
    module_name = f"mneme_user_space_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"importing space file {path} failed: {exc!r}") from exc
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, SearchSpace)):
        if isinstance(cls, type) and any(
            base.__module__.startswith(("mneme.compat.", "mneme.tuning.")) for base in cls.__mro__
        ):  # the original Mneme API's SearchSpace
            raise UsageError(
                f"{path}:{cls_name} is a SearchSpace of the original Mneme API; run it with the "
                f"original's tuner: mneme tune --space-module {path}:{cls_name} (or --layout original)"
            )
        raise UsageError(f"{path} has no SearchSpace subclass named {cls_name!r}")
    return cls


def parse_options(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` strings to a dict; values are parsed as YAML scalars (ints, bools, lists)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"space option {item!r} must be KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key.strip()] = value
        if out[key.strip()] is None:
            out[key.strip()] = ""
    return out
