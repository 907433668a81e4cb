"""The threads of a row for which a kernel's opening guard holds, found once per row instead of tested per thread.

A kernel that begins ``if (i > 0 && i < n - 1)``, ``i`` its global x index, run as a loop over a row's threads
(`block_loop.entry`), tests its guard in every iteration: LLVM vectorizes the loop with masked loads and stores,
which cost twice as much as plain ones once the data comes from beyond the L2 (a znver5, saxpy over 2^22 floats:
1.19 -> 0.53 ms on one worker). Here the guard's conditions become a range of threads ``[lo, hi)``, computed once
per row by a small function (the *span*); the entry runs those threads through a copy of the kernel whose guard
branches are taken (the *clone*), and the threads below and above the range through the kernel itself.

What `find_guard` takes, on the kernel as the block loop passes it (the thread index as parameters,
`block_loop.thread_indices_as_parameters`), optimized or as `mneme-cc` records it (values through allocas):

* the kernel's first block ends in a conditional branch; the guard is that branch and, where one side leads to a
  block with no other predecessor that computes values only and ends in a branch to the first one's other side
  (``&&`` and ``||`` as clang writes them without optimizing), that block's branch too, and so on;
* each branch's condition, on the side that stays in the guard, is a conjunction (``and``, ``select c, d,
  false``; ``or`` and ``select c, true, d`` on the false side; ``xor c, true``) of comparisons;
* each comparison is either the same for every thread of the row (its operands computed from the kernel's
  parameters other than the x index, constants and the block's special registers: the row runs it or not), or
  compares a 32-bit value ``A + x`` with a value ``B`` of the first kind: ``x`` the thread's x index (or the linear
  thread index, which is the row's start plus x), ``A`` of the first kind, through additions and subtractions of
  such values. Its threads are then an interval of x, while ``A + x`` does not wrap in the comparison's signedness
  (the span stops the range where it would: past it the kernel's own comparison decides).

The span copies the computations the comparisons read, with the thread's x index 0 (so ``A + x`` reads ``A``),
without their no-wrap flags (where the kernel's value would be poison, its own guard runs), and returns the
intersection of the comparisons' intervals in 64 bits. Only computations run: special registers read from the
context, arithmetic without division, casts, comparisons and selections; never a load from memory another thread
could write, never a call.
"""

from __future__ import annotations

import dataclasses
import re

from mneme.core import ir
from mneme.plugins.backends.host import block_loop
from mneme.plugins.backends.host.irtext import (
    COND_BR,
    DEF,
    LABEL,
    LABEL_REF,
    branch_taken,
    function_span,
    min_max,
    parameter_list,
    symbol_ref,
)

#: the thread's x index, and its linear index (the row's start plus x), as `block_loop` passes them
X_PARAMS = (block_loop.TID_PARAMS[0], block_loop.TID_PARAMS[3])
SPAN_SUFFIX = ".__mneme_span"
CLONE_SUFFIX = ".__mneme_in_range"

_V = r"(%[-\w.$]+|-?\d+|true|false)"
_BIN = re.compile(rf"^(add|sub|mul|shl|lshr|ashr|and|or|xor)((?: (?:nuw|nsw|exact|disjoint))*) (i\d+) {_V}, {_V}$")
_CAST = re.compile(rf"^(sext|zext|trunc)((?: (?:nneg|nuw|nsw))*) (i\d+) {_V} to (i\d+)$")
_ICMP = re.compile(rf"^icmp (?:samesign )?(eq|ne|slt|sle|sgt|sge|ult|ule|ugt|uge) (i\d+) {_V}, {_V}$")
_SELECT = re.compile(rf"^select i1 {_V}, (i\d+) {_V}, (i\d+) {_V}$")
_FREEZE = re.compile(rf"^freeze (i\d+) {_V}$")
# special registers the same for every thread of a block (ctaid.x is a parameter of the block loop's kernel)
_SREG = re.compile(
    r"^(?:tail |notail )?call (?:[\w()]+ |range\([^)]*\) )*i32 @__mneme\.nvvm\.read\.ptx\.sreg\."
    r"(?:ntid\.[xyz]|nctaid\.[xyz]|ctaid\.[yz])\(\)(?:\s*#\d+)?$"
)
# AMDGPU's: the work-group ids along y and z, and the packets the runtime fills once per launch (the block's extent
# is read from them, by loads the retargeting marks invariant: retarget_amdgpu.constant_loads_invariant)
_AMD_SREG = re.compile(
    r"^(?:tail |notail )?call (?:[\w()]+ |range\([^)]*\) )*i32 @__mneme\.amdgcn\.workgroup\.id\.[yz]\(\)(?:\s*#\d+)?$"
)
_PACKET = re.compile(
    r"^(?:tail |notail )?call (?:[\w()]+ )*ptr @__mneme\.amdgcn\.(?:implicitarg|dispatch)\.ptr\(\)(?:\s*#\d+)?$"
)
_PACKET_GEP = re.compile(rf"^getelementptr (?:inbounds |nuw |nusw )*i8, ptr {_V}, i64 (-?\d+)$")
_PACKET_LOAD = re.compile(rf"^load (i\d+), ptr {_V}(?:, align (\d+))?$")
_MINMAX = re.compile(
    rf"^(?:tail |notail )?call (i\d+) @llvm\.([su](?:min|max))\.i\d+\(i\d+ {_V}, i\d+ {_V}\)(?:\s*#\d+)?$"
)
_LOAD = re.compile(r"^load i32, ptr (%[-\w.$]+)(?:, align \d+)?$")
_METADATA = re.compile(r"(?:, ![-\w.]+ !\d+)+$")
_EFFECT = re.compile(r"\b(?:store|atomicrmw|cmpxchg|fence|call|invoke|callbr|va_arg|alloca|phi)\b")
_NEGATE = {
    "slt": "sge",
    "sle": "sgt",
    "sgt": "sle",
    "sge": "slt",
    "ult": "uge",
    "ule": "ugt",
    "ugt": "ule",
    "uge": "ult",
}
_SWAP = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle", "ult": "ugt", "ule": "uge", "ugt": "ult", "uge": "ule"}


@dataclasses.dataclass(frozen=True)
class Guard:
    """A kernel's opening guard as a range of a row's threads: `span` (named `span_name`) returns ``{i64 lo, i64
    hi}`` given the kernel's arguments with x 0 and the linear index the row's start; `clone` (named `name`) is the
    kernel with the guard's branches taken. `tests`: each comparison of the guard in order, as the thread's index
    compares with its bound (``slt``, ``uge``, ...), or ``row`` for one the same across the row."""

    name: str
    clone: str
    span_name: str
    span: str
    tests: tuple[str, ...]


def _pure(rhs: str) -> bool:
    """Whether a definition only computes a value: no store, call (but special registers' reads, a launch packet's
    address and LLVM's min and max), phi or allocation."""
    return not _EFFECT.search(rhs) or any(p.match(rhs) for p in (_SREG, _AMD_SREG, _PACKET, _MINMAX))


def _rhs(line: str) -> str:
    """A definition's right-hand side without its metadata attachments."""
    m = DEF.match(line)
    return _METADATA.sub("", m.group(2).strip()) if m else ""


class _Function:
    """The kernel's blocks, its definitions and what reads values through its allocas."""

    def __init__(self, lines: list[str], start: int, end: int):
        self.lines, self.start, self.end = lines, start, end
        self.labels: dict[str, int] = {}  # label (with %) -> index of its line
        self.defs: dict[str, int] = {}  # value -> index of its line
        self.preds: dict[str, int] = {}  # label -> how many branches name it
        for i in range(start + 1, end):
            label = LABEL.match(lines[i])
            if label:
                self.labels["%" + label.group(1)] = i
                continue
            m = DEF.match(lines[i])
            if m:
                self.defs[m.group(1)] = i
            for ref in LABEL_REF.findall(lines[i]):
                self.preds[ref] = self.preds.get(ref, 0) + 1
        self.first_end = self.terminator(start + 1)

    def terminator(self, i: int) -> int:
        """The index of the terminator of the block whose instructions start at or after line `i`."""
        while i < self.end and not re.match(r"^\s+(br|ret|switch|unreachable|indirectbr)\b", self.lines[i]):
            i += 1
        return i

    def block_lines(self, label: str) -> range:
        """The indices of block `label`'s instruction lines, its terminator last."""
        first = self.labels[label] + 1
        return range(first, self.terminator(first) + 1)

    def only_returns(self, label: str) -> bool:
        body = [self.lines[i].strip() for i in self.block_lines(label) if self.lines[i].strip()]
        return body == ["ret void"]

    def stored_once(self, slot: str, before: int) -> str | None:
        """The value of the one store to `slot`, an i32 alloca of the first block that nothing else touches, where
        the store is in the first block before line `before` (clang's code without optimizations)."""
        at = self.defs.get(slot)
        if at is None or at > self.first_end or not re.match(r"^\s*%\S+ = alloca i32\b", self.lines[at]):
            return None
        token = re.compile(re.escape(slot) + r"(?![-\w.$])")
        uses = [i for i in range(self.start + 1, self.end) if i != at and token.search(self.lines[i])]
        stores = [i for i in uses if re.match(r"^\s*store i32 ", self.lines[i])]
        if len(stores) != 1 or stores[0] >= min(before, self.first_end):
            return None
        others = [i for i in uses if not re.match(r"^\s*(store i32 |%\S+ = load i32, ptr )", self.lines[i])]
        if any("@llvm.lifetime." not in self.lines[i] for i in others):
            return None
        found = re.match(rf"^\s*store i32 {_V}, ptr {re.escape(slot)},", self.lines[stores[0]])
        return found.group(1) if found else None

    def unwrap(self, value: str) -> str:
        """`value`, through loads of allocas stored once and ``or v, 0``."""
        at = self.defs.get(value)
        if at is None:
            return value
        rhs = _rhs(self.lines[at])
        m = re.match(rf"^or (?:disjoint )?i32 {_V}, 0$", rhs)
        if m:
            return self.unwrap(m.group(1))
        load = _LOAD.match(rhs)
        stored = self.stored_once(load.group(1), at) if load else None
        return self.unwrap(stored) if stored else value


class _Slice:
    """What the span must compute: the values a guard's comparisons read, classified as the same across a row
    (``free``) or ``A + x`` (``affine``)."""

    def __init__(self, fn: _Function, free: set[str], affine: set[str], name=None):
        self.fn, self.free, self.affine = fn, free, affine
        self.name = name or _local  # a value's name where the span computes it
        self.kinds: dict[str, str | None] = {}
        self.needed: set[str] = set()  # values whose definitions the span copies

    def kind(self, value: str) -> str | None:
        value = self.fn.unwrap(value)
        if re.fullmatch(r"-?\d+|true|false", value):
            return "free"
        if value in self.affine:
            return "affine"
        if value in self.free:
            return "free"
        if value not in self.kinds:
            self.kinds[value] = None  # a cycle (a phi's) is nothing the span computes
            self.kinds[value] = self._classify(value)
        return self.kinds[value]

    def _classify(self, value: str) -> str | None:
        at = self.fn.defs.get(value)
        if at is None or '%"' in self.fn.lines[at]:
            return None
        rhs = _rhs(self.fn.lines[at])
        m = _BIN.match(rhs)
        if m:
            op, ty, a, b = m.group(1), m.group(3), self.kind(m.group(4)), self.kind(m.group(5))
            if a is None or b is None:
                return None
            if a == b == "free":
                kind = "free"
            elif ty == "i32" and ((op == "add" and {a, b} == {"affine", "free"}) or (op == "sub" and b == "free")):
                kind = "affine"
            else:
                return None
            self.needed.add(value)
            return kind
        for pattern, groups in (
            (_CAST, (4,)),
            (_ICMP, (3, 4)),
            (_SELECT, (1, 3, 5)),
            (_FREEZE, (2,)),
            (_MINMAX, (3, 4)),
        ):
            m = pattern.match(rhs)
            if m:
                if any(self.kind(m.group(g)) != "free" for g in groups):
                    return None
                self.needed.add(value)
                return "free"
        if _SREG.match(rhs) or _AMD_SREG.match(rhs):
            self.needed.add(value)
            return "free"
        # a field of a packet the runtime filled for the launch: always readable, and no kernel store changes it
        kind = None
        if _PACKET.match(rhs):
            kind = "packet"
        elif m := _PACKET_GEP.match(rhs):
            kind = "packet" if self.kind(m.group(1)) == "packet" else None
        elif (m := _PACKET_LOAD.match(rhs)) and "!invariant.load" in self.fn.lines[at]:
            kind = "free" if self.kind(m.group(2)) == "packet" else None
        if kind:
            self.needed.add(value)
        return kind

    def emit(self, value: str) -> str:
        """The definition of `value` as the span computes it: operands unwrapped, no flags that make poison."""
        rhs = _rhs(self.fn.lines[self.fn.defs[value]])
        v, out = self.operand, self.name(value)
        m = _BIN.match(rhs)
        if m:
            return f"{out} = {m.group(1)} {m.group(3)} {v(m.group(4))}, {v(m.group(5))}"
        m = _CAST.match(rhs)
        if m:
            return f"{out} = {m.group(1)} {m.group(3)} {v(m.group(4))} to {m.group(5)}"
        m = _ICMP.match(rhs)
        if m:
            return f"{out} = icmp {m.group(1)} {m.group(2)} {v(m.group(3))}, {v(m.group(4))}"
        m = _SELECT.match(rhs)
        if m:
            return f"{out} = select i1 {v(m.group(1))}, {m.group(2)} {v(m.group(3))}, {m.group(4)} {v(m.group(5))}"
        m = _FREEZE.match(rhs)
        if m:
            return f"{out} = freeze {m.group(1)} {v(m.group(2))}"
        m = _MINMAX.match(rhs)
        if m:
            ty = m.group(1)
            return f"{out} = call {ty} @llvm.{m.group(2)}.{ty}({ty} {v(m.group(3))}, {ty} {v(m.group(4))})"
        m = _PACKET_GEP.match(rhs)
        if m:
            return f"{out} = getelementptr i8, ptr {v(m.group(1))}, i64 {m.group(2)}"
        m = _PACKET_LOAD.match(rhs)
        if m:
            return f"{out} = load {m.group(1)}, ptr {v(m.group(2))}, align {m.group(3) or 1}"
        return f"{out} = {rhs}"  # a special register's read, a packet's address

    def operand(self, value: str) -> str:
        return self.name(self.fn.unwrap(value))


def _local(value: str) -> str:
    """A value's name in the span: numbered names renamed (the span numbers nothing)."""
    return re.sub(r"^%(\d+)$", r"%__mneme_v\1", value)


def _flatten(fn: _Function, sl: _Slice, value: str, want: bool) -> list[tuple[str, bool]] | None:
    """The comparisons (or other values the same across the row) that must all be `want`... as (value, required
    truth) for `value` to be `want`; None where that is no conjunction."""
    value = fn.unwrap(value)
    at = fn.defs.get(value)
    rhs = _rhs(fn.lines[at]) if at is not None else ""
    m = re.match(rf"^(and|or) i1 {_V}, {_V}$", rhs)
    if m and (m.group(1) == "and") == want:
        parts = [_flatten(fn, sl, m.group(k), want) for k in (2, 3)]
        return None if None in parts else parts[0] + parts[1]
    m = _SELECT.match(rhs)
    if m and m.group(2) == m.group(4) == "i1":
        c, t, f = m.group(1), m.group(3), m.group(5)
        if (f == "false" and want) or (t == "true" and not want):  # c && d, or c || d, on the side of both
            parts = [_flatten(fn, sl, c, want), _flatten(fn, sl, f if f != "false" else t, want)]
            return None if None in parts else parts[0] + parts[1]
    m = re.match(rf"^xor i1 {_V}, true$", rhs)
    if m:
        return _flatten(fn, sl, m.group(1), not want)
    if _ICMP.match(rhs) or sl.kind(value) == "free":
        return [(value, want)]
    return None


def _tests(fn: _Function, sl: _Slice, leaves: list[tuple[str, bool]]) -> list[tuple[str, str, str, bool]] | None:
    """Each leaf as (kind, index value, bound value, required): kind a predicate of the index against its bound
    (interval leaves) or ``row``."""
    out = []
    for value, want in leaves:
        if sl.kind(value) == "free":
            out.append(("row", value, "", want))
            continue
        m = _ICMP.match(_rhs(fn.lines[fn.defs[value]]))
        if m is None or m.group(2) != "i32" or m.group(1) in ("eq", "ne"):
            return None
        pred, a, b = m.group(1), m.group(3), m.group(4)
        ka, kb = sl.kind(a), sl.kind(b)
        if (ka, kb) == ("free", "affine"):
            pred, a, b = _SWAP[pred], b, a
        elif (ka, kb) != ("affine", "free"):
            return None
        out.append((pred if want else _NEGATE[pred], a, b, True))
    return out


def find_guard(text: str, kernel_name: str) -> Guard | None:
    """The kernel's opening guard as a range of a row's threads (`Guard`), or None where it has none this module
    takes."""
    lines = text.split("\n")
    span = function_span(lines, kernel_name)
    if span is None or "!dbg" in lines[span[0]] or " comdat" in lines[span[0]]:
        return None  # a debug subprogram belongs to one function
    start, end = span
    fn = _Function(lines, start, end)
    sl = _Slice(fn, set(_params(lines[start], kernel_name)), set(X_PARAMS))
    chain = _chain(fn, sl, fn.first_end)
    if chain is None:
        return None
    tests = _tests(fn, sl, [leaf for _, _, found in chain for leaf in found])
    if not tests or all(kind == "row" for kind, *_ in tests):
        return None
    name = kernel_name + CLONE_SUFFIX
    clone = lines[start : end + 1]
    head = re.sub(
        r"^define\s+(?:(?:dso_local|internal|private|external|hidden|protected)\s+)*", "define internal ", clone[0]
    )
    clone[0] = head.replace(symbol_ref(kernel_name) + "(", symbol_ref(name) + "(", 1)
    for at, taken, _ in chain:
        clone[at - start] = branch_taken(lines[at], taken)
    span_name = kernel_name + SPAN_SUFFIX
    return Guard(
        name,
        "\n".join(clone),
        span_name,
        _span_function(fn, sl, lines[start], kernel_name, span_name, tests),
        tuple(kind for kind, *_ in tests),
    )


def _chain(fn: _Function, sl: _Slice, first: int) -> list[tuple[int, bool, list[tuple[str, bool]]]] | None:
    """The guard's branches: (line, whether its true side stays in the guard, the conditions it requires)."""
    branch = COND_BR.match(fn.lines[first])
    if branch is None or branch.group(2) == branch.group(3):
        return None
    cond, t, f = branch.groups()
    for taken, inside, outside in ((True, t, f), (False, f, t)):
        rest = _extend(fn, sl, inside, outside)
        found = _flatten(fn, sl, cond, taken)
        if rest and found is not None:
            return [(first, taken, found), *rest]
    # one branch: the side that does not just return, else the side that bounds the index from above
    options = []
    for taken, inside, outside in ((True, t, f), (False, f, t)):
        found = _flatten(fn, sl, cond, taken)
        tests = _tests(fn, sl, found) if found is not None else None
        if tests is None or fn.only_returns(inside) and outside in fn.labels and not fn.only_returns(outside):
            continue
        rank = (
            outside in fn.labels and fn.only_returns(outside),
            any(k[0] in "su" and k[1:] in ("lt", "le") for k, *_ in tests),
        )
        options.append((rank, taken, found))
    if not options:
        return None
    options.sort(key=lambda o: o[0], reverse=True)  # stable: the true side first where the ranks tie
    _, taken, found = options[0]
    return [(first, taken, found)]


def _extend(fn: _Function, sl: _Slice, label: str, out: str) -> list[tuple[int, bool, list[tuple[str, bool]]]]:
    """The branches after the first that test more of the guard: block `label` has one predecessor, computes values
    only and branches to `out` on one side; then the block on its other side, and so on."""
    found: list[tuple[int, bool, list[tuple[str, bool]]]] = []
    while label in fn.labels and fn.preds.get(label) == 1:
        rows = list(fn.block_lines(label))
        branch = COND_BR.match(fn.lines[rows[-1]])
        if branch is None or out not in branch.group(2, 3) or branch.group(2) == branch.group(3):
            break
        if any(fn.lines[i].strip() and not (DEF.match(fn.lines[i]) and _pure(_rhs(fn.lines[i]))) for i in rows[:-1]):
            break
        taken = branch.group(3) == out
        leaves = _flatten(fn, sl, branch.group(1), taken)
        if leaves is None:
            break
        found.append((rows[-1], taken, leaves))
        label = branch.group(2) if taken else branch.group(3)
    return found


def _params(define_line: str, kernel_name: str) -> list[str]:
    """The value names of a define line's parameters, in order."""
    open_index, close = parameter_list(define_line, kernel_name)
    inner = define_line[open_index + 1 : close]
    return [(re.findall(r"%[-\w.$]+|%\"[^\"]+\"", piece) or [""])[-1] for piece in ir.split_top_level(inner)]


def _in_order(fn: _Function, needed: set[str]) -> list[str]:
    """The values `needed`, each after the values it reads (the order of the kernel's text need not be)."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(value: str) -> None:
        seen.add(value)
        for operand in re.findall(r"%[-\w.$]+", _rhs(fn.lines[fn.defs[value]])):
            operand = fn.unwrap(operand)
            if operand in needed and operand not in seen:
                visit(operand)
        order.append(value)

    for value in sorted(needed, key=lambda v: fn.defs[v]):
        if value not in seen:
            visit(value)
    return order


def _span_function(
    fn: _Function,
    sl: _Slice,
    define_line: str,
    kernel_name: str,
    span_name: str,
    tests: list[tuple[str, str, str, bool]],
) -> str:
    """``{i64 lo, i64 hi}`` of the row's threads that pass the guard, from the kernel's arguments (x 0)."""
    open_index, close = parameter_list(define_line, kernel_name)
    inner = re.sub(r"%(\d+)(?![-\w.$])", r"%__mneme_v\1", define_line[open_index + 1 : close])
    out = [f"define internal {{ i64, i64 }} {symbol_ref(span_name)}({inner}) alwaysinline nounwind {{", "entry:"]
    out += ["  " + sl.emit(value) for value in _in_order(fn, sl.needed)]
    lines, lo, hi = _interval_lines(tests, sl.operand, "%__mneme_g")
    out += lines
    out += [
        f"  %__mneme_r0 = insertvalue {{ i64, i64 }} poison, i64 {lo}, 0",
        f"  %__mneme_r1 = insertvalue {{ i64, i64 }} %__mneme_r0, i64 {hi}, 1",
        "  ret { i64, i64 } %__mneme_r1",
        "}",
    ]
    return "\n".join(out)


def _interval_lines(tests: list[tuple[str, str, str, bool]], operand, prefix: str) -> tuple[list[str], str, str]:
    """The lines computing, in 64 bits, the range [lo, hi) of the affine value's offsets for which every test holds
    (unclamped: lo may be below 0, hi past the row); returns (lines, lo, hi)."""
    lo, hi = "0", "9223372036854775807"
    out: list[str] = []
    for k, (kind, a, b, want) in enumerate(tests):
        p = f"{prefix}{k}"
        if kind == "row":  # the whole row or none of it
            ok = operand(a) if want else f"{p}.not"
            if not want:
                out.append(f"  {p}.not = xor i1 {operand(a)}, true")
            out.append(f"  {p}.hi = select i1 {ok}, i64 {hi}, i64 -1")
            hi = f"{p}.hi"
            continue
        ext = "sext" if kind[0] == "s" else "zext"
        # A + x against B: x against B - A, in 64 bits; where A + x would wrap past the top of its signedness, the
        # range stops
        out += [
            f"  {p}.a = {ext} i32 {operand(a)} to i64",
            f"  {p}.b = {ext} i32 {operand(b)} to i64",
            f"  {p}.d = sub i64 {p}.b, {p}.a",
            f"  {p}.w = sub i64 {2**31 if kind[0] == 's' else 2**32}, {p}.a",
            *min_max(f"{p}.wh", "slt", f"{p}.w", hi),
            f"  {p}.e = add i64 {p}.d, {1 if kind[1:] in ('le', 'gt') else 0}",  # x < e (lt, le), x >= e (ge, gt)
        ]
        hi = f"{p}.wh"
        if kind[1:] in ("lt", "le"):
            out += min_max(f"{p}.h", "slt", f"{p}.e", hi)
            hi = f"{p}.h"
        else:
            out += min_max(f"{p}.lo", "sgt", f"{p}.e", lo)
            lo = f"{p}.lo"
    return out, lo, hi


@dataclasses.dataclass(frozen=True)
class LoopGuard:
    """A guard at the top of a loop's body on the loop's index (`loop_guard`): `lines` compute, before the loop,
    the range [`lo`, `hi`) (i64) of index values that pass it; the guard's branch goes to the body on its true side
    when `taken`."""

    taken: bool
    lines: tuple[str, ...]
    lo: str
    hi: str


def loop_guard(
    lines: list[str], kernel_name: str, header: str, latch: str, index: str, outside: set[str], suffix: str
) -> LoopGuard | None:
    """The guard that ends block `header` of kernel `kernel_name` in `lines` (a branch to the loop's body or straight
    to its `latch`), as a range of the loop's 32-bit `index`; None where it is no such guard. `outside`: the values
    the loop does not define (the range's lines read them as they are); the range's lines compute the loop's own
    values they need with the index 0, named with `suffix`."""
    span = function_span(lines, kernel_name)
    if span is None:
        return None
    start, end = span
    fn = _Function(lines, start, end)
    if header not in fn.labels:
        return None
    at = fn.block_lines(header)[-1]
    branch = COND_BR.match(lines[at])
    if branch is None or latch not in branch.group(2, 3) or branch.group(2) == branch.group(3):
        return None
    taken = branch.group(3) == latch

    def name(value: str) -> str:
        if value == index:
            return "0"
        return value if value in outside or not value.startswith("%") else value + suffix

    sl = _Slice(fn, outside | set(_params(lines[start], kernel_name)), {index}, name)
    leaves = _flatten(fn, sl, branch.group(1), taken)
    tests = _tests(fn, sl, leaves) if leaves is not None else None
    if not tests or all(kind == "row" for kind, *_ in tests):
        return None
    out = ["  " + sl.emit(value) for value in _in_order(fn, sl.needed)]
    more, lo, hi = _interval_lines(tests, sl.operand, "%__mneme_lg" + suffix.replace(".", "_"))
    return LoopGuard(taken, tuple(out + more), lo, hi)
