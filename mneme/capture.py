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
`Buffer` (padding, alignment), `Pointer` (into another buffer) and `Struct` (by value) describe
what real programs pass (placed and packed by `mneme.capture_layout`). `load_spec` /
`capture_spec` do the same from a YAML/JSON description (`mneme capture`, docs/capture.md).
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

from mneme import capture_layout as layout
from mneme.capture_layout import Buffer, Field, Pointer, Struct
from mneme.capture_spec import build_args, build_globals, files_outside, load_spec, read_description
from mneme.core import fsutil
from mneme.core.errors import (
    ExperimentError,
    FormatError,
    IRError,
    MalformedIRError,
    MnemeError,
    UnsupportedError,
    UsageError,
)
from mneme.core.launching import LaunchAttributes, cluster_misfit
from mneme.core.types import ExperimentConfiguration, dim3

log = logging.getLogger(__name__)

DEFAULT_VA_ADDR = layout.DEFAULT_VA_ADDR
ALIGNMENT = layout.ALIGNMENT

_NP_TO_POLICY = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}


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


def _policy(value: Any, where: str):
    from mneme.core.snapshot import RegionPolicy

    if value is None or isinstance(value, RegionPolicy):
        return value
    if isinstance(value, Mapping):
        try:
            return RegionPolicy(**value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"tolerance of {where}: {exc}") from exc
    raise UsageError(f"tolerance of {where} must be a RegionPolicy or a mapping, not {value!r}")


def _launch_attributes(cooperative: Any, cluster: Any, grid: dim3) -> LaunchAttributes:
    """The launch's attributes, checked (a description file's fields `cooperative` and `cluster`)."""
    if not isinstance(cooperative, bool):
        raise layout.DescriptionError(
            "cooperative", f"true or false (launch with every block resident at once), got {cooperative!r}"[:200]
        )
    if cluster is not None:
        try:
            cluster = dim3.of(cluster)
        except (TypeError, ValueError, OverflowError) as exc:
            raise layout.DescriptionError(
                "cluster", f"1-3 positive integers (blocks per cluster): {exc}"[:200]
            ) from None
        misfit = cluster_misfit(grid.as_tuple(), cluster.as_tuple())
        if misfit:
            raise layout.DescriptionError("cluster", misfit)
    return LaunchAttributes(cooperative=cooperative, cluster=cluster)


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
    tolerances: Mapping[int | str, Any] | None = None,
    names: Sequence[str] | None = None,
    va_addr: int = DEFAULT_VA_ADDR,
    device_id: int = 0,
    outputs: dict[int, np.ndarray] | None = None,
    globals: Mapping[str, Any] | None = None,  # noqa: A002 - the field's word for them
    buffers: Mapping[str, Any] | None = None,
    cooperative: bool = False,
    cluster: Any = None,
) -> Path:
    """Capture one launch of `kernel` into a recording database in `out`; returns the database's path.

    A buffer the kernel may write (or marked `output`) that the launch leaves unchanged or all zero is
    logged as a warning: its epilogue would verify nothing (e.g. a convolution with an all-zero filter).

    Parameters
    ----------
    ir : IR file(s) (.ll/.bc) or an llvmlite module; copied into `out`
    kernel : the (mangled) kernel name
    grid, block : launch geometry (int, tuple or dim3)
    args : one per kernel parameter: NumPy arrays or `Buffer`s (with padding, alignment) for pointer
        parameters, a `Pointer` into another buffer, NumPy scalars or Python numbers for scalars,
        a `Struct` (or its bytes) for a struct passed by value
    tolerances : argument index or buffer name -> RegionPolicy (or its fields as a mapping) for that buffer
    names : argument names (clang drops them from optimized IR)
    outputs : when a dict is given, it receives argument index -> the buffer after the launch
    globals : initial values of device global variables by name (default: the module's initializers);
        every global the kernel's module defines is snapshotted before and after the launch
    buffers : named buffers that no argument is, for `Pointer`s (and pointers inside structs) to point into
    cooperative : launch cooperatively, every block resident at once (a kernel that waits at a grid-wide
        barrier, `cooperative_groups::this_grid().sync()`, needs it); replays launch so too
    cluster : thread block cluster dimensions in blocks (int, tuple or dim3), each dividing the grid's
    """
    from mneme.core import backend as backend_mod
    from mneme.core import ir as irmod
    from mneme.core.kernel_builder import KernelBuilder
    from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid, block = dim3.of(grid), dim3.of(block)
    tolerances = dict(tolerances or {})
    how = _launch_attributes(cooperative, cluster, grid)

    module_files = _store_ir(ir, kernel, out)
    linked = irmod.link(module_files, kernel)
    static_hash = irmod.module_hash(linked)[:16]
    params = irmod.kernel_params(linked, kernel)
    device_globals = module_globals(linked)
    if len(args) != len(params):
        raise UsageError(
            f"kernel {kernel!r} takes {len(params)} arguments ({', '.join(p.type for p in params)}); got {len(args)}"
        )
    if names is not None and len(names) != len(params):
        raise UsageError(f"kernel {kernel!r} takes {len(params)} arguments; got {len(names)} names")
    arg_names = [names[i] if names else (p.name or f"arg{i}") for i, p in enumerate(params)]
    initial_globals = {}
    for name, value in (globals or {}).items():
        if name not in device_globals:
            raise layout.DescriptionError(
                f"globals.{name}",
                f"kernel {kernel!r} has no device global {name!r}; its globals: {', '.join(device_globals) or 'none'}",
            )
        initial_globals[name] = _global_bytes(value, device_globals[name], name)

    # Place the buffers and pack the parameter buffer.
    placed = layout.place(
        params,
        args,
        arg_names,
        kernel,
        va_addr,
        buffers=buffers,
        pack_scalar=pack_scalar,
        struct_offsets=lambda index: layout.struct_offsets(linked, kernel, index),
    )
    by_index = {r.index: r for r in placed.regions if r.index is not None}
    by_name = {r.name: r for r in placed.regions}
    policies = {}
    for key, value in tolerances.items():
        region = by_index.get(key) if isinstance(key, int) else by_name.get(key)
        if region is None:
            raise UsageError(
                f"tolerance given for argument {key} of kernel {kernel!r}, which is not a buffer"
                if isinstance(key, int)
                else f"tolerance given for {key!r}, which is no buffer"
            )
        policies[region.name] = _policy(value, f"buffer {region.name!r}")
    arg_bytes = placed.arg_bytes
    va_size = placed.va_size
    dynamic_hash = dynamic_hash_of(grid, block, shared_mem, arg_bytes)
    contents = {}
    for region in placed.regions:
        try:
            contents[region.name] = region.buffer.data()
        except ValueError as exc:  # a padding value the buffer's dtype cannot hold
            field = f"args[{region.index}]" if region.index is not None else f"buffers.{region.name}"
            raise layout.DescriptionError(f"{field}.padding", str(exc)) from None

    chosen = _backend(backend, backend_mod)
    arch = chosen.arch(device_id)
    db_path = out / f"{static_hash}.json"
    if db_path.exists():
        rec = RecordedExecution.from_json(db_path)
        if rec.backend != chosen.name:
            raise UsageError(
                f"{db_path} was captured on backend {rec.backend!r}; capture into another folder to use {chosen.name!r}"
            )
        if rec.va_addr != va_addr:
            raise UsageError(f"{db_path} uses the address range at 0x{rec.va_addr:x}; capture with the same va_addr")
        rec.va_size = max(rec.va_size, va_size)
    else:
        arg_infos = [
            ArgInfo(
                arg_names[i],
                p.offset,
                p.size,
                p.kind if p.kind in ("pointer", "int", "float", "struct") else "unknown",
                p.kind in ("int", "float"),
            )
            for i, p in enumerate(params)
        ]
        rec = RecordedExecution.create(
            out,
            kernel_name=kernel,
            static_hash=static_hash,
            backend=chosen.name,
            arch=arch,
            modules=module_files,
            args=arg_infos,
            va_addr=va_addr,
            va_size=va_size,
        )

    prologue_path = out / f"DeviceState.prologue.{static_hash}.{dynamic_hash}.mneme"
    epilogue_path = out / f"DeviceState.epilogue.{static_hash}.{dynamic_hash}.mneme"
    config = ExperimentConfiguration(grid=grid, block=block, shared_mem=shared_mem)
    after: dict[str, bytes] = {}
    with chosen.open_device(device_id) as device:
        device.reserve(va_addr, va_size)
        for region in placed.regions:  # the padding is part of the allocation: mapped, bounds-checked, restored
            device.map(region.addr, region.size)
            device.write(region.addr, contents[region.name])
        device.check_launch_attributes(how, kernel)
        binary = KernelBuilder(rec, arg_bytes, chosen, arch).build(config)
        with device.load(binary) as loaded:
            loaded.launch_attributes = how
            for name, data in initial_globals.items():
                device.write_global(loaded, name, data)
            before = _read_globals(device, loaded, device_globals)
            with SnapshotWriter(
                prologue_path, SnapshotType.PROLOGUE, static_hash=static_hash, dynamic_hash=dynamic_hash
            ) as writer:
                writer.set_args(arg_bytes)
                for region in placed.regions:
                    writer.add_region(
                        region.addr,
                        contents[region.name],
                        encoding=_encoding(region.size),
                        policy=policies.get(region.name),
                    )
                for name, data in before.items():
                    writer.add_global(name, data)
            try:
                device.launch(loaded, grid, block, shared_mem, arg_bytes)
            except ExperimentError as exc:
                raise ExperimentError(f"{exc}{placed.fault_hint(str(exc))}", kind=exc.kind) from None
            after_globals = _read_globals(device, loaded, before)
        with SnapshotWriter(
            epilogue_path, SnapshotType.EPILOGUE, static_hash=static_hash, dynamic_hash=dynamic_hash
        ) as writer:
            writer.set_args(arg_bytes)
            for region in placed.regions:
                after[region.name] = data = device.read(region.addr, region.size)
                writer.add_diff_region(region.addr, contents[region.name], data, policy=policies.get(region.name))
                buf = region.buffer
                if outputs is not None and region.index is not None and buf.array.nbytes:
                    start = buf.padding_bytes[0]
                    outputs[region.index] = (
                        np.frombuffer(data[start : start + buf.array.nbytes], dtype=buf.array.dtype)
                        .reshape(buf.array.shape)
                        .copy()
                    )
            for name, data in after_globals.items():
                writer.add_global(name, data)
    rec.globals = {**rec.globals, **{name: len(data) for name, data in before.items()}}
    rec.add_instance(
        grid=grid,
        block=block,
        shared_mem=shared_mem,
        args=arg_bytes,
        prologue=prologue_path,
        epilogue=epilogue_path,
        dynamic_hash=dynamic_hash,
        cooperative=how.cooperative,
        cluster_dim=how.cluster,
    )
    rec.save()
    log.info("captured kernel %s (%s) launch %s into %s", kernel, static_hash, dynamic_hash, db_path)
    for message in output_warnings(
        placed, contents, after, layout.written_pointers(linked, kernel), globals_changed=before != after_globals
    ):
        log.warning("kernel %s: %s", kernel, message)
    return db_path


def output_warnings(
    placed: layout.Layout,
    before: Mapping[str, bytes],
    after: Mapping[str, bytes],
    written: set[int] | None,
    *,
    globals_changed: bool = False,
) -> list[str]:
    """What looks wrong with the launch's outputs: a buffer it should change that stays all zero or unchanged.

    The buffers checked are those marked as outputs and those a pointer argument the kernel may write
    through (`written`, from the IR) points into; when nothing at all changed, that is said too.
    """
    checked: dict[str, str] = {name: "marked as an output" for name in placed.outputs}
    for index, region in placed.pointers.items():
        if written is not None and index in written:
            checked.setdefault(region.name, f"which argument {index} lets the kernel write")
    messages = []
    for region in placed.regions:
        why = checked.get(region.name)
        if why is None:
            continue
        data = after[region.name]
        if data == before[region.name]:
            zero = " (all zero)" if not any(data) else ""
            messages.append(
                f"buffer {region.name!r}, {why}, is unchanged by the launch{zero}: its epilogue verifies "
                "nothing; check the inputs (an all-zero filter, weight or global?)"
            )
        elif not any(data):
            messages.append(
                f"buffer {region.name!r}, {why}, is all zero after the launch: check the inputs "
                "(an all-zero filter, weight or global?)"
            )
    if (
        not messages
        and not globals_changed
        and placed.regions
        and all(after[r.name] == before[r.name] for r in placed.regions)
    ):
        messages.append(
            "the launch changed no buffer and no global: its epilogue verifies nothing; check the "
            "inputs and the launch geometry"
        )
    return messages


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


def capture_spec(
    spec_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    backend: str | None = None,
    device_id: int = 0,
    allow_files_outside: bool = False,
) -> Path:
    """Capture the launch a description file names (docs/capture.md); returns the database's path.

    Its `file:` inputs are read only from the description's folder unless `allow_files_outside`.
    """
    with files_outside(allow_files_outside):
        return _capture_spec(Path(spec_path), out, backend, device_id)


def _capture_spec(spec_path: Path, out: str | os.PathLike, backend: str | None, device_id: int) -> Path:
    from mneme.core import ir as irmod

    launch = read_description(spec_path)
    kernel = launch["kernel"]
    try:
        linked = irmod.link(launch["ir"], kernel)
        params = irmod.kernel_params(linked, kernel)
    except IRError as exc:  # IR that does not read, or has no such kernel: the description's input (exit 2)
        raise FormatError(spec_path, str(exc), field="ir" if isinstance(exc, MalformedIRError) else "kernel") from None
    if len(launch["args"]) != len(params):
        raise FormatError(
            spec_path,
            f"kernel {kernel!r} takes {len(params)} arguments "
            f"({', '.join(p.type for p in params)}); the description gives {len(launch['args'])}",
            field="args",
        )
    device_globals = build_globals(launch["spec"], module_globals(linked), spec_path, spec_path.parent)
    try:
        return capture(
            launch["ir"],
            kernel,
            launch["grid"],
            launch["block"],
            launch["args"],
            out,
            shared_mem=launch["shared_mem"],
            backend=backend or launch["backend"],
            tolerances=launch["tolerances"],
            names=launch["names"],
            va_addr=launch["va_addr"],
            device_id=device_id,
            buffers=launch["buffers"],
            globals=device_globals,
            cooperative=launch["cooperative"],
            cluster=launch["cluster"],
        )
    except layout.DescriptionError as exc:
        raise FormatError(spec_path, exc.detail, field=exc.field) from None
    except ExperimentError as exc:
        if exc.kind != "invalid":  # a launch that ran and failed is not the description's fault
            raise
        raise FormatError(
            spec_path, f"{exc}; the launch this description asks for cannot run", field="grid/block"
        ) from None
    except (UnsupportedError, IRError) as exc:  # the kernel's IR, refused before it ran
        if isinstance(exc, FormatError):
            raise
        raise FormatError(spec_path, str(exc), field="ir") from None


__all__ = [
    "capture",
    "capture_spec",
    "load_spec",
    "build_args",
    "pack_scalar",
    "Buffer",
    "Pointer",
    "Struct",
    "Field",
    "DEFAULT_VA_ADDR",
]


class _CallableModule(types.ModuleType):
    """This module, callable: ``mneme.capture(...)`` is ``mneme.capture.capture(...)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Path:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
