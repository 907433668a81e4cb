"""The original Mneme API's `mneme.llvm.typeref`: llvmlite's `TypeRef`."""

from llvmlite.binding import TypeRef

__all__ = ["TypeRef"]
