"""Capture descriptions: the YAML/JSON file `mneme capture SPEC` reads (docs/capture.md).

A description is data from someone else (docs/security.md): every key is checked (an unknown
one is refused with the nearest valid key), every value's type is checked, every size is
bounded before anything is allocated, and every error names the file and the field.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mneme.capture_layout import ALIGNMENT, DEFAULT_VA_ADDR, Buffer, Field, Pointer, Struct
from mneme.core import limits
from mneme.core.errors import FormatError, MnemeError
from mneme.core.keys import check_keys
from mneme.core.printable import printable
from mneme.core.types import dim3

_GENERATORS = ("random", "zeros", "ones", "full", "arange", "literal", "file")
# The keys of a description, of one `args` entry, of a named buffer, of a global and of their parts.
SPEC_KEYS = (
    "ir",
    "kernel",
    "grid",
    "block",
    "args",
    "shared_mem",
    "va_addr",
    "backend",
    "buffers",
    "globals",
    "cooperative",
    "cluster",
)
BUFFER_KEYS = ("tolerance", "padding", "align", "output", *_GENERATORS)
ARG_KEYS = ("name", "dtype", "scalar", "ptr", "offset", "struct", *BUFFER_KEYS)
GLOBAL_KEYS = ("dtype", "scalar", *_GENERATORS)
PADDING_KEYS = ("before", "after", "value")
FIELD_KEYS = ("name", "dtype", "value", "ptr", "offset", "align")
TOLERANCE_KEYS = ("dtype", "threshold", "relative", "norm")
GENERATOR_KEYS = {
    "random": ("dtype", "shape", "seed", "low", "high"),
    "zeros": ("dtype", "shape"),
    "ones": ("dtype", "shape"),
    "full": ("dtype", "shape", "value"),
    "arange": ("dtype", "shape", "start", "stop", "step"),
    "literal": ("dtype", "shape", "values"),
    "file": ("dtype", "path"),
}
_ONLY_WITH_BUFFERS = ("tolerance", "padding", "align")

_NP_NAMES = (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Read a capture description (YAML or JSON)."""
    path = Path(path)
    data = limits.load_yaml(limits.read_text(path, "capture description"), path)  # JSON is YAML
    if not isinstance(data, dict):
        raise FormatError(path, "a capture description is a mapping with ir, kernel, grid, block and args")
    check_keys(data, SPEC_KEYS, path)
    return data


# -- values ---------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any, source, field: str, *, low: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        floor = "" if low is None else f" >= {low}"
        raise FormatError(source, f"must be an integer{floor}, got {value!r}"[:200], field=field)
    return value


def _boolean(value: Any, source, field: str) -> bool:
    if not isinstance(value, bool):
        raise FormatError(source, f"must be true or false, got {value!r}"[:200], field=field)
    return value


def _mapping(value: Any, source, field: str, example: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise FormatError(source, f"must be a mapping such as {example}, got {value!r}"[:200], field=field)
    return value


def _numeric_dtype(value: Any, source, field: str) -> np.dtype:
    # one type's name ("float32", "<f4"): NumPy would parse a comma string ("6 64") as a record type
    if not isinstance(value, str) or not re.fullmatch(r"[<>=|]?[A-Za-z]+[0-9]*", value):
        raise FormatError(source, f"a dtype is a name such as float32, got {value!r}"[:200], field=field)
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise FormatError(source, f"unknown dtype {value!r}: {exc}"[:200], field=field) from None
    if dtype.kind not in "biuf" or dtype.hasobject:
        raise FormatError(
            source, f"dtype {value!r} is not a number type; use one of {', '.join(_NP_NAMES)}", field=field
        )
    return dtype


# Bytes of the buffers a description has made so far: all of them together are bounded too.
_budget: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("capture_budget", default=None)


def _planned(nbytes: int, what: str, *, counted: int | None = None) -> None:
    """Check a buffer's bytes against `buffer_bytes`, and the description's total (`counted` more, by default
    all of them) against `capture_bytes`, before anything is allocated."""
    limits.check("buffer_bytes", nbytes, what)
    budget = _budget.get()
    if budget is not None:
        budget[0] += nbytes if counted is None else counted
        limits.check("capture_bytes", budget[0], f"{what}, with the buffers before it")


#: Whether `file:` inputs may lie outside the description's folder (`--allow-files-outside`).
_outside = contextvars.ContextVar("mneme_capture_files_outside", default=False)


@contextlib.contextmanager
def files_outside(allowed: bool):
    """Let `file:` inputs read inside resolve outside the description's folder when `allowed`."""
    token = _outside.set(bool(allowed))
    try:
        yield
    finally:
        _outside.reset(token)


@contextlib.contextmanager
def _budgeted():
    """One budget for the buffers made inside (the outer one when already inside one)."""
    token = _budget.set([0]) if _budget.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _budget.reset(token)


def _shape(shape: Any, dtype: np.dtype, source, field: str) -> tuple[int, ...]:
    """A shape of non-negative integers whose buffer fits the buffer_bytes limit (checked before allocating)."""
    dims = [shape] if isinstance(shape, int) and not isinstance(shape, bool) else shape
    if (
        not isinstance(dims, list)
        or not dims
        or len(dims) > 32
        or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims)
    ):
        raise FormatError(
            source, f"a shape is a list of 1 to 32 non-negative integers, got {shape!r}"[:200], field=field
        )
    total = dtype.itemsize
    for d in dims:
        total *= d
    _planned(total, f"{source}: {field}: the buffer's bytes")
    return tuple(dims)


def _numbers(values: Any, dtype: np.dtype, source, field: str) -> np.ndarray:
    """A flat list of numbers as an array of `dtype` (each value must fit it)."""
    items = values if isinstance(values, list) else [values]
    if not items or any(not (_is_number(v) or (isinstance(v, bool) and dtype.kind == "b")) for v in items):
        raise FormatError(source, f"must be a number or a non-empty list of numbers, got {values!r}"[:200], field=field)
    try:
        array = np.array(items, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        raise FormatError(source, f"a value does not fit {dtype}: {exc}"[:200], field=field) from None
    if dtype.kind in "iu" and any(isinstance(v, float) and not float(v).is_integer() for v in items):
        raise FormatError(source, f"{dtype} holds whole numbers, got {values!r}"[:200], field=field)
    return array


def _value(
    entry: Mapping[str, Any],
    source,
    field: str,
    base: Path | None,
    *,
    kinds=("scalar", *_GENERATORS),
    default_shape=None,
):
    """The scalar or array one entry's generator makes. `default_shape(dtype)` fills a missing shape."""
    given = [k for k in kinds if k in entry]
    if len(given) != 1:
        raise FormatError(
            source, f"give exactly one of {', '.join(kinds)}; got {', '.join(sorted(entry)) or 'none'}", field=field
        )
    kind = given[0]
    body = entry[kind]
    if kind == "scalar":
        if not _is_number(body):
            raise FormatError(source, f"a scalar is a number, got {body!r}"[:200], field=f"{field}.scalar")
        dtype = entry.get("dtype")
        if dtype is None:
            return body
        return _numbers(body, _numeric_dtype(dtype, source, f"{field}.dtype"), source, f"{field}.scalar")[0]
    if "dtype" in entry:
        raise FormatError(source, f"dtype goes inside {kind}: {{{kind}: {{dtype: ...}}}}", field=f"{field}.dtype")
    body = dict(_mapping(body, source, f"{field}.{kind}", "{dtype: float32, shape: [1024]}"))
    check_keys(body, GENERATOR_KEYS[kind], source, f"{field}.{kind}")
    where = f"{field}.{kind}"
    dtype = _numeric_dtype(body.pop("dtype", "float32"), source, f"{where}.dtype")
    try:
        if kind == "file":
            if "path" not in body:
                raise FormatError(source, "required field is missing", field=f"{where}.path")
            return _read_file_argument(body.pop("path"), dtype, base, source, f"{where}.path")
        shape = body.pop("shape", None)
        if shape is not None:
            shape = _shape(shape, dtype, source, f"{where}.shape")
        elif default_shape is not None and kind != "literal":
            shape = default_shape(dtype)
        if kind == "literal":
            if "values" not in body:
                raise FormatError(source, "required field is missing", field=f"{where}.values")
            array = _numbers(body.pop("values"), dtype, source, f"{where}.values")
            if shape is not None:
                if int(np.prod(shape)) != array.size:
                    raise FormatError(
                        source,
                        f"shape {list(shape)} holds {int(np.prod(shape))} values; values has {array.size}",
                        field=f"{where}.shape",
                    )
                array = array.reshape(shape)
            return array
        if kind == "arange":
            return _arange(body, dtype, shape, source, where)
        if shape is None:
            raise FormatError(source, "needs a shape, e.g. shape: [1024]", field=f"{where}.shape")
        if kind == "zeros":
            return np.zeros(shape, dtype=dtype)
        if kind == "ones":
            return np.ones(shape, dtype=dtype)
        if kind == "full":
            if "value" not in body:
                raise FormatError(source, "required field is missing", field=f"{where}.value")
            return np.full(shape, _numbers(body.pop("value"), dtype, source, f"{where}.value")[0], dtype=dtype)
        return _random(body, dtype, shape, source, where)
    except MnemeError:
        raise
    except (TypeError, ValueError, KeyError, OSError, OverflowError) as exc:
        raise FormatError(source, f"cannot make the {kind} argument: {exc}"[:500], field=field) from None


def _arange(body: dict, dtype: np.dtype, shape, source, where: str) -> np.ndarray:
    start, stop, step = body.pop("start", 0), body.pop("stop", None), body.pop("step", 1)
    for name, number in (("start", start), ("stop", stop), ("step", step)):
        if number is not None and (not _is_number(number) or not np.isfinite(number)):
            raise FormatError(source, f"must be a finite number, got {number!r}"[:200], field=f"{where}.{name}")
    if step == 0:
        raise FormatError(source, "must not be 0", field=f"{where}.step")
    if stop is None:
        if shape is None:
            raise FormatError(source, "needs a shape or a stop", field=f"{where}.shape")
        count = int(np.prod(shape))
        return np.arange(start, start + count * step, step, dtype=dtype)[:count].reshape(shape)
    count = max(0, int(np.ceil((stop - start) / step)))
    _planned(count * dtype.itemsize, f"{source}: {where}: the buffer's bytes")
    array = np.arange(start, stop, step, dtype=dtype)
    return array.reshape(shape) if shape is not None else array


def _random(body: dict, dtype: np.dtype, shape, source, where: str) -> np.ndarray:
    seed = _integer(body.pop("seed", 0), source, f"{where}.seed")
    rng = np.random.default_rng(seed)
    low, high = body.pop("low", 0.0 if dtype.kind == "f" else 0), body.pop("high", 1.0 if dtype.kind == "f" else 100)
    for name, number in (("low", low), ("high", high)):
        if not _is_number(number):
            raise FormatError(source, f"must be a number, got {number!r}"[:200], field=f"{where}.{name}")
    if dtype.kind == "f":
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.integers(low, high, size=shape, dtype=dtype)


def inside_folder(path: Path, value: str, base: Path | None, source, field: str) -> None:
    """Refuse `path` (spelled `value` in the description) outside the description's folder `base`.

    A description is data: it reads files beside it, not any file of the user's (docs/security.md),
    unless `--allow-files-outside` is given.
    """
    if base is None or _outside.get():
        return
    try:
        inside = path.resolve().is_relative_to(Path(base).resolve())
    except (OSError, RuntimeError):  # a symbolic link loop
        inside = False
    if not inside:
        raise FormatError(
            source,
            f"{printable(value)} lies outside the description's folder {base}; a description "
            "reads only files in its folder (give --allow-files-outside to mneme capture, or "
            "allow_files_outside=True, if you trust it)",
            field=field,
        )


def _read_file_argument(value: Any, dtype: np.dtype, base: Path | None, source, field: str) -> np.ndarray:
    """A buffer from a regular file (never a device such as /dev/zero, a FIFO or a socket)."""
    import stat

    if not isinstance(value, str) or "\0" in value:
        raise FormatError(source, f"a file path is a string, got {value!r}"[:200], field=field)
    path = Path(value)
    path = path if path.is_absolute() or base is None else base / path
    inside_folder(path, value, base, source, field)
    try:
        info = path.stat()
    except OSError as exc:
        raise FormatError(source, f"cannot read {printable(path)}: {exc.strerror or exc}", field=field) from None
    if not stat.S_ISREG(info.st_mode):
        raise FormatError(source, f"{path} is not a regular file (a device, FIFO or folder)", field=field)
    _planned(info.st_size, f"{source}: {field}: {path}'s size")
    if info.st_size % dtype.itemsize:
        raise FormatError(
            source,
            f"{path} has {info.st_size} bytes, not a whole number of {dtype} ({dtype.itemsize} bytes each)",
            field=field,
        )
    return np.fromfile(path, dtype=dtype)


# -- arguments, buffers and globals ----------------------------------------------------------------


def _tolerance(value: Any, source, field: str):
    from mneme.core.snapshot import RegionPolicy

    body = _mapping(value, source, field, "{dtype: f32, threshold: 1.0e-5, relative: true}")
    check_keys(body, TOLERANCE_KEYS, source, field)
    if "relative" in body:
        _boolean(body["relative"], source, f"{field}.relative")
    if "threshold" in body and not _is_number(body["threshold"]):
        raise FormatError(source, f"must be a number, got {body['threshold']!r}"[:200], field=f"{field}.threshold")
    try:
        return RegionPolicy(**body)
    except (TypeError, ValueError) as exc:
        raise FormatError(source, str(exc)[:300], field=field) from None


def _buffer(entry: Mapping[str, Any], array: np.ndarray, source, field: str):
    """The array itself, or a `Buffer` when the entry gives padding, an alignment or marks it an output."""
    if not isinstance(array, np.ndarray):
        raise FormatError(source, "a buffer's generator makes an array; use scalar for a number", field=field)
    options: dict[str, Any] = {}
    if "padding" in entry:
        padding = _mapping(entry["padding"], source, f"{field}.padding", "{before: 1, after: 1, value: 0}")
        check_keys(padding, PADDING_KEYS, source, f"{field}.padding")
        options["before"] = _integer(padding.get("before", 0), source, f"{field}.padding.before")
        options["after"] = _integer(padding.get("after", 0), source, f"{field}.padding.after")
        options["fill"] = _numbers(padding.get("value", 0), array.dtype, source, f"{field}.padding.value")[0]
        _planned(
            (options["before"] + array.size + options["after"]) * array.itemsize,
            f"{source}: {field}: the buffer's bytes with its padding",
            counted=(options["before"] + options["after"]) * array.itemsize,
        )
    if "align" in entry:
        align = _integer(entry["align"], source, f"{field}.align", low=1)
        if align & (align - 1) or align > 2 << 20:
            raise FormatError(
                source, f"an alignment is a power of two up to 2 MiB (bytes), got {align}", field=f"{field}.align"
            )
        options["align"] = align
    if "output" in entry:
        options["output"] = _boolean(entry["output"], source, f"{field}.output")
    return Buffer(array, **options) if options else array


def _pointer(entry: Mapping[str, Any], source, field: str) -> Pointer:
    target = entry["ptr"]
    if not (isinstance(target, str) and target) and (isinstance(target, bool) or not isinstance(target, int)):
        raise FormatError(
            source,
            f"names a buffer (an argument's name or index, or a key of buffers), got {target!r}"[:200],
            field=f"{field}.ptr",
        )
    offset = _integer(entry.get("offset", 0), source, f"{field}.offset", low=None)
    output = _boolean(entry.get("output", False), source, f"{field}.output")
    return Pointer(target, offset, output)


def _struct(value: Any, source, field: str) -> Struct:
    if not isinstance(value, list) or not value:
        raise FormatError(
            source,
            "a struct is a list of fields such as {name: n, dtype: int32, value: 8} or {name: data, ptr: x}",
            field=f"{field}.struct",
        )
    fields = []
    for k, item in enumerate(value):
        where = f"{field}.struct[{k}]"
        item = _mapping(item, source, where, "{name: n, dtype: int32, value: 8}")
        check_keys(item, FIELD_KEYS, source, where)
        name = item.get("name", f"field{k}")
        if not isinstance(name, str) or not name:
            raise FormatError(source, f"a field's name is a string, got {name!r}"[:200], field=f"{where}.name")
        align = _integer(item["align"], source, f"{where}.align", low=1) if "align" in item else None
        if "ptr" in item:
            for key in ("dtype", "value"):
                if key in item:
                    raise FormatError(
                        source, "a pointer field takes ptr and offset, not dtype or value", field=f"{where}.{key}"
                    )
            fields.append(Field(name, _pointer(item, source, where), align))
            continue
        if "offset" in item:
            raise FormatError(
                source, "offset goes with ptr (elements into the buffer it points to)", field=f"{where}.offset"
            )
        for key in ("dtype", "value"):
            if key not in item:
                raise FormatError(
                    source,
                    "required field is missing (a field is {dtype, value} or {ptr, offset})",
                    field=f"{where}.{key}",
                )
        dtype = _numeric_dtype(item["dtype"], source, f"{where}.dtype")
        numbers = _numbers(item["value"], dtype, source, f"{where}.value")
        fields.append(Field(name, numbers if isinstance(item["value"], list) else numbers[0], align))
    return Struct(fields)


@_budgeted()
def build_args(spec: Mapping[str, Any], source: str | os.PathLike | None = None, base: Path | None = None):
    """(args, tolerances, names) from a description's `args` list.

    An argument is a number, a scalar, a buffer (a NumPy array, or a `Buffer` when it has padding,
    an alignment or is marked an output), a `Pointer` into a buffer, or a `Struct`.
    """
    entries = spec.get("args")
    if not isinstance(entries, list):
        raise FormatError(source, "must be a list with one entry per kernel argument", field="args")
    args, tolerances, names = [], {}, []
    for index, entry in enumerate(entries):
        field = f"args[{index}]"
        name = f"arg{index}"
        if isinstance(entry, Mapping):
            check_keys(entry, ARG_KEYS, source, field)
            if "name" in entry:
                name = entry["name"]
                if not isinstance(name, str) or not name:
                    raise FormatError(source, f"a name is a string, got {name!r}"[:200], field=f"{field}.name")
            kinds = [k for k in ("scalar", "ptr", "struct", *_GENERATORS) if k in entry]
            if len(kinds) != 1:
                raise FormatError(
                    source,
                    f"give exactly one of scalar, ptr, struct, {', '.join(_GENERATORS)}; "
                    f"got {', '.join(sorted(entry)) or 'none'}",
                    field=field,
                )
            kind = kinds[0]
            is_buffer = kind in _GENERATORS
            for key in _ONLY_WITH_BUFFERS:
                if key in entry and not is_buffer:
                    hint = " (set it on the buffer it points into)" if kind == "ptr" else ""
                    raise FormatError(
                        source, f"{key} applies to a buffer, not to a {kind}{hint}", field=f"{field}.{key}"
                    )
            if "offset" in entry and kind != "ptr":
                raise FormatError(
                    source, "offset goes with ptr (elements into the buffer it points to)", field=f"{field}.offset"
                )
            if "output" in entry and kind not in ("ptr", *_GENERATORS):
                raise FormatError(source, "output marks a buffer or a pointer", field=f"{field}.output")
            if kind == "ptr":
                value = _pointer(entry, source, field)
            elif kind == "struct":
                value = _struct(entry["struct"], source, field)
            else:
                value = _value(entry, source, field, base)
                if is_buffer:
                    value = _buffer(entry, value, source, field)
            if "tolerance" in entry:
                tolerances[index] = _tolerance(entry["tolerance"], source, f"{field}.tolerance")
        elif _is_number(entry):
            value = entry
        else:
            raise FormatError(
                source,
                f"expected a number or a mapping (scalar, ptr, struct, {', '.join(_GENERATORS)}), got {entry!r}"[:300],
                field=field,
            )
        args.append(value)
        names.append(name)
    return args, tolerances, names


@_budgeted()
def build_buffers(spec: Mapping[str, Any], source=None, base: Path | None = None):
    """(buffers, tolerances) from a description's `buffers` mapping: named buffers pointers reach into."""
    entries = spec.get("buffers") or {}
    entries = _mapping(entries, source, "buffers", "{pool: {zeros: {dtype: float32, shape: [4096]}}}")
    buffers, tolerances = {}, {}
    for name, entry in entries.items():
        field = f"buffers.{name}"
        if not isinstance(name, str) or not name:
            raise FormatError(source, f"a buffer's name is a string, got {name!r}"[:200], field="buffers")
        entry = _mapping(entry, source, field, "{zeros: {dtype: float32, shape: [4096]}}")
        check_keys(entry, BUFFER_KEYS, source, field)
        array = _value(entry, source, field, base, kinds=_GENERATORS)
        buffers[name] = _buffer(entry, array, source, field)
        if "tolerance" in entry:
            tolerances[name] = _tolerance(entry["tolerance"], source, f"{field}.tolerance")
    return buffers, tolerances


def build_globals(spec: Mapping[str, Any], sizes: Mapping[str, int], source=None, base: Path | None = None):
    """Name -> initial bytes of the device globals a description sets; `sizes` are the module's globals."""
    from mneme.core.keys import nearest

    entries = _mapping(spec.get("globals") or {}, source, "globals", "{filter: {random: {dtype: float32}}}")
    values = {}
    for name, entry in entries.items():
        field = f"globals.{name}"
        if name not in sizes:
            near = nearest(str(name), sizes)
            hint = f"; did you mean {near!r}?" if near else "."
            raise FormatError(
                source,
                f"the kernel's module has no device global {name!r}{hint} Its globals: "
                f"{', '.join(sorted(sizes)) or 'none'}",
                field=field,
            )
        size = sizes[name]
        entry = _mapping(entry, source, field, "{literal: {dtype: float32, values: [1, 2]}}")
        check_keys(entry, GLOBAL_KEYS, source, field)

        def whole(dtype: np.dtype, size=size, field=field) -> tuple[int]:
            if size % dtype.itemsize:
                raise FormatError(
                    source, f"global {field[8:]!r} is {size} bytes, not a whole number of {dtype}", field=field
                )
            _planned(size, f"{source}: {field}: the global's bytes")
            return (size // dtype.itemsize,)

        value = _value(entry, source, field, base, default_shape=whole)
        if not isinstance(value, (np.ndarray, np.generic)):
            raise FormatError(
                source, "a global's scalar needs a dtype, e.g. {scalar: 2.5, dtype: float32}", field=f"{field}.dtype"
            )
        data = np.ascontiguousarray(value).tobytes()
        if len(data) != size:
            raise FormatError(
                source, f"device global {name!r} is {size} bytes; the value is {len(data)} bytes", field=field
            )
        values[name] = data
    return values


# -- the whole description -------------------------------------------------------------------------


def read_description(spec_path: str | os.PathLike, *, allow_files_outside: bool = False) -> dict[str, Any]:
    """The launch a description file names, checked: ir (paths), kernel, grid, block, shared_mem, va_addr,
    backend, args, tolerances (by argument index and buffer name), names and buffers; `cooperative` and
    `cluster` as written (`capture` checks them against the grid).

    `globals` stay as written: their sizes come from the kernel's module (`build_globals`). `file:`
    inputs resolve inside the description's folder unless `allow_files_outside`.
    """
    with files_outside(allow_files_outside or _outside.get()):
        return _read_description(Path(spec_path))


def _read_description(spec_path: Path) -> dict[str, Any]:
    spec = load_spec(spec_path)
    base = spec_path.parent
    for key in ("ir", "kernel", "grid", "block", "args"):
        if key not in spec:
            raise FormatError(spec_path, "required field is missing", field=key)
    ir_paths = spec["ir"] if isinstance(spec["ir"], list) else [spec["ir"]]
    if not ir_paths or any(not isinstance(p, str) or not p or "\0" in p for p in ir_paths):
        raise FormatError(
            spec_path,
            f"is the path of the kernel's .ll/.bc file (or a list of them), got {spec['ir']!r}"[:200],
            field="ir",
        )
    spelled = ir_paths
    ir_paths = [Path(p) if Path(p).is_absolute() else base / p for p in ir_paths]
    for value, path in zip(spelled, ir_paths):
        inside_folder(path, value, base, spec_path, "ir")  # the IR is copied into the recording
        if not path.is_file():
            raise FormatError(
                spec_path,
                f"IR file {printable(path)} does not exist; give the .ll or .bc file of the kernel",
                field="ir",
            )
    kernel = spec["kernel"]
    if not isinstance(kernel, str) or not kernel:
        raise FormatError(spec_path, f"is the kernel's (mangled) name, got {kernel!r}"[:200], field="kernel")
    for key in ("grid", "block"):
        try:
            dim3.of(spec[key])
        except (TypeError, ValueError, OverflowError) as exc:
            raise FormatError(spec_path, f"1-3 positive integers: {exc}"[:200], field=key) from None
    shared_mem = spec.get("shared_mem", 0)
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or not 0 <= shared_mem < 1 << 32:
        raise FormatError(
            spec_path, f"bytes of dynamic shared memory (an integer >= 0), got {shared_mem!r}"[:200], field="shared_mem"
        )
    va_addr = spec.get("va_addr", DEFAULT_VA_ADDR)
    try:
        va_addr = va_addr if isinstance(va_addr, int) and not isinstance(va_addr, bool) else int(str(va_addr), 0)
    except ValueError:
        raise FormatError(
            spec_path, f"an address such as 0x153940000000, got {va_addr!r}"[:200], field="va_addr"
        ) from None
    if not 0 < va_addr < 1 << 47 or va_addr % ALIGNMENT:
        raise FormatError(
            spec_path,
            f"an address in the user range (below 2^47) on a 2 MiB boundary, got {va_addr:#x}",
            field="va_addr",
        )
    backend = spec.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise FormatError(spec_path, f"a backend name, got {backend!r}"[:200], field="backend")
    with _budgeted():  # the arguments' buffers and the named ones share the capture_bytes limit
        args, tolerances, names = build_args(spec, spec_path, base)
        buffers, buffer_tolerances = build_buffers(spec, spec_path, base)
    return {
        "spec": spec,
        "ir": ir_paths,
        "kernel": kernel,
        "grid": dim3.of(spec["grid"]),
        "block": dim3.of(spec["block"]),
        "shared_mem": shared_mem,
        "va_addr": va_addr,
        "backend": backend,
        "args": args,
        "tolerances": {**tolerances, **buffer_tolerances},
        "names": names,
        "buffers": buffers,
        "cooperative": spec.get("cooperative", False),
        "cluster": spec.get("cluster"),
    }  # checked by capture()
