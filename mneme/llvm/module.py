"""The original Mneme API's `mneme.llvm.module`: llvmlite's `ModuleRef` with the original's members, and parsing.

Parsing does not verify (`ModuleRef.verify()` does), as the original's. A module's functions,
globals and struct types come back as `mneme.llvm.value.ValueRef` / `mneme.llvm.typeref.TypeRef`.
"""

from __future__ import annotations

import re

from llvmlite import binding as _llvm

from mneme.llvm import _text
from mneme.llvm.typeref import TypeRef
from mneme.llvm.value import ValueRef, adopt

_ALIAS = re.compile(r'^(@(?:"(?:[^"\\]|\\.)*"|[-\w.$]+)) = .*?\b(alias|ifunc) ', re.M)


def adopt_module(module) -> ModuleRef:
    """`module` (an llvmlite ModuleRef, e.g. from `mneme.core.ir`) as this module's `ModuleRef`, in place."""
    if module is not None and not isinstance(module, ModuleRef):
        module.__class__ = ModuleRef
    return module


class ModuleRef(_llvm.ModuleRef):
    """A reference to an LLVM module (llvmlite's, with the original Mneme API's members)."""

    def get_function(self, name: str) -> ValueRef:
        """The function named `name`; NameError if there is none."""
        return adopt(super().get_function(name))

    def get_global_variable(self, name: str) -> ValueRef:
        """The global variable named `name`; NameError if there is none."""
        return adopt(super().get_global_variable(name))

    def get_struct_type(self, name: str) -> TypeRef:
        """The struct type named `name`; NameError if there is none."""
        return TypeRef.adopt(super().get_struct_type(name), self)

    @property
    def functions(self):
        return (adopt(v) for v in super().functions)

    @property
    def global_variables(self):
        return (adopt(v) for v in super().global_variables)

    @property
    def struct_types(self):
        return (TypeRef.adopt(t, self) for t in super().struct_types)

    def _global_values(self, kind: str):
        names = [m.group(1) for m in _ALIAS.finditer(str(self)) if m.group(2) == kind]
        if not names:
            return iter([])
        copy, values, _, _ = _text.probe(self, values=[f"ptr {n}" for n in names])
        return iter([adopt(v, "global", {"module": self, "_probe": copy}) for v in values])

    @property
    def aliases(self):
        """An iterator over this module's aliases (read-only values of a parsed copy)."""
        return self._global_values("alias")

    @property
    def ifuncs(self):
        """An iterator over this module's ifuncs (read-only values of a parsed copy)."""
        return self._global_values("ifunc")

    def clone(self) -> ModuleRef:
        return adopt_module(super().clone())

    def to_bitcode(self, fn: str) -> None:
        """Write the module as bitcode to the file `fn`."""
        with open(fn, "wb") as out:
            out.write(self.as_bitcode())


def parse_assembly(llvmir: str | bytes, context=None) -> ModuleRef:
    """A module from LLVM IR text (in `context`, else the global one); RuntimeError on a parse error."""
    from mneme.core import ir

    ir.initialize()
    return adopt_module(_llvm.parse_assembly(llvmir.decode() if isinstance(llvmir, bytes) else llvmir, context))


def parse_bitcode(bitcode: bytes, context=None) -> ModuleRef:
    """A module from LLVM bitcode (bytes, in `context`, else the global one); RuntimeError on a parse error."""
    from mneme.core import ir

    ir.initialize()
    return adopt_module(_llvm.parse_bitcode(bytes(bitcode), context))


__all__ = ["ModuleRef", "adopt_module", "parse_assembly", "parse_bitcode"]
