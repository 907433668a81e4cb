"""This CPU as an LLVM target: the initialized binding and the target machines the host backend uses."""

from __future__ import annotations

import functools
import hashlib

import llvmlite.binding as llvm

from mneme.core import ir


@functools.lru_cache(maxsize=1)
def binding():
    """llvmlite's binding with the native target and asm printer initialized."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def target_machine(opt: int = 3):
    """The target machine for this CPU (all its features), usable by MCJIT: emits and loads host objects."""
    llvm = binding()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=opt,
        reloc="pic",
        codemodel="jitdefault",
    )


def pipeline_machine(opt: int = 3):
    """The target machine the optimization pipelines run with (cached; JIT code model)."""
    llvm = binding()
    return ir.target_machine(
        llvm.get_process_triple(),
        llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(),
        opt,
        reloc="pic",
        jit=True,
    )


def cpu() -> str:
    """This CPU's name and a digest of its features: what host objects depend on besides LLVM."""
    llvm = binding()
    return (
        llvm.get_host_cpu_name()
        + ":"
        + hashlib.sha256(llvm.get_host_cpu_features().flatten().encode()).hexdigest()[:16]
    )
