"""The original Mneme API's `mneme.llvm`: llvmlite's binding layer, which provides its module, value and type objects.

`mneme.llvm.module`, `.value` and `.typeref` add the original's few helpers that llvmlite
spells differently (see `docs/original-api.md`).
"""

from llvmlite.binding import ModuleRef, TypeRef, ValueRef

__all__ = ["ModuleRef", "TypeRef", "ValueRef"]
