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
