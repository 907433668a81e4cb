"""LLVM IR helpers on llvmlite: load, verify, link, clone, find a kernel, read its parameters, hash.

Every module handed out here has been verified: LLVM aborts the process on invalid IR in
passes and code generation, so invalid IR must stop here, as an `IRError` naming the input.

The parts: `_module` (target machines, loading, verification, hashing, kernels and parameters,
rewrites through the text), `_linking` (linking a kernel's modules, the link cache, internalizing
and pruning), `_text` (reading and editing module text), `_bitcode` (which LLVM wrote a bitcode
file). Callers use this package's names.
"""

from mneme.core.ir._bitcode import BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC, bitcode_identification, bitcode_producer
from mneme.core.ir._linking import (
    clear_link_cache,
    drop_unused_globals,
    internalize_module,
    link,
    prune_module,
    reachable_functions,
)
from mneme.core.ir._module import (
    LLVM_VERSION,
    IRInput,
    ModuleRef,
    Param,
    byval_type,
    clone,
    combine_hash,
    defined_functions,
    find_kernel,
    function_targets,
    initialize,
    is_bitcode,
    kernel_params,
    kernels,
    load,
    module_hash,
    normalized_text,
    reparse,
    retarget_functions,
    target_data,
    target_machine,
    verify,
)
from mneme.core.ir._text import (
    defined_function_spans,
    ensure_declaration,
    function_attribute,
    function_span,
    max_attribute_group,
    set_function_attributes,
    split_top_level,
    sub_outside_strings,
    unquote,
)

__all__ = [
    "BITCODE_MAGIC",
    "BITCODE_WRAPPER_MAGIC",
    "LLVM_VERSION",
    "IRInput",
    "ModuleRef",
    "Param",
    "bitcode_identification",
    "bitcode_producer",
    "byval_type",
    "clear_link_cache",
    "clone",
    "combine_hash",
    "defined_function_spans",
    "defined_functions",
    "drop_unused_globals",
    "ensure_declaration",
    "find_kernel",
    "function_attribute",
    "function_span",
    "function_targets",
    "initialize",
    "internalize_module",
    "is_bitcode",
    "kernel_params",
    "kernels",
    "link",
    "load",
    "max_attribute_group",
    "module_hash",
    "normalized_text",
    "prune_module",
    "reachable_functions",
    "reparse",
    "retarget_functions",
    "set_function_attributes",
    "split_top_level",
    "sub_outside_strings",
    "target_data",
    "target_machine",
    "unquote",
    "verify",
]
