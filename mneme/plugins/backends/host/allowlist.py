"""What kernel code may link against on the host backend: Mneme's runtime and the math library.

Kernel IR from a recording is data (docs/security.md). On the host it becomes native code, run
only in a sandbox process (`sandbox`); this allowlist is the first, friendly error before that:
the runtime's ``__mneme_*`` entry points (read from runtime.c), CUDA's device-side assert, the C
math functions libdevice and LLVM's math intrinsics lower to, and memcpy/memmove/memset. Names
are read as LLVM links them: a leading ``\1`` (LLVM's "use this name as is") is dropped, and an
alias counts as the symbols it names. Any other external function or global (``system``,
``dlsym``, ``environ``), ifuncs, inline or module assembly, calls through pointers, and the
intrinsics that call or jump to an address they are given (``llvm.experimental.patchpoint``,
stack maps, statepoints and the other garbage-collection intrinsics, trampolines, ``eh.return``,
register writes, coroutine resumption, indirect branches) are refused by name before compiling.
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


#: Intrinsics that call, or jump to, an address they are given, or run code the linker never sees
#: (write_register: a new stack pointer is a jump). Reading a register is left to the sandbox: AMDGPU
#: kernels read the exec mask so.
REFUSED_INTRINSICS = re.compile(
    r"llvm\.(experimental\.(patchpoint|stackmap|gc\.|deoptimize|guard)|gcroot|gcread|gcwrite|init\.trampoline|"
    r"adjust\.trampoline|eh\.|write_register|localescape|localrecover|"
    r"icall\.branch\.funnel|call\.preallocated|clear_cache|"
    # lowered after this check: coro.resume/destroy to a call through the pointer in the frame they
    # are given, objc.* to calls of Objective-C runtime functions by name; the type tests of
    # devirtualization load function pointers from a table (and a malformed one asserts in LLVM)
    r"coro\.|objc\.|type\.checked\.load|type\.test|public\.type\.test)"
)


def symbol(name: str) -> str:
    """The name the linker sees: LLVM drops a leading "\\1" (its mark for "do not mangle")."""
    return name[1:] if name.startswith("\x01") else name


def ref(name: str) -> str:
    """`name` as LLVM's text spells a global's reference (quoted, with \\XX escapes, where it must)."""
    if re.fullmatch(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*", name):
        return "@" + name
    return '@"' + "".join(c if " " <= c <= "~" and c not in '"\\' else f"\\{ord(c):02X}" for c in name) + '"'


def allowed(name: str) -> bool:
    name = symbol(name)
    return name in LIBRARY or name in runtime_entry_points()


def check(module: Any, kernel_name: str) -> None:
    """Refuse a host module that reaches anything outside the allowlist; the error names each symbol."""
    import llvmlite.binding as llvm

    refused: list[str] = []
    declared: set[str] = set()
    for fn in module.functions:
        if not fn.is_declaration:
            continue
        declared.add(fn.name)
        if fn.name.startswith("llvm."):
            if REFUSED_INTRINSICS.match(fn.name):
                refused.append(f"intrinsic {fn.name} (it calls or jumps to an address it is given)")
        elif not allowed(fn.name):
            refused.append(f"external function {ref(fn.name)[1:]}")
    text = str(module)
    for gv in module.global_variables:
        # a declaration left behind by the retarget step (extern __shared__ arrays) is harmless unused
        if gv.is_declaration:
            declared.add(gv.name)
            uses = len(re.findall(re.escape(ref(gv.name)) + r"(?![-\w.$])", text))
            if gv.name not in BUILTIN_VARIABLES and uses > 1:
                refused.append(f"external global {ref(gv.name)[1:]}")
    refused += _aliases(text, declared)
    if re.search(r"^module asm ", text, re.MULTILINE):
        refused.append("module-level assembly")
    for fn in module.functions:
        if fn.is_declaration:
            continue
        for block in fn.blocks:
            for inst in block.instructions:
                if inst.opcode == "indirectbr":  # jumps to whatever address it is given at run time
                    refused.append(f"an indirect branch (indirectbr) in {fn.name}")
                    continue
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


_ALIAS = re.compile(r'^(@[-\w.$]+|@"[^"]*") = (?:[\w()]+ )*?(alias|ifunc) ([^\n]*)$', re.MULTILINE)
_REFERENCE = re.compile(r'@([-\w.$]+|"[^"]*")')


def _unquote(spelled: str) -> str:
    if not spelled.startswith('"'):
        return spelled
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), spelled[1:-1])


def _aliases(text: str, declared: set[str]) -> list[str]:
    """Ifuncs (their resolver runs when the code is loaded), and aliases of anything outside the allowlist."""
    refused = []
    for found in _ALIAS.finditer(text):
        name, kind = found.group(1)[1:], found.group(2)
        if kind == "ifunc":
            refused.append(f"ifunc {name} (its resolver would run when the code is loaded)")
            continue
        for target in map(_unquote, _REFERENCE.findall(found.group(3))):
            if target in declared and not target.startswith("llvm.") and not allowed(target):
                refused.append(f"alias {name} of external {ref(target)[1:]}")
    return refused
