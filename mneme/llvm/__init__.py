"""The original Mneme API's `mneme.llvm`: module, value and type references over llvmlite's binding layer.

llvmlite provides the objects; `mneme.llvm.module`, `.value` and `.typeref` subclass them
with the members the original lists that llvmlite lacks (see `docs/original-api.md`).
"""

from mneme.llvm.module import ModuleRef, parse_assembly, parse_bitcode
from mneme.llvm.typeref import TypeKind, TypeRef
from mneme.llvm.value import Linkage, StorageClass, ValueKind, ValueRef, Visibility

__all__ = [
    "Linkage",
    "ModuleRef",
    "StorageClass",
    "TypeKind",
    "TypeRef",
    "ValueKind",
    "ValueRef",
    "Visibility",
    "parse_assembly",
    "parse_bitcode",
]
