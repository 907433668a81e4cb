"""The original Mneme API's `mneme.llvm.module`: parse modules (through Mneme's IR loader, which initializes LLVM)."""

from __future__ import annotations

from llvmlite.binding import ModuleRef


def parse_assembly(llvmir: str | bytes, context=None) -> ModuleRef:
    from mneme.compat.errors import runtime_errors
    from mneme.core import ir

    with runtime_errors():
        return ir.load(llvmir.encode() if isinstance(llvmir, str) else bytes(llvmir))


def parse_bitcode(bitcode: bytes, context=None) -> ModuleRef:
    from mneme.compat.errors import runtime_errors
    from mneme.core import ir

    with runtime_errors():
        return ir.load(bytes(bitcode))


__all__ = ["ModuleRef", "parse_assembly", "parse_bitcode"]
