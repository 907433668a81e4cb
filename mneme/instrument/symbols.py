"""What a device bitcode module defines: its kernels, its architecture, its external symbols."""

from __future__ import annotations

import re

import attrs

from mneme.core.errors import IRError

_KERNEL_CC = re.compile(r'^define\b[^@\n]*\b(?:ptx_kernel|amdgpu_kernel)\b[^@\n]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\(', re.M)
_TARGET_CPU = re.compile(r'"target-cpu"="([^"]+)"')
_IDENT = re.compile(r'^!\d+ = !\{!"([^"]*(?:clang|LLVM|version)[^"]*)"\}', re.M)


@attrs.frozen
class ModuleSymbols:
    kernels: tuple[str, ...]
    defined: frozenset[str]  # externally visible definitions (functions and globals)
    undefined: frozenset[str]  # declarations another module must define (intrinsics excluded)
    target_cpu: str
    triple: str
    producer: str = ""  # the `!llvm.ident` string, e.g. "clang version 19.1.7"


def _unquote(name: str) -> str:
    if name.startswith('"'):
        return bytes(name[1:-1], "utf-8").decode("unicode_escape")
    return name


def module_symbols(bitcode: bytes, what: str = "<bitcode>") -> ModuleSymbols:
    """Parse device bitcode (or textual IR) with llvmlite and list what it defines and needs."""
    import llvmlite.binding as llvm

    try:
        if bitcode[:2] == b"BC" or bitcode[:4] == b"\xde\xc0\x17\x0b":
            mod = llvm.parse_bitcode(bitcode)
        else:
            mod = llvm.parse_assembly(bitcode.decode())
    except Exception as exc:  # llvmlite raises RuntimeError with LLVM's message
        raise IRError(f"{what}: LLVM cannot read this IR: {str(exc).strip()}") from exc
    text = str(mod)
    defined, undefined = set(), set()
    for value in list(mod.functions) + list(mod.global_variables):
        if value.name.startswith("llvm."):
            continue
        if value.is_declaration:
            undefined.add(value.name)
        elif str(value.linkage) not in ("Linkage.internal", "Linkage.private"):
            defined.add(value.name)
    cpu = _TARGET_CPU.search(text)
    ident = _IDENT.search(text)
    return ModuleSymbols(
        kernels=tuple(_unquote(m.group(1)) for m in _KERNEL_CC.finditer(text)),
        defined=frozenset(defined),
        undefined=frozenset(undefined),
        target_cpu=cpu.group(1) if cpu else "",
        triple=mod.triple,
        producer=ident.group(1) if ident else "",
    )


def base_name(demangled: str) -> str:
    """`ns::vecadd<float>(float*, int)` -> `ns::vecadd<float>`: the name without the parameter list."""
    depth = 0
    for i in range(len(demangled) - 1, -1, -1):
        c = demangled[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return demangled[:i]
    return demangled


def short_names(demangled: str) -> list[str]:
    """Names a user may type for a kernel: `void ns::axpy<float>(float, ...)` -> `ns::axpy<float>`, `ns::axpy`."""
    name = base_name(demangled)
    depth = 0
    for i in range(len(name) - 1, -1, -1):  # drop a template function's return type
        c = name[i]
        if c in ">)":
            depth += 1
        elif c in "<(":
            depth -= 1
        elif c == " " and depth == 0:
            name = name[i + 1 :]
            break
    names = [name]
    if name.endswith(">") and "<" in name:
        names.append(name[: name.index("<")])
    return names
