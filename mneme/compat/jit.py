"""`mneme.proteus.jit` of the original Mneme API: IR transforms in place, optimization, code generation.

Each function works on an llvmlite `ModuleRef` as the original's did on its module: in
place, returning the variant's new hash where the code changes. Mneme's transforms (IR
transform plugins) may build a new module; the adapter then moves the new contents into
the caller's handle, so the caller's `ModuleRef` stays the one that holds the result.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from mneme.compat.errors import runtime_errors
from mneme.compat.types import dim3

#: Pipelines the original accepted as a bare level.
_LEVELS = {"0": "default<O0>", "1": "default<O1>", "2": "default<O2>", "3": "default<O3>", "s": "Os", "z": "Oz"}
#: Device architecture prefix -> backend plugin that generates code for it.


def _backend_of(arch: str, mod):
    """The backend that claims `arch`; the host backend for a host architecture or none given."""
    from mneme.core import backend as backend_mod
    from mneme.core.errors import UsageError

    try:
        return backend_mod.backend_for_arch(arch) if arch else backend_mod.get_backend("host")
    except UsageError:
        return backend_mod.get_backend("host")


def _swap_in(module, new) -> None:
    # Keep the caller's handle: it takes the new module's native object, the old one is disposed.
    if new is module:
        return
    module._ptr, new._ptr = new._ptr, module._ptr
    module._as_parameter_, new._as_parameter_ = module._ptr, new._ptr
    new.close()


def _module(mod):
    """`mod` itself; TypeError unless it is an LLVM module, as the original checks."""
    from llvmlite.binding import ModuleRef

    if not isinstance(mod, ModuleRef):
        raise TypeError(f"expected an LLVM ModuleRef (mneme.llvm.module), got {type(mod).__name__}")
    return mod


def _config(**fields: Any):
    from mneme.core.types import ExperimentConfiguration

    return ExperimentConfiguration(grid=fields.pop("grid", 1), block=fields.pop("block", 1), **fields)


def _apply(name: str, module, variant_hash: str, kernel_name: str, config, **context: Any) -> str:
    from mneme.core import pipeline

    with runtime_errors():
        ctx = pipeline.TransformContext(kernel_name, config, pipeline.module_target(module), **context)
        new, variant = pipeline.transforms()[name]().apply(module, variant_hash, ctx)
    _swap_in(module, new)
    return variant


def link_llvm_modules(paths: Sequence[str], kernel_name: str, prune: bool = True, internalize: bool = True):
    """Link the IR files into one module for `kernel_name`."""
    from mneme.core import ir
    from mneme.llvm.module import adopt_module

    with runtime_errors():
        return adopt_module(ir.link([str(p) for p in paths], kernel_name, prune=prune, internalize=internalize))


def internalize(mod, kernel_name: str) -> None:
    """Make everything but the kernel internal (in place)."""
    _module(mod)
    from mneme.core import ir

    with runtime_errors():
        ir.internalize_module(mod, kernel_name)


def pruneIR(mod, kernel_name: str | None = None) -> None:  # noqa: N802 - the original's name
    """Drop what the kernel (the module's only kernel when not named) cannot reach (in place)."""
    _module(mod)
    from mneme.core import ir

    with runtime_errors():
        names = [kernel_name] if kernel_name else ir.kernels(mod)
        if len(names) != 1:
            raise RuntimeError(f"pruneIR needs the kernel's name: the module has kernels {', '.join(names) or 'none'}")
        ir.prune_module(mod, names[0])


def _arg_bytes(mod, kernel_name: str, args: Any, num_args: int) -> bytes:
    """The packed parameter buffer from the original's pointer array (or packed bytes, or a MemStateRef)."""
    from mneme.core import ir

    if hasattr(args, "packed_args"):
        return args.packed_args
    if isinstance(args, (bytes, bytearray, memoryview)):
        return bytes(args)
    params = ir.kernel_params(mod, kernel_name)
    if num_args != len(params):
        raise RuntimeError(f"kernel {kernel_name!r} has {len(params)} arguments, {num_args} were given")
    buffer = bytearray(max((p.offset + p.size for p in params), default=0))
    for p in params:
        buffer[p.offset : p.offset + p.size] = ctypes.string_at(args[p.index], p.size)
    return bytes(buffer)


def specialize_args(mod, hash: str, kernel_name: str, args: Any, num_args: int, indexes: Sequence[int]) -> str:  # noqa: A002
    """Fold the recorded values of the arguments at `indexes` into the code; returns the new hash."""
    _module(mod)
    if len(indexes) > num_args or any(not 0 <= i < num_args for i in indexes):
        raise RuntimeError(f"argument indexes {list(indexes)} do not fit kernel {kernel_name!r}'s {num_args} arguments")
    with runtime_errors():
        packed = _arg_bytes(mod, kernel_name, args, num_args)
    return _apply(
        "specialize_args",
        mod,
        hash,
        kernel_name,
        _config(specialize=True),
        args=packed,
        specialize_indexes=list(indexes),
    )


def specialize_dims(mod, hash: str, kernel_name: str, grid: dim3, block: dim3) -> str:  # noqa: A002
    """Make the launch's grid and block sizes constants; returns the new hash."""
    _module(mod)
    config = _config(grid=dim3.of(grid).to_core(), block=dim3.of(block).to_core(), specialize_dims=True)
    return _apply("specialize_dims", mod, hash, kernel_name, config)


def specialize_dims_assume(mod, hash: str, kernel_name: str, grid: dim3, block: dim3) -> str:  # noqa: A002
    """State the launch's grid and block sizes as assumptions the optimizer may use; returns the new hash."""
    _module(mod)
    config = _config(grid=dim3.of(grid).to_core(), block=dim3.of(block).to_core(), specialize_dims_assume=True)
    return _apply("specialize_dims_assume", mod, hash, kernel_name, config)


def set_launch_bounds(mod, hash: str, kernel_name: str, max_threads_per_block: int, min_blocks_per_sm: int) -> str:  # noqa: A002
    """Attach launch bounds to the kernel (at most 1024 threads); returns the new hash."""
    _module(mod)
    if not 1 <= max_threads_per_block <= 1024:
        raise RuntimeError(f"max_threads_per_block must be in 1..1024, got {max_threads_per_block}")
    config = _config(
        set_launch_bounds=True, max_threads=max_threads_per_block, min_blocks_per_sm=max(1, min_blocks_per_sm)
    )
    return _apply("set_launch_bounds", mod, hash, kernel_name, config)


def remove_auto_init(mod, hash: str, kernel_name: str) -> str:  # noqa: A002
    """Remove the compiler-inserted auto-initialization stores; returns the new hash."""
    _module(mod)
    return _apply("remove_auto_init", mod, hash, kernel_name, _config(remove_auto_init=True))


def optimize(mod, arch: str, opt_level: str = "default<O3>", codegen_opt_level: int = 3) -> None:
    """Run a pipeline (`default<O3>`, `Os`, `Oz`, a pass list, or a level 0-3/s/z) in place; empty skips."""
    _module(mod)
    from mneme.core import pipeline

    if not 0 <= int(codegen_opt_level) <= 3:
        raise ValueError(f"codegen optimization level must be in 0..3, got {codegen_opt_level}")
    passes = _LEVELS.get(str(opt_level), str(opt_level))
    if not passes:
        return
    with runtime_errors():
        config = _config(passes=passes, codegen_opt=int(codegen_opt_level))
        backend = _backend_of(arch, mod)
        machine = backend.target_machine(arch or backend.arch(), config.codegen_opt)
        if machine.triple.split("-")[0] != (mod.triple or "").split("-")[0]:
            # GPU IR on the host backend: it is retargeted and optimized for the CPU at code generation.
            mod._mneme_deferred_passes = passes
            return
        pipeline.optimize(mod, config, machine)


def codegen_object(mod, arch: str, *args, **kwargs):
    """The device object of the module's kernel for `arch` (a `mneme.device.MemBuffer`).

    Both releases' signatures: the current `codegen_object(mod, arch, codegen_opt_level=3)` and
    the documented `codegen_object(mod, arch, codegen_type="serial", codegen_opt_level=3)`.
    """
    _module(mod)
    from mneme.compat.device import MemBuffer
    from mneme.compat.types import _core_codegen_method
    from mneme.core import ir

    codegen_type, codegen_opt_level = _codegen_arguments(args, kwargs)
    if not 0 <= int(codegen_opt_level) <= 3:
        raise ValueError(f"codegen optimization level must be in 0..3, got {codegen_opt_level}")
    with runtime_errors():
        backend = _backend_of(arch, mod)
        kernels = ir.kernels(mod)
        if len(kernels) != 1:
            raise RuntimeError(f"codegen_object needs a module with one kernel, found {', '.join(kernels) or 'none'}")
        config = _config(
            passes=getattr(mod, "_mneme_deferred_passes", ""),
            codegen_opt=int(codegen_opt_level),
            codegen_method=_core_codegen_method(codegen_type),
        )
        return MemBuffer(backend.compile(ir.clone(mod), kernels[0], config, arch))


def _codegen_arguments(args: tuple, kwargs: dict) -> tuple[str, int]:
    """(codegen_type, codegen_opt_level) from either release's positional or keyword spelling."""
    unknown = set(kwargs) - {"codegen_type", "codegen_opt_level"}
    if unknown or len(args) > 2:
        raise TypeError(
            f"codegen_object() takes (mod, device_arch, [codegen_type,] codegen_opt_level=3); "
            f"got {len(args)} more positional and {', '.join(sorted(unknown)) or 'no'} unknown keywords"
        )
    codegen_type, level = kwargs.get("codegen_type", "serial"), kwargs.get("codegen_opt_level", 3)
    if len(args) == 2:
        codegen_type, level = args
    elif len(args) == 1:
        # the current release's third parameter is the level (an int); the documented version's, the type
        if isinstance(args[0], str):
            codegen_type = args[0]
        else:
            level = args[0]
    return str(codegen_type), int(level)


def get_proteus_codegen_method() -> str:
    """The code generator Proteus uses here (the current release's query): `PROTEUS_CODEGEN`, else "rtc"."""
    from mneme.compat.convert import proteus_codegen_method

    return proteus_codegen_method()
