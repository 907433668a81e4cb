"""What kernel code may link against on the host backend: Mneme's runtime and the math library.

Kernel IR from a recording is data (docs/security.md). On the host it becomes native code in
this process, so it is linked only against an allowlist: the runtime's ``__mneme_*`` entry
points (read from runtime.c), CUDA's device-side assert, the C math functions libdevice and
LLVM's math intrinsics lower to, and memcpy/memmove/memset. Any other external function or
global (``system``, ``dlsym``, ``environ``), inline or module assembly, and calls through
pointers are refused by name before compiling.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from mneme.core.errors import UnsupportedError
from mneme.plugins.backends.host import runtime

_MATH = """acos asin atan atan2 acosh asinh atanh cbrt ceil copysign cos cosh erf erfc exp exp2 exp10 expm1 fabs
fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma log log10 log1p log2 logb lrint llrint lround llround
modf nearbyint nextafter pow remainder remquo rint round roundeven scalbn scalbln sin sincos sinh sqrt tan tanh
tgamma trunc j0 j1 y0 y1 erfinv""".split()
#: C library functions kernel code may call besides the runtime's.
LIBRARY = frozenset([*_MATH, *(f"{m}f" for m in _MATH), "memcpy", "memmove", "memset", "__assertfail"])
#: CUDA's built-in variables: empty structs whose members read special registers, so kernel code names
#: them (cooperative groups pass `blockDim` by reference to inlined helpers) but never reads their
#: storage; the optimizer drops the references, and none of these names resolves in this process.
BUILTIN_VARIABLES = frozenset(["threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"])


@functools.lru_cache(maxsize=1)
def runtime_entry_points() -> frozenset[str]:
    """The runtime's functions meant for kernel code: every exported ``__mneme_*`` in runtime.c."""
    text = runtime.source_text()
    return frozenset(re.findall(r"^API\s+[\w\s*]+?\b(__mneme_\w+)\s*\(", text, re.MULTILINE))


def _ref(name: str) -> str:
    return "@" + name if re.fullmatch(r"[A-Za-z_.$][\w.$]*", name) else '@"' + name + '"'


def allowed(name: str) -> bool:
    return name in LIBRARY or name in runtime_entry_points()


def check(module: Any, kernel_name: str) -> None:
    """Refuse a host module that reaches anything outside the allowlist; the error names each symbol."""
    import llvmlite.binding as llvm

    refused: list[str] = []
    for fn in module.functions:
        if fn.is_declaration and not fn.name.startswith("llvm.") and not allowed(fn.name):
            refused.append(f"external function {fn.name}")
    text = str(module)
    for gv in module.global_variables:
        # a declaration left behind by the retarget step (extern __shared__ arrays) is harmless unused
        if gv.is_declaration and gv.name not in BUILTIN_VARIABLES and len(re.findall(re.escape(_ref(gv.name)) + r"(?![\w.$])", text)) > 1:
            refused.append(f"external global {gv.name}")
    if re.search(r"^module asm ", text, re.MULTILINE):
        refused.append("module-level assembly")
    for fn in module.functions:
        if fn.is_declaration:
            continue
        for block in fn.blocks:
            for inst in block.instructions:
                if inst.opcode not in ("call", "invoke", "callbr"):
                    continue
                callee = list(inst.operands)[-1]
                if callee.value_kind == llvm.ValueKind.inline_asm:
                    refused.append(f"inline assembly in {fn.name}")
                elif callee.value_kind != llvm.ValueKind.function:
                    refused.append(f"a call through a pointer in {fn.name}")
    if refused:
        unique = sorted(dict.fromkeys(refused))
        raise UnsupportedError(
            f"kernel {kernel_name!r} reaches {', '.join(unique)}, outside what kernel code may use on the host backend "
            "(Mneme's runtime and the math library; docs/security.md); refused before compiling"
        )
