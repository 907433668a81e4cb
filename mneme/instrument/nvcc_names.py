"""Kernel names as nvcc wrote them, for the kernels clang names differently (internal linkage).

A `static __global__` kernel, or one whose template arguments name a `static` function, is
mangled by clang with internal-linkage markers (`_ZL10arange_f32...`, `XadL_ZL15dequantize...`)
and by nvcc with its own per-file namespace (`_Z10arange_f32...`,
`XadL_ZN41_INTERNAL_<hash>_10_getrows_cu_<hash>15dequantize...E`). The recorder sees nvcc's
names, so mneme-cc renames such kernels in the captured IR to the name in nvcc's cubin when both
demangle to the same kernel once those markers are removed (docs/instrumentation.md, "Kernel
names").
"""

from __future__ import annotations

import re

from mneme.core.demangle import demangle, demangle_all

_INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}::|\(anonymous namespace\)::")
# a function named in a template argument: clang writes its signature, nvcc its name only; the C++
# runtime prints `&(void f<T>(int))`, llvm-cxxfilt (clang's `Tn` names, mneme.core.demangle) `&void f<T>(int)`
# (its template arguments balanced, to two levels: `g<&h, 32>` ends at its own `>`, never at the kernel's)
_TEMPLATE = r"(?:<(?:[^()<>]|<[^()<>]*>)*>)?"
_FUNCTION_ARG = re.compile(
    rf"&\((?:[\w:*&]+ )*([\w:]+{_TEMPLATE})\([^()]*\)\)"
    rf"|&(?:[\w:*&]+ )*([\w:]+{_TEMPLATE})\([^()]*\)"
)


def key(name: str) -> str:
    """The demangled name without internal-linkage namespaces and template-argument signatures."""
    text = _INTERNAL.sub("", demangle(name))
    while True:  # inside out: a function argument of a function argument's template (`f<&(g<&(h(int))>(char))>`)
        shorter = _FUNCTION_ARG.sub(lambda m: "&" + (m.group(1) or m.group(2)), text)
        if shorter == text:
            return text
        text = shorter


def renames(ir_kernels: list[str] | tuple[str, ...], nvcc_kernels: list[str] | set[str]) -> dict[str, str]:
    """IR kernel name -> nvcc's name, for IR kernels nvcc names differently and one nvcc kernel matches."""
    nvcc = set(nvcc_kernels)
    demangle_all([*ir_kernels, *nvcc])  # one llvm-cxxfilt run for every name the C++ runtime cannot read
    missing = [k for k in nvcc if k not in set(ir_kernels)]
    by_key: dict[str, list[str]] = {}
    for name in missing:
        by_key.setdefault(key(name), []).append(name)
    ir_by_key: dict[str, list[str]] = {}
    for name in ir_kernels:
        if name not in nvcc:
            ir_by_key.setdefault(key(name), []).append(name)
    return {ir[0]: nv[0] for k, ir in ir_by_key.items() if len(ir) == 1 and len(nv := by_key.get(k, [])) == 1}


def rename_kernels(bitcode: bytes, mapping: dict[str, str]) -> bytes:
    """The bitcode with each kernel of `mapping` renamed (and given external linkage, as nvcc's is)."""
    from mneme.core import ir

    module = ir.load(bitcode, name="mneme-cc")
    for old, new in mapping.items():
        fn = module.get_function(old)
        fn.name = new
        if fn.name != new:  # the name is taken: leave this one as it was
            fn.name = old
            continue
        fn.linkage = "external"
    return module.as_bitcode()
