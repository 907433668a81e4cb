"""The original Mneme API's `mneme.llvm.value`: llvmlite's `ValueRef` with the original's extra members.

What llvmlite answers natively stays llvmlite's. The members it lacks (`alignment`,
`initializer`, `memory_type`, `indices`, `as_instruction`, operands of constants, ...) read
the value's IR text; where they return LLVM objects (an initializer, the operands of a
constant, an instruction made from a constant expression) those come from a parsed copy
of the module and are read-only (see `mneme.llvm._text` and docs/original-api.md).
"""

from __future__ import annotations

import re

from llvmlite import binding as _llvm
from llvmlite.binding.value import Linkage, StorageClass, ValueKind, Visibility

from mneme.llvm import _text
from mneme.llvm.typeref import TypeRef

MEMORY_OPCODES = ("alloca", "store", "load", "getelementptr")
_ALIGNED_OPCODES = ("alloca", "load", "store", "atomicrmw", "cmpxchg")
_AGGREGATES = (
    ValueKind.constant_array,
    ValueKind.constant_vector,
    ValueKind.constant_struct,
    ValueKind.constant_data_array,
    ValueKind.constant_data_vector,
)
_LEAF_CONSTANTS = (
    ValueKind.constant_aggregate_zero,
    ValueKind.undef_value,
    ValueKind.poison_value,
    ValueKind.constant_int,
    ValueKind.constant_fp,
    ValueKind.constant_pointer_null,
)
_BINARY = {"add", "sub", "mul", "shl", "xor", "and", "or", "lshr", "ashr"}


def adopt(value, kind: str | None = None, parents: dict | None = None):
    """`value` (an llvmlite ValueRef) as this module's `ValueRef`."""
    if value is None:
        return None
    value.__class__ = ValueRef
    if kind is not None:
        value._kind = kind
    if parents is not None:
        value._parents = parents
    return value


class ValueRef(_llvm.ValueRef):
    """A weak reference to an LLVM value (llvmlite's, with the original Mneme API's members)."""

    # -- what llvmlite has, returning this class -----------------------------------------------
    @property
    def type(self) -> TypeRef:
        """This value's LLVM type."""
        return TypeRef.adopt(super().type, self.module, self._parents.get("_probe"))

    @property
    def blocks(self):
        return (adopt(v) for v in super().blocks)

    @property
    def arguments(self):
        return (adopt(v) for v in super().arguments)

    @property
    def instructions(self):
        return (adopt(v) for v in super().instructions)

    @property
    def incoming_blocks(self):
        return (adopt(v) for v in super().incoming_blocks)

    @property
    def module(self):
        """The module this value was obtained from."""
        return self._parents.get("module")

    # -- read-only values from a parsed copy -------------------------------------------------
    def _check_writable(self, what: str) -> None:
        if "_probe" in self._parents:
            raise ValueError(
                f"cannot set {what} of {str(self).strip()[:80]!r}: it was read from a parsed copy of "
                "the module (aliases, ifuncs, initializers and constant operands are read-only here)"
            )

    @_llvm.ValueRef.name.setter
    def name(self, val):
        self._check_writable("the name")
        _llvm.ValueRef.name.fset(self, val)

    @_llvm.ValueRef.linkage.setter
    def linkage(self, value):
        self._check_writable("the linkage")
        _llvm.ValueRef.linkage.fset(self, value)

    @_llvm.ValueRef.visibility.setter
    def visibility(self, value):
        self._check_writable("the visibility")
        _llvm.ValueRef.visibility.fset(self, value)

    @_llvm.ValueRef.storage_class.setter
    def storage_class(self, value):
        self._check_writable("the storage class")
        _llvm.ValueRef.storage_class.fset(self, value)

    def _probe_parents(self, copy, **extra) -> dict:
        parents = dict(self._parents, _probe=copy)
        parents.update(extra)
        return parents

    # -- the original's members --------------------------------------------------------------
    @property
    def alignment(self) -> int:
        """The explicit alignment of a global, function, alloca, load, store or atomic; 0 when it has none."""
        if self.is_function or self.value_kind in (ValueKind.global_variable, ValueKind.global_alias):
            if self.is_function:  # after the parameter list: `ptr align 8 %x` is a parameter's
                header = _function_header(self)
                text = header[_params_end(header) :]
            else:
                text = str(self).strip().splitlines()[0]
            match = re.search(r"(?:^|[\s,])align (\d+)", text)
            return int(match.group(1)) if match else 0
        if self.is_instruction and self.opcode in _ALIGNED_OPCODES:
            _, body = _text.instruction_body(self)
            aligns = [p for p in _text.split_top(body) if p.startswith("align ")]
            return int(aligns[-1].split()[1]) if aligns else 0
        raise ValueError(f"expected a global, function or memory instruction, got {self._kind} {self.value_kind.name}")

    @property
    def is_memory_instruction(self) -> bool:
        return self.is_instruction and self.opcode in MEMORY_OPCODES

    @property
    def memory_type(self) -> TypeRef:
        """The type a memory instruction accesses (alloca: allocated; load/store: loaded/stored; GEP: source element)."""
        if not self.is_memory_instruction:
            raise ValueError(f"not a memory instruction: {str(self).strip()!r}")
        if self.opcode == "load":
            return self.type
        if self.opcode == "store":
            return adopt(next(iter(super().operands)), parents=self._parents).type
        opcode, body = _text.instruction_body(self)
        words = body.split()
        skip = {"inalloca", "swifterror"} if opcode == "alloca" else {"inbounds", "nuw", "nusw"}
        start = 0
        while words and words[0] in skip or (words and words[0].startswith("inrange(")):
            start = body.index(words[0], start) + len(words[0])
            words = body[start:].split()
        type_text = body[start : _text.scan_type(body, start)].strip()
        copy, _, (ty,), _ = _text.probe(self.module, types=[type_text])
        return TypeRef.adopt(ty, self.module, copy)

    @property
    def has_initializer(self) -> bool:
        """True if a global variable has an initializer."""
        if self.value_kind != ValueKind.global_variable:
            raise ValueError(f"expected global value, got {self._kind}")
        return _text.global_initializer_text(self) is not None

    @property
    def initializer(self):
        """The initializer of a global variable (a constant of a parsed copy); None when it has none."""
        if self.value_kind != ValueKind.global_variable:
            raise ValueError(f"expected global value, got {self._kind}")
        text = _text.global_initializer_text(self)
        if text is None:
            return None
        copy, (value,), _, _ = _text.probe(self.module, values=[text])
        return adopt(value, "initializer", self._probe_parents(copy))

    @property
    def operands(self):
        """An iterator over the operands of an instruction, constant aggregate, constant expression or global."""
        kind = self.value_kind
        if kind == ValueKind.instruction:
            return (adopt(v) for v in super().operands)
        if kind == ValueKind.global_variable:
            init = self.initializer
            return iter([init] if init is not None else [])
        if kind in _LEAF_CONSTANTS:
            return iter([])
        if kind == ValueKind.constant_expr:
            inst = self.as_instruction()
            return (
                adopt(v, "operand", dict(inst._parents, instruction=self)) for v in _llvm.ValueRef.operands.fget(inst)
            )
        if kind in _AGGREGATES:
            elements = _text.aggregate_elements(str(self).strip())
            copy, values, _, _ = _text.probe(self.module, values=elements)
            return iter([adopt(v, "operand", self._probe_parents(copy, instruction=self)) for v in values])
        raise ValueError(f"expected instruction value, constant aggregate, or global. Got {self._kind} {kind.name}")

    @property
    def indices(self):
        """The constant indices of an `extractvalue` or `insertvalue` instruction."""
        if not self.is_instruction or self.opcode not in ("insertvalue", "extractvalue"):
            raise ValueError(f"expected insert/extractvalue value, got {self._kind}")
        _, body = _text.instruction_body(self)
        skip = 1 if self.opcode == "extractvalue" else 2
        return iter([int(p) for p in _text.split_top(body)[skip:]])

    def as_instruction(self):
        """A constant expression as an instruction (of a parsed copy of the module)."""
        if self.value_kind != ValueKind.constant_expr:
            raise ValueError(f"expected constant expr, got {self.value_kind}")
        text = str(self).strip()
        body = text[_text.scan_type(text) :].strip()
        head, paren, _ = body.partition("(")
        opcode = head.split()[0]
        inner = body[len(head) + 1 : body.rindex(")")]
        if opcode in _BINARY:
            first, second = _text.split_top(inner)
            inner = f"{first}, {second[_text.scan_type(second) :].strip()}"
        copy, _, _, (inst,) = _text.probe(self.module, instructions=[f"{head.strip()} {inner}"])
        return adopt(inst, "instruction", self._probe_parents(copy))

    def get_constant_value(self, signed_int: bool = False, round_fp: bool = False):
        """The constant's value: int, float, a list for aggregates and expressions, a str for `c"..."` data."""
        kind = self.value_kind
        if kind == ValueKind.global_variable:
            init = self.initializer
            return None if init is None else init.get_constant_value(signed_int, round_fp)
        if kind in (ValueKind.function, ValueKind.basic_block):
            return self
        if not self.is_constant:
            raise ValueError(f"expected constant value, got {self._kind}")
        if kind in (ValueKind.constant_data_array, ValueKind.constant_data_vector):
            string = _text.c_string(str(self).strip())
            if string is not None:
                return string
        if kind in _AGGREGATES or kind == ValueKind.constant_expr:
            return [op.get_constant_value(signed_int, round_fp) for op in self.operands]
        if kind == ValueKind.constant_int:  # llvmlite reads whole 64-bit words: sign from the type's width
            width = self.type.type_width
            value = super().get_constant_value(False, round_fp) & ((1 << width) - 1)
            return value - (1 << width) if signed_int and value >> (width - 1) else value
        return super().get_constant_value(signed_int, round_fp)

    def add_function_key_value_attribute(self, key: str, value: str) -> None:
        """Add the string attribute `"key"="value"` to this function (the module is re-parsed in place)."""
        if not self.is_function:
            raise ValueError(f"expected function value, got {self._kind}")
        self._check_writable("an attribute")
        header = _function_header(self)
        attr = '"{}"="{}"'.format(key.replace('"', r"\22"), value.replace('"', r"\22"))
        text = str(self.module)
        at = text.index(header)
        close = _params_end(header)
        new_header = f"{header[:close]} {attr}{header[close:]}"
        _text.rewrite(self.module, text[:at] + new_header + text[at + len(header) :])
        fresh = self.module.get_function(self.name)
        self._ptr, self._as_parameter_ = fresh._ptr, fresh._ptr

    def get_function_location(self) -> tuple[str, str, int]:
        """(directory, file name, line) of this function's definition from its debug info; ("", "", 0) without."""
        if not self.is_function:
            raise ValueError(f"expected function value, got {self._kind}")
        match = re.search(r"!dbg (![\w.]+)", _function_header(self))
        if match is None:
            return "", "", 0
        text = str(self.module)
        sub = re.search(rf"^{re.escape(match.group(1))} = (?:distinct )?!DISubprogram\((.*)\)$", text, re.M)
        if sub is None:
            return "", "", 0
        line = re.search(r"\bline: (\d+)", sub.group(1))
        file_ref = re.search(r"\bfile: (![\w.]+)", sub.group(1))
        directory = filename = ""
        if file_ref is not None:
            node = re.search(rf"^{re.escape(file_ref.group(1))} = (?:distinct )?!DIFile\((.*)\)$", text, re.M)
            if node is not None:
                filename = _field(node.group(1), "filename")
                directory = _field(node.group(1), "directory")
        return directory, filename, int(line.group(1)) if line else 0


def _field(fields: str, name: str) -> str:
    match = re.search(rf'\b{name}: "((?:[^"\\]|\\.)*)"', fields)
    return match.group(1) if match else ""


def _function_header(fn) -> str:
    """The `define`/`declare` line of a function, without its body."""
    for line in str(fn).splitlines():
        if line.startswith(("define ", "declare ")):
            return line[:-1].rstrip() if line.endswith("{") else line
    raise ValueError(f"no definition line for function {fn.name!r}")


def _params_end(header: str) -> int:
    """Index just past the parameter list of a function header."""
    at = header.index("(", header.index("@"))
    return at + (_text._balanced(header[at:], 0))


__all__ = ["Linkage", "StorageClass", "ValueKind", "ValueRef", "Visibility", "adopt"]
