"""What of a kernel's (pruned) NVPTX or AMDGPU IR the host backend cannot run, by name, without running it.

`HostBackend.check` (and so `mneme ir check --backend host`) and `HostBackend.compile` both ask
here (through `backend.pruned_and_checked`, which removes dead code first: an unused
`cg::this_thread_block()` asm), so a kernel the check accepts is one the compile accepts.
"""

from __future__ import annotations

import re

from mneme.core.errors import UnsupportedError
from mneme.plugins.backends.host import intrinsics, machine, retarget, retarget_amdgpu

_PREFIX = "not supported on the host backend: "
_GPU_INTRINSIC = re.compile(r"llvm\.(nvvm|amdgcn|r600|spv|dx)\.")


def unsupported(module, kernel_name: str, text: str | None = None) -> list[str]:
    """Every construct of `kernel_name`'s module the host backend cannot run (empty: it can run it).

    `text` is the module's text when the caller printed it already (printing a module is not free).
    """
    llvm = machine.binding()
    found: list[str] = []
    text = str(module) if text is None else text
    if "\nmodule asm " in text or text.startswith("module asm "):
        found.append("module-level inline assembly (`module asm`)")
    try:
        retarget.kernel_params(module, kernel_name, llvm.create_target_data(module.data_layout))
    except UnsupportedError as exc:
        found.append(str(exc).removeprefix(_PREFIX))
    wave = retarget_amdgpu.wave_size(text) if retarget_amdgpu.is_amdgpu(module.triple) else 32
    asm: set[str] = set()
    for fn in module.functions:
        if fn.is_declaration:
            continue
        for line in str(fn).split("\n"):
            retarget._rewrite_asm(line, {}, asm)  # collects what it cannot implement into `asm`
    found += sorted(asm)
    for fn in module.functions:
        if not fn.is_declaration or not retarget._is_used(text, fn.name):
            continue
        name = fn.name
        if name.startswith("llvm.nvvm.") or name == "__nvvm_reflect":
            intrinsic = "llvm.nvvm.reflect" if name == "__nvvm_reflect" else name
            fn_type = retarget._ADDRSPACE.sub("", str(fn.global_value_type))
            if intrinsics.implement(intrinsic, fn_type, "__mneme.check") is None:
                found.append(name)
        elif name.startswith("llvm.amdgcn."):
            fn_type = retarget._ADDRSPACE.sub("", str(fn.global_value_type))
            if retarget_amdgpu.implement(name, fn_type, "__mneme.check", wave) is None:
                found.append(name)
        elif _GPU_INTRINSIC.match(name):
            found.append(name)
        elif (
            not name.startswith("llvm.")
            and name != "vprintf"
            and llvm.address_of_symbol(name.removeprefix("\x01")) is None
        ):
            found.append(f"external function {name}")
    return found


_PURE_ASM_CALL = re.compile(
    r'^\s*(%[-\w.$]+) = (?:tail |notail )?call [^"]*?\basm (?!sideeffect)(?:alignstack |inteldialect )*"(?:[^"\\]|\\.)*", "([^"]*)"'
)


def drop_unused_asm(text: str) -> str:
    """IR text without the calls of non-volatile inline asm (no side effect, no memory clobber) whose result is unused.

    LLVM keeps them (clang does not mark them `willreturn`), but such an asm only computes its result.
    """
    lines = text.split("\n")
    keep = [True] * len(lines)
    start = None
    for i, line in enumerate(lines):
        if line.startswith("define "):
            start = i
        elif line == "}" and start is not None:
            body = "\n".join(lines[start : i + 1])
            for j in range(start + 1, i):
                m = _PURE_ASM_CALL.match(lines[j])
                if m and "~{memory}" not in m.group(2):
                    uses = re.findall(re.escape(m.group(1)) + r"(?![-\w.$])", body)
                    if len(uses) == 1:  # only its own definition
                        keep[j] = False
            start = None
    return "\n".join(line for line, k in zip(lines, keep) if k)
