"""A grid-stride loop walked in a row: a worker's claim as one contiguous part of the index space.

The flat form (`grid_stride`) keeps each thread's iterations in their GPU order, so a claim of blocks
``[bx0, bx0 + run)`` walks every step of the loop: ``run * ntid`` indices in a row, then a grid's width
on. A worker's share becomes several strided sweeps of the whole array (claims of 16, 8, 4, 4 blocks),
each touching part of every window: 1.6x the time of one element per thread at 2^22 floats, on one
worker as on two (docs/design/internals.md, "walked in a row").

Where no iteration of a thread can reach memory another iteration of the same thread writes, the order
of a thread's iterations cannot show in the results; iterations of different threads are already
unordered (CUDA leaves their interleaving open, and one thread writing what another reads without
synchronization is a race). The index space ``[0, n)`` is then cut into pieces of one block's width,
piece ``p`` being block ``p mod nctaid.x`` at step ``p / nctaid.x``, and block ``v`` of the launch
runs pieces ``[v * K, (v + 1) * K)`` (K steps: ``ceil(n / S)``): a claim of consecutive blocks is one
contiguous range, which the prefetchers follow as they follow a C loop's static share.

What the IR must show (`sites` returns None otherwise): every memory access in the loop is a load or
store at ``base + a * i + c``, where i is the loop's index, ``a`` and ``c`` constants (bytes) and
``base`` a parameter, a global or a value of the kernel's first block; calls are intrinsics that touch
no memory or special-register reads. What the launch must show (the walk function, at run time, before
any piece runs): for every store and every other access (a store included, with itself), either both
have the same ``a`` and their addresses at the same index differ by at most ``|a| * S`` less the wider
access (a thread's other iterations are whole multiples of ``S`` away), or the byte ranges the two
cover over ``i`` in ``[0, n)`` do not meet. Otherwise the walk function returns 0 and the claim runs
in the flat form's order.
"""

from __future__ import annotations

import re

from mneme.core import envvars
from mneme.plugins.backends.host import accesses
from mneme.plugins.backends.host.irtext import DEBUG_REF, DEF

ENV = "MNEME_HOST_STRIDE_WALK"
SUFFIX = ".__mneme_walk"
#: coefficients past this many bytes an index are left to the flat form's order (products stay in 64 bits)
_MOST_BYTES = 1 << 16

_CONST = re.compile(r"-?\d+")
_INT_OP = re.compile(r"(add|sub|mul|shl|or disjoint)((?: nuw| nsw)*) (i32|i64) (%[-\w.$]+|-?\d+), (%[-\w.$]+|-?\d+)$")
_WIDEN = re.compile(r"(sext|zext(?: nneg)?) i32 (%[-\w.$]+) to i64$")
_GEP = re.compile(
    r"getelementptr(?: (?:inbounds|nuw|nusw|inrange\(\S+\)))* (<\d+ x [\w.]+>|[\w.]+), ptr (%[-\w.$]+|@[-\w.$]+), "
    r"(i32|i64) (%[-\w.$]+|-?\d+)$"
)
# a plain load or store: (its type, its address)
_ACCESS = {
    "load": re.compile(
        r"load (<\d+ x [\w.]+>|[\w.]+), ptr (%[-\w.$]+|@[-\w.$]+)(?:, align \d+)?(?:, ![-\w.]+ ![0-9]+)*$"
    ),
    "store": re.compile(
        r"store (<\d+ x [\w.]+>|[\w.]+) (?:%[-\w.$]+|[-\w.+]+), ptr (%[-\w.$]+|@[-\w.$]+)"
        r"(?:, align \d+)?(?:, ![-\w.]+ ![0-9]+)*$"
    ),
}
_CALL = re.compile(r"(?:tail |notail |musttail )?call [^@]*(@[-\w.$]+)\(")
# intrinsics that read or write memory, or order it: never in a walked loop
_MEMORY_INTRINSIC = re.compile(
    r"@llvm\.(?:mem|masked|stack|lifetime|invariant|prefetch|va_|trap|debugtrap|experimental|vp\.|matrix)"
)
_OPCODE = re.compile(r"^(?:(?:tail|notail|musttail) )?([a-z]\w*)")


def enabled() -> bool:
    """Whether grid-stride loops whose iterations are independent walk contiguous ranges (default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def _size(ty: str) -> int | None:
    """The bytes an access of a scalar or vector type touches (the bounds checks' `accesses.size_of`), or None."""
    size = accesses.size_of(ty)
    return int(size) if size.isdigit() else None


def _stride(ty: str) -> int | None:
    """A GEP's step over `ty` where it is the type's store size: a power of two (``<3 x float>`` steps 16, stores
    12; ``x86_fp80`` steps 16, stores 10), else None."""
    size = _size(ty)
    return size if size and size & (size - 1) == 0 else None


class Site:
    """A load or store at ``base + coef * i + const`` bytes, `size` bytes wide."""

    __slots__ = ("base", "coef", "const", "size", "store")

    def __init__(self, store: bool, base: str, coef: int, const: int, size: int):
        self.store, self.base, self.coef, self.const, self.size = store, base, coef, const, size

    def __repr__(self) -> str:
        kind = "store" if self.store else "load"
        return f"{kind} {self.size} B at {self.base} + {self.coef}*i + {self.const}"


def sites(loop_lines: list[str], defs: dict[str, str], index: str, outside: set[str]) -> list[Site] | None:
    """The loop's memory accesses as `Site`s, or None where one is not affine in `index` or the loop calls out.

    `loop_lines`: the loop's instructions; `defs`: value -> right-hand side for the whole function; `outside`:
    the values a base may be (parameters and values of the first block, known before the loop)."""
    memo: dict[str, tuple[int, int] | None] = {}

    def integer(value: str) -> tuple[int, int] | None:
        """``value`` as ``coef * i + const``, or None."""
        if _CONST.fullmatch(value):
            return 0, int(value)
        if value == index:
            return 1, 0
        if value in memo:
            return memo[value]
        memo[value] = None  # a cycle (a phi through an add) is not affine
        rhs = DEBUG_REF.sub("", defs.get(value, "")).strip()
        found = None
        widened = _WIDEN.fullmatch(rhs)
        # a plain zext keeps the value only where it is not negative: the index's (below 2^31, the walk's check)
        if widened and (widened.group(1) != "zext" or widened.group(2) == index) and exact_widening(widened.group(2)):
            found = integer(widened.group(2))
        op = _INT_OP.fullmatch(rhs)
        if op:
            name, flags, ty, a, b = op.groups()
            if name == "or disjoint":  # no common bits: a sum
                name, flags = "add", " nsw"
            if ty == "i64" or "nsw" in flags:
                fa, fb = integer(a), integer(b)
                if fa is not None and fb is not None:
                    if name == "add":
                        found = fa[0] + fb[0], fa[1] + fb[1]
                    elif name == "sub":
                        found = fa[0] - fb[0], fa[1] - fb[1]
                    elif name == "mul" and (fa[0] == 0 or fb[0] == 0):
                        found = fa[0] * fb[1] + fb[0] * fa[1], fa[1] * fb[1]
                    elif name == "shl" and fb[0] == 0 and 0 <= fb[1] < 32:
                        found = fa[0] << fb[1], fa[1] << fb[1]
        memo[value] = found
        return found

    def exact_widening(value: str) -> bool:
        """Whether a 32-bit `value` widened is its affine form computed in 64 bits: the index itself (0 <= i < n < 2^31:
        the walk function's check, so sign and zero extension agree), a sum, difference or product the IR marks as not
        wrapping, or
        such a value with low bits it does not have set (``or disjoint``: the sign bit stays the first's)."""
        if value == index:
            return True
        rhs = defs.get(value, "")
        if re.match(r"(?:add|sub|mul|shl)(?: nuw)? nsw ", rhs):
            return True
        low = re.match(r"or disjoint i32 (%[-\w.$]+), (\d+)(?:,|$)", rhs)
        return bool(low) and exact_widening(low.group(1))

    def pointer(value: str) -> tuple[str, int, int] | None:
        """``value`` as (base, coef, const), or None."""
        if value.startswith("@") or value in outside:
            return value, 0, 0
        rhs = DEBUG_REF.sub("", defs.get(value, "")).strip()
        gep = _GEP.fullmatch(rhs)
        if not gep:
            return None
        ty, base, _, offset = gep.groups()
        size, inner, step = _stride(ty), pointer(base), integer(offset)
        if size is None or inner is None or step is None:
            return None
        return inner[0], inner[1] + step[0] * size, inner[2] + step[1] * size

    found: list[Site] = []
    for line in loop_lines:
        text = DEBUG_REF.sub("", line).strip()
        if not text or text.startswith(("#dbg_", ";")):
            continue
        m = DEF.match(line)
        rhs = DEBUG_REF.sub("", m.group(2)).strip() if m else text
        opcode = _OPCODE.match(rhs)
        name = opcode.group(1) if opcode else ""
        if name in _ACCESS:
            access = _ACCESS[name].fullmatch(rhs)
            at = pointer(access.group(2)) if access else None
            size = _size(access.group(1)) if access else None
            if at is None or size is None:
                return None
            found.append(Site(name == "store", at[0], at[1], at[2], size))
        elif name == "call":
            callee = _CALL.match(rhs)
            if not callee:
                return None
            target = callee.group(1)
            if target.startswith("@__mneme.nvvm.read.ptx.sreg."):
                continue
            if not target.startswith("@llvm.") or _MEMORY_INTRINSIC.match(target):
                return None
        elif name in ("atomicrmw", "cmpxchg", "fence", "va_arg", "alloca", "invoke", "callbr", "landingpad"):
            return None
    for site in found:
        if abs(site.coef) > _MOST_BYTES or abs(site.const) > (1 << 40):
            return None
    return found


def walk_function(header: str, first_block: list[str], found: list[Site], width: list[str], wide: bool) -> list[str]:
    """``K.__mneme_walk``: the launch's step count K where the checks hold (the walk may run), else 0.

    `header`: the flat function's define line up to its extra parameters (renamed by the caller); `first_block`:
    the kernel's first block without its branch (it computes the bound and the bases); `width`: lines defining
    ``%__mneme_s64`` (the grid's width) and ``%__mneme_n64`` (the bound) in 64 bits after it; `wide`:
    a 64-bit index (n up to 2^40; a 32-bit one below 2^31, where its sign and zero extensions are the same)."""
    out = [header, *first_block]
    out += [
        *width,
        # n in [1, 2^40] (2^31 - 1 for a 32-bit index): the ranges below stay within 64 bits; K = ceil(n / S)
        # fits the step's i32
        "  %__mneme_n1 = add i64 %__mneme_n64, -1",
        f"  %__mneme_nfit = icmp ult i64 %__mneme_n1, {(1 << 40) if wide else (1 << 31) - 1}",
        "  %__mneme_sm1 = add i64 %__mneme_s64, -1",
        "  %__mneme_kn = add i64 %__mneme_n64, %__mneme_sm1",
        "  %__mneme_steps = udiv i64 %__mneme_kn, %__mneme_s64",
        "  %__mneme_kfit = icmp ult i64 %__mneme_steps, 2147483648",
        "  %__mneme_ok0 = and i1 %__mneme_nfit, %__mneme_kfit",
    ]
    ok = "%__mneme_ok0"
    bases = sorted({site.base for site in found})
    for j, base in enumerate(bases):
        out.append(f"  %__mneme_base{j} = ptrtoint ptr {base} to i64")
    slot = {base: f"%__mneme_base{j}" for j, base in enumerate(bases)}
    # each site's byte range over i in [0, n): [lo, hi)
    for j, site in enumerate(found):
        start = f"%__mneme_a{j}"
        out += [
            f"  {start} = add i64 {slot[site.base]}, {site.const}",
            f"  %__mneme_span{j} = mul i64 %__mneme_n1, {site.coef}",
            f"  %__mneme_end{j} = add i64 {start}, %__mneme_span{j}",
        ]
        low, high = (start, f"%__mneme_end{j}") if site.coef >= 0 else (f"%__mneme_end{j}", start)
        out += [f"  %__mneme_lo{j} = or i64 {low}, 0", f"  %__mneme_hi{j} = add i64 {high}, {site.size}"]
    checks = 0
    for j, one in enumerate(found):
        for m in range(j, len(found)):
            other = found[m]
            if not (one.store or other.store) or (m == j and not one.store):
                continue
            name = f"%__mneme_c{checks}"
            checks += 1
            apart = []
            if one.coef == other.coef and one.coef != 0:
                wide = max(one.size, other.size)
                apart = [
                    f"  {name}d = sub i64 %__mneme_a{j}, %__mneme_a{m}",
                    f"  {name}n = sub i64 0, {name}d",
                    f"  {name}neg = icmp slt i64 {name}d, 0",
                    f"  {name}abs = select i1 {name}neg, i64 {name}n, i64 {name}d",
                    f"  {name}w = mul i64 %__mneme_s64, {abs(one.coef)}",
                    f"  {name}room = sub i64 {name}w, {wide}",
                    f"  {name}near = icmp sle i64 {name}abs, {name}room",
                ]
            if m == j:
                # a store against itself: its own iterations S apart must not meet (false for a fixed address)
                out += apart
                out.append(f"  {name} = and i1 {ok}, {name + 'near' if apart else 'false'}")
            else:
                out += [
                    f"  {name}b = icmp ule i64 %__mneme_hi{j}, %__mneme_lo{m}",
                    f"  {name}a = icmp ule i64 %__mneme_hi{m}, %__mneme_lo{j}",
                    f"  {name}x = or i1 {name}a, {name}b",
                ]
                if apart:
                    out += [*apart, f"  {name}y = or i1 {name}x, {name}near"]
                else:
                    out.append(f"  {name}y = or i1 {name}x, false")
                out.append(f"  {name} = and i1 {ok}, {name}y")
            ok = name
    out += [f"  %__mneme_walk = select i1 {ok}, i64 %__mneme_steps, i64 0", "  ret i64 %__mneme_walk", "}"]
    return out
