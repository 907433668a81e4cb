"""Inline PTX blocks of several instructions, run on the host with the GPU's semantics.

Libraries write short register programs in one asm statement: CUB's warp reductions shuffle a
value down with the predicate output and add it only where the source lane exists
(``{ .reg .f32 r0; .reg .pred p; shfl.sync.down.b32 r0|p, $1, $2, $3, $5; @p add.f32 r0, r0, $4;
mov.f32 $0, r0; }``), its 64-bit forms split and join register pairs around two shuffles. Rather
than list each string, this reads the block as a small program over virtual registers and writes
its LLVM IR, one SSA value per register write (docs/design/internals.md, "Host backend: inline
PTX"). What it reads:

* ``.reg .TYPE a, b;`` declarations (32/64-bit integer and float types, 16-bit bit types, ``.pred``);
* ``mov`` between registers, operands and immediates, and ``mov.b64``/``mov.b32`` packing and
  unpacking register pairs;
* ``shfl.sync.{up,down,idx,bfly}.b32 d[|p], a, b, c, mask`` through the runtime's warp shuffle;
* ``add``, ``sub``, ``mul`` (``.lo`` for integers), ``min``, ``max``, ``and``, ``or``, ``xor`` on
  32/64-bit integers and f32/f64 (floats with no rounding modifier or ``.rn``; ``mul`` only with
  ``.rn``, since ptxas may fuse a bare one with the ``add`` after it into one rounding);
* ``setp.CMP.TYPE p, a, b`` and ``selp.TYPE d, a, b, p``;
* ``@p`` / ``@!p`` guards on any of them (the register keeps its value where the guard is false).

Anything else returns None, and the backend names the asm as unsupported.
"""

from __future__ import annotations

import re

_TYPES = {
    "b16": "i16",
    "u16": "i16",
    "s16": "i16",
    "b32": "i32",
    "u32": "i32",
    "s32": "i32",
    "f32": "float",
    "b64": "i64",
    "u64": "i64",
    "s64": "i64",
    "f64": "double",
    "pred": "i1",
}
_WIDTH = {"i1": 1, "i16": 16, "i32": 32, "float": 32, "i64": 64, "double": 64}
_SHFL_MODES = {"idx": 0, "up": 1, "down": 2, "bfly": 3}  # the runtime's __mneme_shfl modes
_INT_OPS = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor"}
_FLOAT_OPS = {"add": "fadd", "sub": "fsub", "mul": "fmul"}
_ICMP = {
    "eq": "eq",
    "ne": "ne",
    "lt": "lt",
    "le": "le",
    "gt": "gt",
    "ge": "ge",
    "lo": "ult",
    "ls": "ule",
    "hi": "ugt",
    "hs": "uge",
}
_FCMP = {
    "eq": "oeq",
    "ne": "one",
    "lt": "olt",
    "le": "ole",
    "gt": "ogt",
    "ge": "oge",
    "equ": "ueq",
    "neu": "une",
    "ltu": "ult",
    "leu": "ule",
    "gtu": "ugt",
    "geu": "uge",
    "num": "ord",
    "nan": "uno",
}
_NAME = re.compile(r"[A-Za-z_][\w$]*")


class _Unsupported(Exception):
    """The block uses something this reader does not implement."""


class _Program:
    """The IR of one block: registers map to their latest SSA value; `$N` operands are registers too."""

    def __init__(self, ret: str, args: list[str]):
        self.ret, self.lines, self.n = ret, [], 0
        members = _members(ret)
        self.outputs = len(members)
        self.types: dict[str, str] = {f"${k}": t for k, t in enumerate(members)}
        self.values: dict[str, str] = {}
        for k, arg_type in enumerate(args):
            self.types[f"${self.outputs + k}"] = arg_type
            self.values[f"${self.outputs + k}"] = f"%a{k}"

    def tmp(self, line: str) -> str:
        self.n += 1
        self.lines.append(f"%t{self.n} = {line}")
        return f"%t{self.n}"

    def declare(self, ptx_type: str, names: str) -> None:
        llvm_type = _TYPES.get(ptx_type)
        if llvm_type is None:
            raise _Unsupported(ptx_type)
        for name in (n.strip() for n in names.split(",")):
            if not _NAME.fullmatch(name) or name in self.types:
                raise _Unsupported(name)
            self.types[name] = llvm_type

    def cast(self, value: str, have: str, want: str) -> str:
        """`value` of type `have` as `want`: the same bits where the widths agree."""
        if have == want:
            return value
        if _WIDTH.get(have) != _WIDTH.get(want) or "i1" in (have, want):
            raise _Unsupported(f"{have} as {want}")
        return self.tmp(f"bitcast {have} {value} to {want}")

    def read(self, operand: str, want: str) -> str:
        operand = operand.strip()
        if operand in self.types:
            if operand not in self.values:
                raise _Unsupported(f"{operand} read before it is written")
            return self.cast(self.values[operand], self.types[operand], want)
        return _immediate(operand, want)

    def write(self, dest: str, value: str, have: str, guard: tuple[str, bool] | None) -> None:
        dest = dest.strip()
        if dest not in self.types:
            raise _Unsupported(dest)
        reg_type = self.types[dest]
        value = self.cast(value, have, reg_type)
        if guard is not None:
            if dest.startswith("$") and dest not in self.values:
                # an output the block may leave unwritten: its value then is the caller's ("+r", a tied
                # input this reader is not told about), so the block is not read
                raise _Unsupported(f"{dest} written only under a guard")
            pred = self.read(guard[0], "i1")
            old = self.values.get(dest, "zeroinitializer")  # a register never written: undefined on the GPU too
            chosen, other = (value, old) if guard[1] else (old, value)
            value = self.tmp(f"select i1 {pred}, {reg_type} {chosen}, {reg_type} {other}")
        self.values[dest] = value

    def finish(self) -> list[str]:
        members = _members(self.ret)
        outs = []
        for k, member in enumerate(members):
            if f"${k}" not in self.values:
                raise _Unsupported(f"output ${k} never written")
            outs.append(self.values[f"${k}"])
        if not members:
            return [*self.lines, "ret void"]
        if len(members) == 1 and not self.ret.startswith("{"):
            return [*self.lines, f"ret {self.ret} {outs[0]}"]
        result = "poison"
        for k, (member, value) in enumerate(zip(members, outs)):
            result = self.tmp(f"insertvalue {self.ret} {result}, {member} {value}, {k}")
        return [*self.lines, f"ret {self.ret} {result}"]


def _members(ret: str) -> list[str]:
    if ret == "void":
        return []
    if ret.startswith("{"):
        return [m.strip() for m in ret.strip("{} ").split(",")]
    return [ret]


def _f32_as_double_bits(bits: int) -> int:
    """The bits of the double that holds the f32 `bits` exactly, as LLVM writes float constants; by hand, so
    that a signalling NaN keeps its payload (a conversion through Python floats would quiet it)."""
    sign, exponent, mantissa = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:  # infinity or NaN, payload kept
        return sign << 63 | 0x7FF << 52 | mantissa << 29
    if exponent == 0:
        if mantissa == 0:
            return sign << 63
        shift = 24 - mantissa.bit_length()  # a subnormal f32 is a normal double
        return sign << 63 | (1023 - 126 - shift) << 52 | ((mantissa << shift) & 0x7FFFFF) << 29
    return sign << 63 | (exponent - 127 + 1023) << 52 | mantissa << 29


def _immediate(text: str, want: str) -> str:
    """A PTX immediate as an LLVM constant of type `want`."""
    if m := re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", text):
        if want != "float":
            raise _Unsupported(text)
        return "0x%016X" % _f32_as_double_bits(int(m.group(1), 16))
    if m := re.fullmatch(r"0[dD]([0-9a-fA-F]{16})", text):
        if want != "double":
            raise _Unsupported(text)
        return "0x" + m.group(1).upper()
    if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", text) and want.startswith("i") and want != "i1":
        value = int(text.rstrip("uU"), 0)
        width = _WIDTH[want]
        value &= (1 << width) - 1
        return str(value - (1 << width) if value >> (width - 1) else value)
    raise _Unsupported(text)


def _statements(text: str) -> list[str]:
    text = re.sub(r"(?:\s|\\0A|\\09)+", " ", text).strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise _Unsupported("not a block")
    inner = text[1:-1]
    if "{" in re.sub(r"\{[^{}]*\}", "", inner) or "}" in re.sub(r"\{[^{}]*\}", "", inner):
        raise _Unsupported("nested block")
    return [s.strip() for s in inner.split(";") if s.strip()]


def _split_operands(rest: str) -> list[str]:
    return [o.strip() for o in re.split(r",(?![^{]*\})", rest)] if rest.strip() else []


def _pair(operand: str) -> list[str] | None:
    m = re.fullmatch(r"\{\s*([^{},]+?)\s*,\s*([^{},]+?)\s*\}", operand.strip())
    return [m.group(1), m.group(2)] if m else None


def _instruction(p: _Program, statement: str) -> None:
    guard = None
    if m := re.match(r"@(!?)(\w+)\s+", statement):
        guard = (m.group(2), not m.group(1))
        statement = statement[m.end() :]
    op, _, rest = statement.partition(" ")
    if op == ".reg":
        m = re.fullmatch(r"\.(\w+)\s+(.+)", rest.strip())
        if not m or guard is not None:
            raise _Unsupported(statement)
        p.declare(m.group(1), m.group(2))
        return
    name, *mods = op.split(".")
    operands = _split_operands(rest)
    if name == "mov":
        _mov(p, mods, operands, guard)
    elif name == "shfl":
        _shfl(p, mods, operands, guard)
    elif name in ("add", "sub", "mul", "and", "or", "xor", "min", "max"):
        _binary(p, name, mods, operands, guard)
    elif name == "setp":
        _setp(p, mods, operands, guard)
    elif name == "selp":
        _selp(p, mods, operands, guard)
    else:
        raise _Unsupported(op)


def _type(mods: list[str]) -> tuple[str, str]:
    if not mods or mods[-1] not in _TYPES:
        raise _Unsupported(".".join(mods))
    return mods[-1], _TYPES[mods[-1]]


def _mov(p: _Program, mods: list[str], operands: list[str], guard) -> None:
    if len(mods) != 1 or len(operands) != 2:
        raise _Unsupported("mov")
    ptx_type, llvm_type = _type(mods)
    dest, src = operands
    if (parts := _pair(dest)) is not None:  # unpack: the first register gets the low half
        if ptx_type not in ("b32", "b64"):
            raise _Unsupported("mov unpack")
        half = f"i{_WIDTH[llvm_type] // 2}"
        value = p.read(src, llvm_type)
        low = p.tmp(f"trunc {llvm_type} {value} to {half}")
        high = p.tmp(f"trunc {llvm_type} {p.tmp(f'lshr {llvm_type} {value}, {_WIDTH[llvm_type] // 2}')} to {half}")
        p.write(parts[0], low, half, guard)
        p.write(parts[1], high, half, guard)
        return
    if (parts := _pair(src)) is not None:  # pack
        if ptx_type not in ("b32", "b64"):
            raise _Unsupported("mov pack")
        half = f"i{_WIDTH[llvm_type] // 2}"
        low = p.tmp(f"zext {half} {p.read(parts[0], half)} to {llvm_type}")
        high = p.tmp(f"zext {half} {p.read(parts[1], half)} to {llvm_type}")
        shifted = p.tmp(f"shl {llvm_type} {high}, {_WIDTH[llvm_type] // 2}")
        p.write(dest, p.tmp(f"or {llvm_type} {shifted}, {low}"), llvm_type, guard)
        return
    p.write(dest, p.read(src, llvm_type), llvm_type, guard)


def _shfl(p: _Program, mods: list[str], operands: list[str], guard) -> None:
    if len(mods) != 3 or mods[0] != "sync" or mods[1] not in _SHFL_MODES or mods[2] != "b32" or len(operands) != 5:
        raise _Unsupported("shfl")
    dest, pred = (operands[0].split("|", 1) + [None])[:2]
    value, lane, clamp, mask = (p.read(o, "i32") for o in operands[1:])
    word = p.tmp(
        f"call i64 @__mneme_shfl(i32 {_SHFL_MODES[mods[1]]}, i32 {mask}, i32 {value}, i32 {lane}, i32 {clamp})"
    )
    p.write(dest, p.tmp(f"trunc i64 {word} to i32"), "i32", guard)
    if pred is not None:
        p.write(pred, p.tmp(f"trunc i64 {p.tmp(f'lshr i64 {word}, 32')} to i1"), "i1", guard)


def _binary(p: _Program, name: str, mods: list[str], operands: list[str], guard) -> None:
    ptx_type, llvm_type = _type(mods)
    extra = mods[:-1]
    if len(operands) != 3:
        raise _Unsupported(name)
    a, b = (p.read(o, llvm_type) for o in operands[1:])
    if llvm_type in ("float", "double"):
        if extra not in ([], ["rn"]):  # .ftz, .sat and directed rounding change the result
            raise _Unsupported(".".join([name, *mods]))
        if name == "mul" and extra != ["rn"]:  # ptxas may fuse a bare mul with the add after it (one rounding)
            raise _Unsupported(".".join([name, *mods]))
        if name in ("min", "max"):  # PTX returns the other operand where one is NaN, as minnum/maxnum do
            suffix = "f32" if llvm_type == "float" else "f64"
            result = p.tmp(f"call {llvm_type} @llvm.{name}num.{suffix}({llvm_type} {a}, {llvm_type} {b})")
        elif name in _FLOAT_OPS:
            result = p.tmp(f"{_FLOAT_OPS[name]} {llvm_type} {a}, {b}")
        else:
            raise _Unsupported(name)
    elif llvm_type in ("i32", "i64"):
        if name == "mul" and extra != ["lo"] or name != "mul" and extra:
            raise _Unsupported(".".join([name, *mods]))
        if name in ("min", "max"):
            if ptx_type.startswith("b"):
                raise _Unsupported(".".join([name, *mods]))
            sign = "s" if ptx_type.startswith("s") else "u"
            result = p.tmp(f"call {llvm_type} @llvm.{sign}{name}.{llvm_type}({llvm_type} {a}, {llvm_type} {b})")
        elif name in ("and", "or", "xor") and not ptx_type.startswith("b"):
            raise _Unsupported(".".join([name, *mods]))
        else:
            result = p.tmp(f"{_INT_OPS[name]} {llvm_type} {a}, {b}")
    else:
        raise _Unsupported(".".join([name, *mods]))
    p.write(operands[0], result, llvm_type, guard)


def _setp(p: _Program, mods: list[str], operands: list[str], guard) -> None:
    if len(mods) != 2 or len(operands) != 3 or "|" in operands[0]:
        raise _Unsupported("setp")
    cmp, (ptx_type, llvm_type) = mods[0], _type(mods)
    a, b = (p.read(o, llvm_type) for o in operands[1:])
    if llvm_type in ("float", "double"):
        if cmp not in _FCMP:
            raise _Unsupported(f"setp.{cmp}")
        result = p.tmp(f"fcmp {_FCMP[cmp]} {llvm_type} {a}, {b}")
    elif llvm_type in ("i16", "i32", "i64"):
        pred = _ICMP.get(cmp)
        if pred is None:
            raise _Unsupported(f"setp.{cmp}")
        if pred in ("lt", "le", "gt", "ge"):
            if ptx_type.startswith("b"):
                raise _Unsupported(f"setp.{cmp}.{ptx_type}")
            pred = ("s" if ptx_type.startswith("s") else "u") + pred
        result = p.tmp(f"icmp {pred} {llvm_type} {a}, {b}")
    else:
        raise _Unsupported("setp")
    p.write(operands[0], result, "i1", guard)


def _selp(p: _Program, mods: list[str], operands: list[str], guard) -> None:
    if len(mods) != 1 or len(operands) != 4:
        raise _Unsupported("selp")
    _, llvm_type = _type(mods)
    a, b = (p.read(o, llvm_type) for o in operands[1:3])
    pred = p.read(operands[3], "i1")
    p.write(operands[0], p.tmp(f"select i1 {pred}, {llvm_type} {a}, {llvm_type} {b}"), llvm_type, guard)


def body(text: str, ret: str, args: list[str]) -> list[str] | None:
    """IR lines implementing the inline PTX block `text` for a call of type `ret (args)`, or None."""
    try:
        statements = _statements(text)
        if len(statements) < 2:  # one instruction: inline_ptx reads those
            return None
        program = _Program(ret, args)
        for statement in statements:
            _instruction(program, statement)
        return program.finish()
    except (_Unsupported, KeyError, ValueError):
        return None
