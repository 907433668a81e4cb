"""Passes whose threads past a uniform bound do nothing: their loops over the threads stop at the bound.

A tree reduction's level, ``if (t < k) s[t] += s[t + k]; __syncthreads();``, runs in every thread of the block,
but the threads at or past ``k`` only store the point they resume at, which they already hold. The block step
form's loop over the threads (`block_passes`) then spends most of a level masking them out. Here, for a barrier
point whose interval branches on ``linear thread index < B`` with ``B`` the same in every thread (the divergence
analysis, `divergence`), where every block a thread that fails the test may run (the interval less the test's
edge below the bound, and less the edges away from the test of branches every thread takes alike: thread 0 went
towards it) stores nothing but private values and the block's shared cells (`block_shared`: every thread stores
the same), reads nothing but those, the frame and the context, and stops again at the same barrier point, a
*probe* (a copy of the step function cut at the branch: thread 0's run up to it, writing nothing the pass can
see) computes ``B`` before the pass, and the pass's loops run threads ``[0, max(1, min(B, n)))`` only. Thread 0
always runs: it stores the cells. The skipped threads' frames already hold what they would have stored, so the
next pass, the folds after a flat loop (`block_passes.census`) and the steady stops (`block_passes.steady_exit`)
read the same values; a nested loop folds the skipped threads' point after it (`block_passes.after_bound`).
Exact: the threads skipped are exactly those that would have changed nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mneme.core.errors import IRError
from mneme.plugins.backends.host import divergence, steps
from mneme.plugins.backends.host.irtext import COND_BR, DEF, LABEL_REF, blocks_between

NONE = -1  # the probe's answer where thread 0 does not reach the branch: no bound
# per form of the thread index the branch compares: when it is the linear index (`_index_form`)
SHAPES = {"l": "true", "yx": "%ntz1", "x": "%ntx1d"}
_ICMP = re.compile(r"^icmp (ult|slt|uge|sge|ugt|sgt|ule|sle) i32 (%[-\w.$]+), (%[-\w.$]+|-?\d+)$")
_LOAD_FROM = re.compile(r"= load (?:volatile )?[^,]+, ptr (%[-\w.$]+)")
_STORE_TO = re.compile(r"^\s*store (?:volatile )?\S+ [^,]+, ptr (%[-\w.$]+)")
_CELL = re.compile(r"= getelementptr inbounds i64, ptr %__mneme_cells, i64 \d+$")
_ALLOCA = re.compile(r"= alloca ")
_PURE_CALL = re.compile(
    r"@(?:__mneme\.nvvm\.read\.ptx\.sreg\.\w+(?:\.\w+)?\(|__mneme_ctx\(|llvm\.(?:smin|smax|umin|umax|abs|ctlz|cttz|"
    r"ctpop|fshl|fshr|bswap|bitreverse|assume|lifetime\.start|lifetime\.end)\.)"
)
# L < B as the branch's true side, per predicate with the thread index on the left (on the right: swapped)
_BELOW_LEFT = {"ult": ("ult", True), "slt": ("slt", True), "uge": ("ult", False), "sge": ("slt", False)}
_BELOW_RIGHT = {"ugt": ("ult", True), "sgt": ("slt", True), "ule": ("ult", False), "sle": ("slt", False)}


@dataclass(frozen=True)
class Guard:
    """A barrier point's branch on the thread index against a uniform bound."""

    point: int
    block: str  # the branch's block
    bound: str  # B, an i32 value
    signed: bool  # slt rather than ult
    shape: str  # when the compared index is the linear one: `SHAPES`


def thread_bounds(
    lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]], points: set[int]
) -> dict[int, Guard]:
    """Per barrier point of `points`, the branch its passes may stop their loops at (see the module's docstring)."""
    blocks = {label: [lines[i] for i in idx] for label, idx in blocks_between(lines, start, end)}
    defs = {m.group(1): m.group(2) for code in blocks.values() for m in map(DEF.match, code) if m}
    dispatch = blocks.get("%__mneme_dispatch", [])
    private = {m.group(1) for m in map(DEF.match, dispatch) if m and _ALLOCA.search(m.group(0))}
    cells = {m.group(1) for m in map(DEF.match, dispatch) if m and _CELL.search(m.group(0))}
    # the shared cells are slots to the analysis too: it proves them alike again, and what they hold
    found = divergence.analysis(lines, start, end, {**slots, **{c: (-1, "i64") for c in cells}})
    if found is None:
        return {}
    guards = {}
    for point in sorted(points):
        if point <= 0 or point & (steps.PAUSE_BIT | steps.YIELD_BIT | steps.WARP_BIT):
            continue
        label = found.resume_of.get(point)
        region = _reach(found.inner_succ, [label]) if label else set()
        for block in sorted(region):
            guard = _guard(point, block, blocks, defs, found, region, private, (cells, set(slots)))
            if guard is not None:
                guards[point] = guard
                break
    return guards


def _guard(point, block, blocks, defs, found, region, private, own) -> Guard | None:
    code = blocks[block]
    br = COND_BR.match(code[-1])
    cmp = br and _ICMP.match(defs.get(br.group(1), ""))
    if not cmp:
        return None
    pred, left, right = cmp.groups()
    for index, bound, table in ((left, right, _BELOW_LEFT), (right, left, _BELOW_RIGHT)):
        shape = _index_form(index, defs)
        if shape is None or pred not in table or _per_thread(bound, found):
            continue
        kind, below_true = table[pred]
        below = br.group(2) if below_true else br.group(3)
        if block in _reach(found.inner_succ, found.inner_succ[block]):
            return None  # in a loop within the interval: the bound may change from one iteration to the next
        if below == (br.group(3) if below_true else br.group(2)):
            return None  # both edges to one block
        idle = _idle(block, below, region, found, found.resume_of[point])
        if not all(_quiet(blocks[b], private, *own) for b in idle):
            return None
        if any(found.stop_of.get(b, point) != point for b in idle):
            return None  # an idle thread must stop at this very point again
        return Guard(point, block, bound, kind == "slt", shape)
    return None


def _idle(block: str, below: str, region: set[str], found, start: str) -> set[str]:
    """The blocks a thread at or past the bound may run, given that thread 0 reached the branch `block`: the
    interval without the branch's edge `below`, and without the edges away from `block` of a branch every thread
    takes alike (a uniform condition in a block all threads run or none: where they run it, they go the way thread
    0 went, towards `block`)."""
    to_block = {b for b in region if block in _reach(found.inner_succ, [b])}
    succ = {}
    for b in region:
        targets = list(found.inner_succ.get(b, ()))
        if b == block:
            targets = [t for t in targets if t != below]
        elif b in to_block and b not in found.divergent_blocks and b not in found.deciding:
            targets = [t for t in targets if t in to_block]
        succ[b] = targets
    return _reach(succ, [start])


def _reach(succ: dict[str, list[str]], start: list[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for s in succ.get(todo.pop(), ()):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


def _per_thread(value: str, found) -> bool:
    return not re.fullmatch(r"-?\d+", value) and (value in found.divergent_values or value in divergence.PER_THREAD)


def _quiet(code: list[str], private: set[str], cells: set[str], slots: set[str]) -> bool:
    """Whether `code` writes nothing a pass can see but private slots, the shared cells and the resume point, and
    reads no memory but those, the frame's `slots` and the context: a skipped thread must miss no store, nor a read
    the bounds checks would have refused."""
    for line in code:
        text = line.strip()
        if re.search(r"\b(?:atomic|atomicrmw|cmpxchg|fence|va_arg|volatile)\b", text):
            return False
        store = _STORE_TO.match(line)
        if store:
            if store.group(1) not in private | cells | {"%__mneme_resume_at"}:
                return False
            continue
        load = _LOAD_FROM.search(text)
        if load and load.group(1) not in private | cells | slots and "!invariant.load" not in text:
            return False
        if re.search(r"\bcall\b", text) and not _PURE_CALL.search(text):
            return False
    return True


def _index_form(name: str, defs: dict[str, str]) -> str | None:
    """`SHAPES` key where `name` is the thread index the shape makes linear: ``tid.x`` (1D blocks), ``tid.y *
    ntid.x + tid.x`` (one plane), the linear index; else None."""
    base = _strip(name, defs)
    if base == "%__mneme_linear":
        return "l"
    if base == "%__mneme_tid_x":
        return "x"
    add = re.match(r"^add (?:nuw )?(?:nsw )?i32 (%[-\w.$]+), (%[-\w.$]+)$", defs.get(base, ""))
    if not add:
        return None
    a, b = (_strip(v, defs) for v in add.groups())
    for tx, row in ((a, b), (b, a)):
        mul = re.match(r"^mul (?:nuw )?(?:nsw )?i32 (%[-\w.$]+), (%[-\w.$]+)$", defs.get(row, ""))
        if tx == "%__mneme_tid_x" and mul:
            factors = {_strip(v, defs) for v in mul.groups()}
            ty = "%__mneme_tid_y" in factors
            ntx = any("@__mneme.nvvm.read.ptx.sreg.ntid.x()" in defs.get(f, "") for f in factors)
            if ty and ntx and len(factors) == 2:
                return "yx"
    return None


def _strip(name: str, defs: dict[str, str]) -> str:
    """`name` through ``or X, 0`` copies (the recomputed values' form)."""
    while True:
        m = re.match(r"^or i32 (%[-\w.$]+), 0$", defs.get(name, ""))
        if not m:
            return name
        name = m.group(1)


def probe(lines: list[str], start: int, end: int, name: str, guard: Guard) -> list[str]:
    """``@{name}(same parameters as the step function) -> i64``: thread `guard.point`'s run up to the branch, its bound
    clamped at 0 (signed) or `NONE` where it does not get there. Called with a scratch copy of the cells and inlined:
    what it stores lands in private memory only (`_quiet`)."""
    blocks = blocks_between(lines, start, end)
    header = re.match(r"^define (?:[\w ]+ )?void @[^(]+\((.*)\)[^{]*\{$", lines[start])
    if header is None:
        raise IRError(f"block step form: the step function's header is not understood: {lines[start][:200]}")
    found_succ = {label: LABEL_REF.findall(" ".join(lines[i] for i in idx[-1:])) for label, idx in blocks}
    keep = {label for label, _ in blocks if guard.block in _reach(found_succ, [label])}
    out = [f"define internal i64 @{name}({header.group(1)}) alwaysinline {{"]
    for k, (label, idx) in enumerate(blocks):
        code = [lines[i] for i in idx]
        out.append(f"{label[1:]}:")
        if k == 0 or label in keep and label != guard.block:  # the dispatch block, and the way to the branch
            out += code
            continue
        if label != guard.block:
            out.append(f"  ret i64 {NONE}")
            continue
        out += code[:-1]
        b = guard.bound
        if guard.signed:
            out += [f"  %__mneme_probe.c = call i32 @llvm.smax.i32(i32 {b}, i32 0)"]
            b = "%__mneme_probe.c"
        out += [f"  %__mneme_probe.b = zext i32 {b} to i64", "  ret i64 %__mneme_probe.b"]
    return [*out, "}"]
