"""The original Mneme API's `mneme.llvm.typeref`: llvmlite's `TypeRef` with the module's data-layout sizes.

The original's `TypeRef(obj, mod)` knows the module it came from, and sizes a type under
that module's data layout: `system_type_width` (LLVM's size in bits), `store_type_width`
(the bits a store may overwrite) and `alloc_type_width` (the bits between successive objects,
padding included). All three are in bits, as `type_width` is.
"""

from __future__ import annotations

from llvmlite import binding as _llvm
from llvmlite.binding.typeref import TypeKind

_UNSIZED = {TypeKind.void, TypeKind.label, TypeKind.function, TypeKind.metadata, TypeKind.token}


class TypeRef(_llvm.TypeRef):
    """A weak reference to an LLVM type, sized under its module's data layout."""

    _module = None
    _keep = None  # a parsed copy the type belongs to (see mneme.llvm._text.probe)

    @classmethod
    def adopt(cls, ty, module=None, keep=None) -> TypeRef:
        """`ty` (an llvmlite TypeRef) as this class, bound to `module` for its data layout."""
        if ty is None:
            return None
        ty.__class__ = cls
        ty._module = module
        if keep is not None:
            ty._keep = keep
        return ty

    @property
    def module(self):
        return self._module

    def _target_data(self):
        layout = self._module.data_layout if self._module is not None else ""
        return _llvm.create_target_data(layout)

    def _sized(self) -> bool:
        if self.type_kind in _UNSIZED:
            return False
        if self.type_kind == TypeKind.struct:
            return not self.is_opaque_struct and all(TypeRef.adopt(e, self._module)._sized() for e in self.elements)
        if self.type_kind in (TypeKind.array, TypeKind.vector):
            return TypeRef.adopt(next(iter(self.elements)), self._module)._sized()
        return True

    @property
    def elements(self):
        """An iterator over the contained types."""
        return (TypeRef.adopt(t, self._module, self._keep) for t in super().elements)

    @property
    def system_type_width(self) -> int:
        """LLVM's size of the type in bits under the module's data layout; 0 for a type without a size."""
        if not self._sized():
            return 0
        kind = self.type_kind
        if kind == TypeKind.array:
            element = TypeRef.adopt(next(iter(self.elements)), self._module, self._keep)
            return self.element_count * element.alloc_type_width
        if kind in (TypeKind.pointer, TypeKind.struct):
            return 8 * self._target_data().get_abi_size(self)
        return self.type_width

    @property
    def store_type_width(self) -> int:
        """The most bits a store of this type may overwrite (`system_type_width` rounded up to bytes)."""
        return (self.system_type_width + 7) // 8 * 8

    @property
    def alloc_type_width(self) -> int:
        """The bits between successive objects of this type, alignment padding included (what alloca reserves)."""
        return 8 * self._target_data().get_abi_size(self) if self._sized() else 0


__all__ = ["TypeKind", "TypeRef"]
