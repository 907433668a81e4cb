"""The NVPTX target: which architectures it takes (sm_XX) and the llvmlite target machine for them."""

from __future__ import annotations

import re

import llvmlite.binding as llvm

from mneme.core import ir, llvm_cpus
from mneme.core.errors import UsageError
from mneme.core.pipeline import check_codegen_opt

TRIPLE = "nvptx64-nvidia-cuda"
_ARCH = re.compile(r"sm_\d+[af]?")


def claims(arch: str) -> bool:
    return bool(_ARCH.fullmatch(arch or ""))


_CODE = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


def runs_on(target: str, device_arch: str) -> bool:
    """Whether code built for `target` runs on a device of `device_arch` (CUDA's loader rules).

    SASS `sm_XY` runs on `sm_XZ` with Z >= Y; PTX `compute_XY` is JIT-compiled for any newer
    device; arch-specific targets (`sm_90a`) and other vendors' targets need an exact match.
    """
    if target == device_arch:
        return True
    t, d = _CODE.match(target), _CODE.match(device_arch)
    if t and d and not t.group(4) and d.group(1) == "sm":
        major, minor = int(t.group(2)), int(t.group(3))
        dev_major, dev_minor = int(d.group(2)), int(d.group(3))
        if t.group(1) == "sm":
            return major == dev_major and minor <= dev_minor
        return (major, minor) <= (dev_major, dev_minor)
    return target.split(":")[0] == device_arch.split(":")[0] and not t


def check_arch(arch: str | None) -> str:
    if not arch or not claims(arch):
        raise UsageError(f"NVPTX needs an architecture like sm_90, not {arch!r}")
    if not llvm_cpus.recognized(TRIPLE, arch):
        raise UsageError(
            f"unknown architecture {arch!r}: this LLVM's NVPTX target does not know it; give one it does, like sm_90"
        )
    return arch


def target_machine(arch: str | None, opt: int = 3, sched_registers: bool = False) -> llvm.TargetMachine:
    """A cached llvmlite NVPTX target machine (cpu=sm_XX).

    `sched_registers`: NVPTX's instruction selection schedules for register pressure (-nvptx-sched4reg), not
    in source order. ptxas keeps much of the PTX's order: in source order llama.cpp's k_get_rows_kq issues 9 of
    its 12 loads before the first use of one, nvcc's code all 12, and so does it scheduled for registers; but a
    kernel that loads many values at once then holds fewer in flight
    (docs/design/investigations/ir-vs-nvcc-2026-12-06.md).
    """
    check_codegen_opt(opt)
    return ir.target_machine(TRIPLE, check_arch(arch), "", opt, flags=("-nvptx-sched4reg",) if sched_registers else ())


# -- IR written for another architecture ---------------------------------------------------------

_PTX_FEATURE = re.compile(r"\+ptx(\d+)")
_SM_FEATURE = re.compile(r"\+sm_\d+\w*")
_VERSION_LINE = re.compile(r"^\.version (\d+)\.(\d+)$", re.MULTILINE)


def required_ptx(module: llvm.ModuleRef, targets: list[tuple[str, list[str]]] | None = None) -> int:
    """The newest PTX ISA (as 85 for 8.5) a function of `module` was compiled for (`+ptxNN`); 0 if none says.

    `targets`: the module's `ir.function_targets`, where the caller has read them already.
    """
    targets = ir.function_targets(module) if targets is None else targets
    return max(
        (int(m.group(1)) for _, features in targets for f in features if (m := _PTX_FEATURE.fullmatch(f))), default=0
    )


def retarget(module: llvm.ModuleRef, arch: str, targets: list[tuple[str, list[str]]] | None = None) -> llvm.ModuleRef:
    """`module` with every function's `target-cpu` and `target-features` naming `arch`.

    Clang writes the architecture it compiled for into each function (`"target-cpu"="sm_90"
    "target-features"="+ptx85,+sm_90"`), and LLVM selects each function's instructions for that,
    not for the target machine's: IR built for sm_90 and compiled for sm_80 would carry sm_90
    instructions under an sm_80 header. The module itself is returned when nothing names
    another architecture; otherwise a new one (the PTX ISA version kept).
    """
    targets = ir.function_targets(module) if targets is None else targets
    if all(
        cpu in ("", arch) and all(f == "+" + arch for f in features if _SM_FEATURE.fullmatch(f))
        for cpu, features in targets
    ):
        return module
    return ir.retarget_functions(
        module,
        arch,
        lambda features: [f for f in features if not _SM_FEATURE.fullmatch(f)] + ["+" + arch],
        f"module {module.name!r} retargeted to {arch}",
    )


def raise_ptx_version(ptx: str, version: int) -> str:
    """The PTX with its `.version` at least `version` (85 for 8.5): the ISA its functions were compiled for.

    LLVM's header names the target machine's default ISA for the architecture (7.8 for sm_90), while
    each function's instructions follow the function's own `+ptxNN` feature.
    """
    m = _VERSION_LINE.search(ptx)
    if not version or not m or int(m.group(1)) * 10 + int(m.group(2)) >= version:
        return ptx
    return ptx[: m.start()] + f".version {version // 10}.{version % 10}" + ptx[m.end() :]
