"""The original Mneme API's `mneme.proteus.jit` (see `mneme.compat`)."""

from mneme.compat.jit import (
    codegen_object,
    get_proteus_codegen_method,
    internalize,
    link_llvm_modules,
    optimize,
    pruneIR,
    remove_auto_init,
    set_launch_bounds,
    specialize_args,
    specialize_dims,
    specialize_dims_assume,
)

__all__ = [
    "codegen_object",
    "get_proteus_codegen_method",
    "internalize",
    "link_llvm_modules",
    "optimize",
    "pruneIR",
    "remove_auto_init",
    "set_launch_bounds",
    "specialize_args",
    "specialize_dims",
    "specialize_dims_assume",
]
