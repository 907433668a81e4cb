"""Capture: make a recording database from a kernel, a launch configuration and Python data.

This is how a kernel is tuned without an application (Kernel Tuner's everyday workflow) and
how tests and examples make real recordings on any backend::

    from mneme import capture
    db = capture.capture(ir="saxpy.ll", kernel="saxpy", grid=64, block=256,
                         args=[n, np.float32(2.0), x, y], out="recordings",
                         tolerances={3: RegionPolicy(dtype="f32", threshold=1e-6, relative=True)})

Buffers (NumPy arrays) are placed at fixed addresses inside one virtual address range
(`DEFAULT_VA_ADDR`), copied in, snapshotted (prologue), the kernel runs once on the chosen
backend, and the state after it is snapshotted (epilogue). Scalars are packed by the IR's
parameter types. Capturing the same kernel again into the same folder adds an instance.
`load_spec` / `capture_spec` do the same from a small YAML/JSON description (`mneme capture`).
"""

from __future__ import annotations

import logging
import os
import re
import struct
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mneme.core import fsutil, limits
from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.keys import check_keys
from mneme.core.types import ExperimentConfiguration, dim3

log = logging.getLogger(__name__)

#: Where captured buffers live; the same base on every backend (host included).
DEFAULT_VA_ADDR = 0x153940000000
#: Buffers start on this boundary (the CUDA VMM granularity), so every backend can map them.
ALIGNMENT = 2 << 20

_NP_TO_POLICY = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
                 "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32",
                 "uint64": "u64"}  # fmt: skip


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def policy_dtype(dtype: Any) -> str:
    """The snapshot policy dtype ("f32", "i64", ...) of a NumPy dtype."""
    name = np.dtype(dtype).name
    if name not in _NP_TO_POLICY:
        raise UsageError(f"no verification dtype for NumPy dtype {name}; use one of {', '.join(_NP_TO_POLICY)}")
    return _NP_TO_POLICY[name]


def pack_scalar(value: Any, param, index: int, kernel: str) -> bytes:
    """The bytes of one scalar argument, by the IR parameter's kind and size."""
    where = f"argument {index} ({param.name}: {param.type}) of kernel {kernel!r}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, np.generic) and value.dtype.kind == "V":
        data = value.tobytes()
    elif param.kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise UsageError(f"{where} is a float; got {value!r}")
        fmt = {2: "<e", 4: "<f", 8: "<d"}.get(param.size)
        if fmt is None:
            raise UsageError(f"{where}: cannot pack a {param.size}-byte float; pass its bytes")
        data = struct.pack(fmt, float(value))
    elif param.kind in ("int", "pointer"):
        if isinstance(value, np.generic) and value.dtype.itemsize == param.size and value.dtype.kind in "iub":
            data = value.tobytes()
        elif value is None and param.kind == "pointer":
            data = bytes(param.size)
        elif isinstance(value, (bool, int, np.integer, np.bool_)):
            number = int(value)
            bits = param.size * 8
            if not -(1 << (bits - 1)) <= number < (1 << bits):
                raise UsageError(f"{where}: {number} does not fit in {bits} bits")
            data = (number & ((1 << bits) - 1)).to_bytes(param.size, "little")
        else:
            raise UsageError(f"{where} is an integer; got {type(value).__name__} {value!r}")
    else:
        raise UsageError(f"{where} is a {param.size}-byte aggregate; pass its bytes (bytes or a NumPy void scalar)")
    if len(data) != param.size:
        raise UsageError(f"{where} takes {param.size} bytes; got {len(data)}")
    return data


class _Buffer:
    def __init__(self, index: int, array: np.ndarray, addr: int):
        self.index = index
        self.array = np.ascontiguousarray(array)
        self.addr = addr

    @property
    def size(self) -> int:
        return max(1, self.array.nbytes)

    @property
    def data(self) -> bytes:
        raw = self.array.tobytes()
        return raw if raw else b"\0"


def _policy(value: Any, index: int):
    from mneme.core.snapshot import RegionPolicy

    if value is None or isinstance(value, RegionPolicy):
        return value
    if isinstance(value, Mapping):
        try:
            return RegionPolicy(**value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"tolerance of argument {index}: {exc}") from exc
    raise UsageError(f"tolerance of argument {index} must be a RegionPolicy or a mapping, not {value!r}")


def capture(
    ir: str | os.PathLike | Sequence[str | os.PathLike] | Any,
    kernel: str,
    grid: Any,
    block: Any,
    args: Sequence[Any],
    out: str | os.PathLike,
    *,
    shared_mem: int = 0,
    backend: str | Any | None = None,
    tolerances: Mapping[int, Any] | None = None,
    names: Sequence[str] | None = None,
    va_addr: int = DEFAULT_VA_ADDR,
    device_id: int = 0,
    outputs: dict[int, np.ndarray] | None = None,
    globals: Mapping[str, Any] | None = None,  # noqa: A002 - the field's word for them
) -> Path:
    """Capture one launch of `kernel` into a recording database in `out`; returns the database's path.

    Parameters
    ----------
    ir : IR file(s) (.ll/.bc) or an llvmlite module; copied into `out`
    kernel : the (mangled) kernel name
    grid, block : launch geometry (int, tuple or dim3)
    args : one per kernel parameter: NumPy arrays for pointer parameters (device buffers),
        NumPy scalars or Python numbers for scalars, bytes for by-value aggregates
    tolerances : argument index -> RegionPolicy (or its fields as a mapping) for that buffer
    names : argument names (clang drops them from optimized IR)
    outputs : when a dict is given, it receives argument index -> the buffer after the launch
    globals : initial values of device global variables by name (default: the module's initializers);
        every global the kernel's module defines is snapshotted before and after the launch
    """
    from mneme.core import backend as backend_mod
    from mneme.core import ir as irmod
    from mneme.core.executor import KernelBuilder
    from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid, block = dim3.of(grid), dim3.of(block)
    tolerances = dict(tolerances or {})

    module_files = _store_ir(ir, kernel, out)
    linked = irmod.link(module_files, kernel)
    static_hash = irmod.module_hash(linked)[:16]
    params = irmod.kernel_params(linked, kernel)
    device_globals = module_globals(linked)
    if len(args) != len(params):
        raise UsageError(f"kernel {kernel!r} takes {len(params)} arguments "
                         f"({', '.join(p.type for p in params)}); got {len(args)}")  # fmt: skip
    if names is not None and len(names) != len(params):
        raise UsageError(f"kernel {kernel!r} takes {len(params)} arguments; got {len(names)} names")
    for index in tolerances:
        if not 0 <= index < len(params) or not isinstance(args[index], np.ndarray):
            raise UsageError(f"tolerance given for argument {index} of kernel {kernel!r}, which is not a buffer")

    # Place the buffers and pack the parameter buffer.
    buffers: list[_Buffer] = []
    cursor = va_addr
    arg_bytes = bytearray(max((p.offset + p.size for p in params), default=0))
    for index, (param, value) in enumerate(zip(params, args)):
        if isinstance(value, np.ndarray):
            if param.kind != "pointer":
                raise UsageError(f"argument {index} of kernel {kernel!r} is a {param.type}, not a pointer; "
                                 "pass a scalar, not an array")  # fmt: skip
            buf = _Buffer(index, value, cursor)
            buffers.append(buf)
            cursor = _align(cursor + buf.size, ALIGNMENT)
            data = buf.addr.to_bytes(param.size, "little")
        else:
            data = pack_scalar(value, param, index, kernel)
        arg_bytes[param.offset : param.offset + param.size] = data
    arg_bytes = bytes(arg_bytes)
    va_size = max(cursor - va_addr, ALIGNMENT)
    dynamic_hash = dynamic_hash_of(grid, block, shared_mem, arg_bytes)

    chosen = _backend(backend, backend_mod)
    arch = chosen.arch(device_id)
    db_path = out / f"{static_hash}.json"
    if db_path.exists():
        rec = RecordedExecution.from_json(db_path)
        if rec.backend != chosen.name:
            raise UsageError(f"{db_path} was captured on backend {rec.backend!r}; capture into another folder "
                             f"to use {chosen.name!r}")  # fmt: skip
        if rec.va_addr != va_addr:
            raise UsageError(f"{db_path} uses the address range at 0x{rec.va_addr:x}; capture with the same va_addr")
        rec.va_size = max(rec.va_size, va_size)
    else:
        arg_infos = [ArgInfo(names[i] if names else p.name, p.offset, p.size, p.kind if p.kind in
                             ("pointer", "int", "float", "struct") else "unknown", p.kind in ("int", "float"))
                     for i, p in enumerate(params)]  # fmt: skip
        rec = RecordedExecution.create(out, kernel_name=kernel, static_hash=static_hash, backend=chosen.name,
                                       arch=arch, modules=module_files, args=arg_infos, va_addr=va_addr,
                                       va_size=va_size)  # fmt: skip

    prologue_path = out / f"DeviceState.prologue.{static_hash}.{dynamic_hash}.mneme"
    epilogue_path = out / f"DeviceState.epilogue.{static_hash}.{dynamic_hash}.mneme"
    config = ExperimentConfiguration(grid=grid, block=block, shared_mem=shared_mem)
    with chosen.open_device(device_id) as device:
        device.reserve(va_addr, va_size)
        for buf in buffers:
            device.map(buf.addr, buf.size)
            device.write(buf.addr, buf.data)
        binary = KernelBuilder(rec, arg_bytes, chosen, arch).build(config)
        with device.load(binary) as loaded:
            for name, value in (globals or {}).items():
                if name not in device_globals:
                    raise UsageError(f"kernel {kernel!r} has no device global {name!r}; its globals: "
                                     f"{', '.join(device_globals) or 'none'}")  # fmt: skip
                device.write_global(loaded, name, _global_bytes(value, device_globals[name], name))
            before = _read_globals(device, loaded, device_globals)
            with SnapshotWriter(prologue_path, SnapshotType.PROLOGUE, static_hash=static_hash,
                                dynamic_hash=dynamic_hash) as writer:  # fmt: skip
                writer.set_args(arg_bytes)
                for buf in buffers:
                    writer.add_region(buf.addr, buf.data, encoding=_encoding(buf.size),
                                      policy=_policy(tolerances.get(buf.index), buf.index))  # fmt: skip
                for name, data in before.items():
                    writer.add_global(name, data)
            device.launch(loaded, grid, block, shared_mem, arg_bytes)
            after_globals = _read_globals(device, loaded, before)
        with SnapshotWriter(epilogue_path, SnapshotType.EPILOGUE, static_hash=static_hash,
                            dynamic_hash=dynamic_hash) as writer:  # fmt: skip
            writer.set_args(arg_bytes)
            for buf in buffers:
                after = device.read(buf.addr, buf.size)
                writer.add_diff_region(buf.addr, buf.data, after,
                                       policy=_policy(tolerances.get(buf.index), buf.index))  # fmt: skip
                if outputs is not None and buf.array.nbytes:
                    outputs[buf.index] = np.frombuffer(after, dtype=buf.array.dtype).reshape(buf.array.shape).copy()
            for name, data in after_globals.items():
                writer.add_global(name, data)
    rec.globals = {**rec.globals, **{name: len(data) for name, data in before.items()}}
    rec.add_instance(grid=grid, block=block, shared_mem=shared_mem, args=arg_bytes, prologue=prologue_path,
                     epilogue=epilogue_path, dynamic_hash=dynamic_hash)  # fmt: skip
    rec.save()
    log.info("captured kernel %s (%s) launch %s into %s", kernel, static_hash, dynamic_hash, db_path)
    return db_path


def module_globals(module) -> dict[str, int]:
    """Name -> size of the device global variables a module defines (global and constant memory)."""
    from mneme.core import ir as irmod

    td = irmod.target_data(module.data_layout)
    found = {}
    for gv in module.global_variables:
        if gv.is_declaration or gv.name.startswith("llvm."):
            continue
        space = re.search(r"addrspace\((\d+)\)", str(gv.type))
        if space and space.group(1) not in ("1", "4"):  # shared (3) and local (5) memory are per launch
            continue
        found[gv.name] = td.get_abi_size(gv.global_value_type)
    return found


def _read_globals(device, loaded, names: Mapping[str, Any]) -> dict[str, bytes]:
    values = {}
    for name, size in names.items():
        size = size if isinstance(size, int) else len(size)
        try:
            values[name] = device.read_global(loaded, name, size)
        except MnemeError as exc:  # e.g. optimized away: nothing to restore or verify
            log.debug("device global %s is not readable: %s", name, exc)
    return values


def _global_bytes(value: Any, size: int, name: str) -> bytes:
    data = value.tobytes() if isinstance(value, (np.ndarray, np.generic)) else bytes(value)
    if len(data) != size:
        raise UsageError(f"device global {name!r} takes {size} bytes; got {len(data)} (pass a NumPy scalar or array)")
    return data


def _encoding(size: int) -> str:
    """LZ4 (fast to restore) where liblz4 is installed, else zstd; small buffers stay raw."""
    from mneme.core.snapshot import codec

    return codec.writable_encoding("lz4") if size >= 4096 else "raw"


def _backend(backend, backend_mod):
    if backend is None:
        return backend_mod.default_backend()
    if isinstance(backend, str):
        chosen = backend_mod.get_backend(backend)
        availability = chosen.availability()
        if not availability.usable:
            raise UsageError(f"backend {backend!r} is not usable here: {availability.reason}")
        return chosen
    return backend


def _store_ir(ir: Any, kernel: str, out: Path) -> list[Path]:
    """Copy the kernel's IR into the database folder; returns the copies."""
    from mneme.core import ir as irmod

    if isinstance(ir, irmod.ModuleRef):
        text = str(ir)
        target = out / f"{_safe(kernel)}.{irmod.module_hash(ir)[:12]}.ll"
        if not target.exists():
            fsutil.atomic_write(target, text)
        return [target]
    sources = [ir] if isinstance(ir, (str, os.PathLike)) else list(ir)
    stored = []
    for source in sources:
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"IR file {path} does not exist; give the .ll or .bc file of the kernel")
        data = path.read_bytes()
        import hashlib

        target = out / f"{path.stem}.{hashlib.sha256(data).hexdigest()[:12]}{path.suffix or '.ll'}"
        if not target.exists():
            fsutil.atomic_write(target, data)
        stored.append(target)
    return stored


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80] or "kernel"


# -- descriptions (mneme capture SPEC) ------------------------------------------------------------

_GENERATORS = ("random", "zeros", "ones", "full", "arange", "file")
# The keys of a capture description, of one `args` entry, and of each generator's mapping.
SPEC_KEYS = ("ir", "kernel", "grid", "block", "args", "shared_mem", "va_addr", "backend")
ARG_KEYS = ("name", "tolerance", "dtype", "scalar", *_GENERATORS)
TOLERANCE_KEYS = ("dtype", "threshold", "relative", "norm")
GENERATOR_KEYS = {
    "random": ("dtype", "shape", "seed", "low", "high"), "zeros": ("dtype", "shape"), "ones": ("dtype", "shape"),
    "full": ("dtype", "shape", "value"), "arange": ("dtype", "shape", "start", "stop", "step"),
    "file": ("dtype", "path"),
}  # fmt: skip


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Read a capture description (YAML or JSON)."""
    path = Path(path)
    data = limits.load_yaml(limits.read_text(path, "capture description"), path)  # JSON is YAML
    if not isinstance(data, dict):
        raise FormatError(path, "a capture description is a mapping with ir, kernel, grid, block and args")
    check_keys(data, SPEC_KEYS, path)
    return data


def build_args(spec: Mapping[str, Any], source: str | os.PathLike | None = None, base: Path | None = None):
    """(args, tolerances, names) from a description's `args` list."""
    entries = spec.get("args")
    if not isinstance(entries, list):
        raise FormatError(source, "must be a list with one entry per kernel argument", field="args")
    args, tolerances, names = [], {}, []
    for index, entry in enumerate(entries):
        field = f"args[{index}]"
        name = f"arg{index}"
        if isinstance(entry, Mapping):
            check_keys(entry, ARG_KEYS, source, field)
            entry = dict(entry)
            name = str(entry.pop("name", name))
            tolerance = entry.pop("tolerance", None)
            if tolerance is not None:
                if not isinstance(tolerance, Mapping):
                    raise FormatError(source, "tolerance is a mapping: {dtype, threshold, relative, norm}",
                                      field=f"{field}.tolerance")  # fmt: skip
                check_keys(tolerance, TOLERANCE_KEYS, source, f"{field}.tolerance")
                tolerances[index] = dict(tolerance)
            value = _value(entry, source, field, base)
        elif isinstance(entry, (int, float)) and not isinstance(entry, bool):
            value = entry
        else:
            raise FormatError(source, f"expected a number or a mapping ({', '.join(_GENERATORS)}, scalar), "
                              f"got {entry!r}", field=field)  # fmt: skip
        args.append(value)
        names.append(name)
    return args, tolerances, names


def _value(entry: dict[str, Any], source, field: str, base: Path | None):
    kinds = [k for k in ("scalar", *_GENERATORS) if k in entry]
    if len(kinds) != 1:
        raise FormatError(source, f"give exactly one of scalar, {', '.join(_GENERATORS)}; got {sorted(entry)}",
                          field=field)  # fmt: skip
    kind = kinds[0]
    body = entry[kind]
    try:
        if kind == "scalar":
            dtype = entry.get("dtype")
            if not isinstance(body, (int, float)) or isinstance(body, bool):
                raise FormatError(source, f"a scalar is a number, got {body!r}"[:200], field=f"{field}.scalar")
            return _numeric_dtype(dtype, source, f"{field}.dtype").type(body) if dtype else body
        if not isinstance(body, Mapping):
            raise FormatError(source, f"{kind} takes a mapping such as {{dtype: float32, shape: [1024]}}",
                              field=f"{field}.{kind}")  # fmt: skip
        check_keys(body, GENERATOR_KEYS[kind], source, f"{field}.{kind}")
        body = dict(body)
        dtype = _numeric_dtype(body.pop("dtype", "float32"), source, f"{field}.{kind}.dtype")
        if kind == "file":
            return _read_file_argument(body.pop("path"), dtype, base, source, f"{field}.file.path")
        shape = body.pop("shape", None)
        if shape is not None:
            shape = _shape(shape, dtype, source, f"{field}.{kind}.shape")
        if kind == "arange":
            start, stop, step = body.pop("start", 0), body.pop("stop", None), body.pop("step", 1)
            for name, number in (("start", start), ("stop", stop), ("step", step)):
                if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))
                                           or not np.isfinite(number)):
                    raise FormatError(source, f"must be a finite number, got {number!r}"[:200],
                                      field=f"{field}.arange.{name}")
            if step == 0:
                raise FormatError(source, "must not be 0", field=f"{field}.arange.step")
            if stop is not None:
                count = max(0, int(np.ceil((stop - start) / step)))
                limits.check("buffer_bytes", count * dtype.itemsize, f"{source}: {field}.arange: the buffer's bytes")
            if stop is None:
                stop = start + int(np.prod(shape)) * step
                array = np.arange(start, stop, step, dtype=dtype)[: int(np.prod(shape))]
            else:
                array = np.arange(start, stop, step, dtype=dtype)
            array = array.reshape(shape) if shape is not None else array
        elif shape is None:
            raise FormatError(source, "needs a shape, e.g. shape: [1024]", field=f"{field}.{kind}.shape")
        elif kind == "zeros":
            array = np.zeros(shape, dtype=dtype)
        elif kind == "ones":
            array = np.ones(shape, dtype=dtype)
        elif kind == "full":
            array = np.full(shape, body.pop("value"), dtype=dtype)
        else:  # random
            rng = np.random.default_rng(body.pop("seed", 0))
            low, high = body.pop("low", 0.0 if dtype.kind == "f" else 0), body.pop("high", 1.0 if dtype.kind == "f" else 100)
            if dtype.kind == "f":
                array = rng.uniform(low, high, size=shape).astype(dtype)
            else:
                array = rng.integers(low, high, size=shape, dtype=dtype)
        if body:
            raise FormatError(source, f"unknown key(s) {', '.join(sorted(body))}", field=f"{field}.{kind}")
        return array
    except MnemeError:
        raise
    except (TypeError, ValueError, KeyError, OSError, OverflowError) as exc:
        raise FormatError(source, f"cannot make the {kind} argument: {exc}"[:500], field=field) from None


#: The element types a capture buffer or scalar may have: numbers and booleans, never objects,
#: strings or records (their bytes would be heap pointers or undefined).
_NUMERIC_KINDS = "biuf"


def _numeric_dtype(value: Any, source, field: str) -> np.dtype:
    # one type's name ("float32", "<f4"): NumPy would parse a comma string ("6 64") as a record type
    if not isinstance(value, str) or not re.fullmatch(r"[<>=|]?[A-Za-z]+[0-9]*", value):
        raise FormatError(source, f"a dtype is a name such as float32, got {value!r}"[:200], field=field)
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise FormatError(source, f"unknown dtype {value!r}: {exc}"[:200], field=field) from None
    if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject:
        raise FormatError(source, f"dtype {value!r} is not a number type; use one of {', '.join(_NP_TO_POLICY)}",
                          field=field)
    return dtype


def _shape(shape: Any, dtype: np.dtype, source, field: str) -> tuple[int, ...]:
    """A shape of non-negative integers whose buffer fits the buffer_bytes limit (checked before allocating)."""
    dims = [shape] if isinstance(shape, int) else shape
    if not isinstance(dims, list) or not dims or len(dims) > 32 or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims):
        raise FormatError(source, f"a shape is a list of 1 to 32 non-negative integers, got {shape!r}"[:200], field=field)
    total = dtype.itemsize
    for d in dims:
        total *= d
    limits.check("buffer_bytes", total, f"{source}: {field}: the buffer's bytes")
    return tuple(dims)


def _read_file_argument(value: Any, dtype: np.dtype, base: Path | None, source, field: str) -> np.ndarray:
    """A buffer from a regular file (never a device such as /dev/zero, a FIFO or a socket)."""
    import stat

    if not isinstance(value, str) or "\0" in value:
        raise FormatError(source, f"a file path is a string, got {value!r}"[:200], field=field)
    path = Path(value)
    path = path if path.is_absolute() or base is None else base / path
    try:
        info = path.stat()
    except OSError as exc:
        raise FormatError(source, f"cannot read {path}: {exc.strerror or exc}", field=field) from None
    if not stat.S_ISREG(info.st_mode):
        raise FormatError(source, f"{path} is not a regular file (a device, FIFO or folder)", field=field)
    limits.check("buffer_bytes", info.st_size, f"{source}: {field}: {path}'s size")
    return np.fromfile(path, dtype=dtype)


def capture_spec(spec_path: str | os.PathLike, out: str | os.PathLike, *, backend: str | None = None,
                 device_id: int = 0) -> Path:  # fmt: skip
    """Capture the launch a description file names; returns the database's path."""
    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    base = spec_path.parent
    for key in ("ir", "kernel", "grid", "block", "args"):
        if key not in spec:
            raise FormatError(spec_path, "required field is missing", field=key)
    ir_paths = spec["ir"] if isinstance(spec["ir"], list) else [spec["ir"]]
    if not ir_paths or any(not isinstance(p, str) or not p or "\0" in p for p in ir_paths):
        raise FormatError(spec_path, f"is the path of the kernel's .ll/.bc file (or a list of them), got {spec['ir']!r}"[:200],
                          field="ir")
    ir_paths = [Path(p) if Path(p).is_absolute() else base / p for p in ir_paths]
    if not isinstance(spec["kernel"], str) or not spec["kernel"]:
        raise FormatError(spec_path, f"is the kernel's (mangled) name, got {spec['kernel']!r}"[:200], field="kernel")
    args, tolerances, names = build_args(spec, spec_path, base)
    for key in ("grid", "block"):
        try:
            dim3.of(spec[key])
        except (TypeError, ValueError, OverflowError) as exc:
            raise FormatError(spec_path, f"1-3 positive integers: {exc}"[:200], field=key) from None
    grid, block = dim3.of(spec["grid"]), dim3.of(spec["block"])
    shared_mem = spec.get("shared_mem", 0)
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or not 0 <= shared_mem < 1 << 32:
        raise FormatError(spec_path, f"bytes of dynamic shared memory (an integer >= 0), got {shared_mem!r}"[:200],
                          field="shared_mem")
    try:
        va_addr = int(str(spec.get("va_addr", DEFAULT_VA_ADDR)), 0)
    except ValueError:
        raise FormatError(spec_path, f"an address such as 0x153940000000, got {spec.get('va_addr')!r}"[:200],
                          field="va_addr") from None
    backend = backend or spec.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise FormatError(spec_path, f"a backend name, got {backend!r}"[:200], field="backend")
    return capture(
        ir_paths, spec["kernel"], grid, block, args, out, shared_mem=shared_mem,
        backend=backend, tolerances=tolerances, names=names, va_addr=va_addr, device_id=device_id,
    )  # fmt: skip


__all__ = ["capture", "capture_spec", "load_spec", "build_args", "pack_scalar", "DEFAULT_VA_ADDR"]


class _CallableModule(types.ModuleType):
    """This module, callable: ``mneme.capture(...)`` is ``mneme.capture.capture(...)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Path:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
