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
        raise UsageError(f"unknown architecture {arch!r}: this LLVM's NVPTX target does not know it; "
                         f"give one it does, like sm_90")
    return arch


def target_machine(arch: str | None, opt: int = 3) -> llvm.TargetMachine:
    """A cached llvmlite NVPTX target machine (cpu=sm_XX)."""
    check_codegen_opt(opt)
    return ir.target_machine(TRIPLE, check_arch(arch), "", opt)
