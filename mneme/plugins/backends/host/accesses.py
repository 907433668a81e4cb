"""The memory accesses of one line of LLVM IR text: where, how many bytes, read or write.

`boundscheck` puts a call to the runtime's ``__mneme_check_access(ptr, bytes, kind)`` before each
access this module finds: loads and stores (scalar and vector), ``atomicrmw`` and ``cmpxchg``,
``llvm.memcpy``/``memmove`` (both sides) and ``llvm.memset``, and the masked vector intrinsics
(``llvm.masked.load``/``store``/``gather``/``scatter``/``expandload``/``compressstore``), whose
lanes are checked one by one, so a lane that the mask switches off is never an access. The
pointer may be a value or a constant expression (``inttoptr (i64 ... to ptr)``, a constant
``getelementptr``); NVVM and AMDGPU atomics reach here as the ``atomicrmw``/``cmpxchg`` the host
lowers them to (intrinsics.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

READ, WRITE, ATOMIC = 0, 1, 2

_OPEN, _CLOSE = "([{<", ")]}>"
_FLOAT_BITS = {
    "half": 16,
    "bfloat": 16,
    "float": 32,
    "double": 64,
    "fp128": 128,
    "ppc_fp128": 128,
    "x86_fp80": 80,
    "ptr": 64,
}
_ATTRIBUTE = re.compile(
    r"(?:nonnull|noundef|noalias|nocapture|readonly|writeonly|readnone|immarg|returned|signext|"
    r"zeroext|inreg|nofree|align \d+|(?:dereferenceable(?:_or_null)?|captures|range|"
    r"nofpclass|initializes|align|elementtype)(?=\())\s*"
)


@attrs.frozen
class Access:
    """`size` bytes at `pointer` (IR operand texts), read, written or atomically updated (`kind`)."""

    pointer: str
    size: str
    kind: int


def split_operands(text: str) -> list[str]:
    """Top-level comma-separated parts of `text`, brackets and quoted strings kept whole."""
    parts, depth, start, quoted = [], 0, 0, False
    for i, c in enumerate(text):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _group_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at `start`."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def split_type(operand: str) -> tuple[str, str]:
    """(type, the rest) of an operand written "TYPE VALUE"."""
    operand = operand.strip()
    if operand[:1] in "[{<":
        end = _group_end(operand, 0)
    else:
        found = re.match(r'ptr addrspace\(\d+\)|%"[^"]+"|\S+', operand)
        end = found.end() if found else len(operand)
    return operand[:end], operand[end:].strip()


def value_of(operand: str) -> str:
    """The value of a call argument "TYPE [attributes] VALUE"."""
    rest = split_type(operand)[1]
    while found := _ATTRIBUTE.match(rest):
        rest = rest[found.end() :]
        if rest.startswith("("):
            rest = rest[_group_end(rest, 0) :].lstrip()
    return rest


def vector_shape(type_text: str) -> tuple[int, str] | None:
    """(lanes, element type) of a fixed vector type "<N x T>"."""
    found = re.fullmatch(r"<\s*(\d+)\s+x\s+(.+?)\s*>", type_text.strip())
    return (int(found.group(1)), found.group(2)) if found else None


def _bits(scalar: str) -> int | None:
    if re.fullmatch(r"i\d+", scalar):
        return int(scalar[1:])
    return _FLOAT_BITS.get(scalar)


def size_of(type_text: str) -> str:
    """The bytes an access of `type_text` touches, as an i64 constant (LLVM's store size)."""
    type_text = type_text.strip()
    bits = _bits(type_text)
    shape = vector_shape(type_text)
    if bits is None and shape is not None and (elem := _bits(shape[1])) is not None:
        bits = shape[0] * elem
    if bits is not None:
        return str(-(-bits // 8))
    # aggregates and named types: their allocation size, which is their store size
    return f"ptrtoint (ptr getelementptr ({type_text}, ptr null, i32 1) to i64)"


def checked_pointer(pointer: str, locals_: set[str]) -> bool:
    """Whether an access through `pointer` is worth a check: not a local variable, a global or null."""
    pointer = pointer.strip()
    if pointer in locals_ or pointer in ("null", "undef", "poison", "zeroinitializer"):
        return False
    return not re.fullmatch(r'@[-\w.$]+|@"[^"]+"', pointer)


class Lines:
    """New instructions before the access, with fresh names."""

    def __init__(self, fresh: Callable[[], str]) -> None:
        self.fresh = fresh
        self.lines: list[str] = []

    def emit(self, text: str) -> str:
        name = self.fresh()
        self.lines.append(f"{name} = {text}")
        return name


def _lanes(out: Lines, pointers: list[str], mask: str, lanes: int, elem: str, kind: int) -> list[Access]:
    """One access per lane of a masked operation: `elem`'s bytes at its pointer where the mask is on."""
    size = size_of(elem)
    found = []
    for i, pointer in enumerate(pointers):
        on = out.emit(f"extractelement <{lanes} x i1> {mask}, i64 {i}")
        found.append(Access(pointer, out.emit(f"select i1 {on}, i64 {size}, i64 0"), kind))
    return found


def _masked(name: str, args: list[str], out: Lines) -> list[Access]:
    typed = [split_type(a) for a in args]
    masks = [i for i, (t, _) in enumerate(typed) if (s := vector_shape(t)) and s[1] == "i1"]
    data = vector_shape(typed[-1][0] if name in ("load", "gather", "expandload") else typed[0][0])
    if name not in ("load", "store", "gather", "scatter", "expandload", "compressstore") or not masks or not data:
        return []  # scalable vectors (<vscale x ...>) are not made for the host's CPUs
    lanes, mask = vector_shape(typed[masks[-1]][0])[0], value_of(args[masks[-1]])
    elem = data[1]
    kind = READ if name in ("load", "gather", "expandload") else WRITE
    if name in ("gather", "scatter"):
        vectors = value_of(args[1 if name == "scatter" else 0])
        pointers = [out.emit(f"extractelement <{lanes} x ptr> {vectors}, i64 {i}") for i in range(lanes)]
        return _lanes(out, pointers, mask, lanes, elem, kind)
    base = value_of(next(a for a, (t, _) in zip(args, typed) if t.startswith("ptr")))
    if name in ("load", "store"):
        pointers = [out.emit(f"getelementptr {elem}, ptr {base}, i64 {i}") for i in range(lanes)]
        return _lanes(out, pointers, mask, lanes, elem, kind)
    # expandload/compressstore: as many consecutive elements as lanes on
    total = "0"
    for i in range(lanes):
        on = out.emit(f"extractelement <{lanes} x i1> {mask}, i64 {i}")
        total = out.emit(f"add i64 {total}, " + out.emit(f"select i1 {on}, i64 {size_of(elem)}, i64 0"))
    return [Access(base, total, kind)]


def _call(line: str, out: Lines) -> list[Access]:
    found = re.search(
        r"@(llvm\.(?:memcpy|memmove|memset|masked\.\w+)(?:\.inline)?|__mneme_poll(?:32|64))[\w.]*\(", line
    )
    if not found:
        return []
    callee = found.group(1)
    open_at = found.end() - 1
    args = split_operands(line[open_at + 1 : _group_end(line, open_at) - 1])
    if callee.startswith("__mneme_poll"):
        return [Access(value_of(args[0]), str(int(callee[-2:]) // 8), READ)]
    if callee.startswith("llvm.masked."):
        return _masked(callee[len("llvm.masked.") :], args, out)
    length_type, length = split_type(args[2])
    if length_type != "i64":
        length = out.emit(f"zext {length_type} {length} to i64")
    dst = Access(value_of(args[0]), length, WRITE)
    if callee.startswith("llvm.memset"):
        return [dst]
    return [Access(value_of(args[1]), length, READ), dst]


_NAME = r'(?:%[-\w.$]+|%"[^"]+") = '
_LOAD = re.compile(_NAME + r"load (?:atomic )?(?:volatile )?")
_STORE = re.compile(r"store (?:atomic )?(?:volatile )?")
_RMW = re.compile(_NAME + r"atomicrmw (?:volatile )?\w+ ")
_CMPXCHG = re.compile(_NAME + r"cmpxchg (?:weak )?(?:volatile )?")
_CALL = re.compile(rf"(?:{_NAME})?(?:tail |musttail |notail )?call .*@(?:llvm\.mem|llvm\.masked\.|__mneme_poll)")
_ANY = re.compile(r"\b(?:load|store|atomicrmw|cmpxchg|call)\b")
#: what follows the pointer of an atomic load or store: `ptr %p syncscope("agent") seq_cst`
_ORDERING = re.compile(r'(?:\s+syncscope\("[^"]*"\))?\s+(?:unordered|monotonic|acquire|release|acq_rel|seq_cst)$')


def _pointer(operand: str) -> str:
    """The pointer value of a load's or store's typed pointer operand, without an atomic's ordering."""
    return _ORDERING.sub("", split_type(operand)[1])


def accesses(line: str, fresh: Callable[[], str]) -> tuple[list[str], list[Access]]:
    """(instructions to insert first, accesses) of one instruction line of a function body."""
    if not _ANY.search(line):
        return [], []
    text = line.strip()
    if found := _LOAD.match(text):
        ops = split_operands(text[found.end() :])
        return [], [Access(_pointer(ops[1]), size_of(ops[0]), READ)]
    if found := _STORE.match(text):
        ops = split_operands(text[found.end() :])
        return [], [Access(_pointer(ops[1]), size_of(split_type(ops[0])[0]), WRITE)]
    if found := _RMW.match(text):
        ops = split_operands(text[found.end() :])
        return [], [Access(split_type(ops[0])[1], size_of(split_type(ops[1])[0]), ATOMIC)]
    if found := _CMPXCHG.match(text):
        ops = split_operands(text[found.end() :])
        return [], [Access(split_type(ops[0])[1], size_of(split_type(ops[1])[0]), ATOMIC)]
    if _CALL.match(text):
        out = Lines(fresh)
        found_accesses = _call(text, out)
        return out.lines, found_accesses
    return [], []


_ALLOCA = re.compile(r'\s*(%[-\w.$]+|%"[^"]+") = alloca ')


def is_local(line: str) -> str | None:
    """The value an `alloca` line defines (a local variable: its accesses need no check)."""
    found = _ALLOCA.match(line)
    return found.group(1) if found else None
