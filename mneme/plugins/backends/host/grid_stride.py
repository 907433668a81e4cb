"""Grid-stride loops as plain loops over the index space: the host backend's form for the canonical grid-stride kernel.

A grid-stride kernel (``for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x *
gridDim.x) body(i)``) run thread after thread walks memory a grid's width apart; in lockstep groups
(`lanes`) its accesses become gathers. Here, when the IR proves it legal, a call running the blocks
``[bx0, bx0 + run)`` of a row runs instead, for k = 0, 1, ... and each block b of the run in turn:
``body(i)`` for every i in ``[b * ntid + k * S, (b + 1) * ntid + k * S)`` below n (S = ntid.x *
nctaid.x), one loop with a unit step that LLVM vectorizes with contiguous loads and stores. The
blocks of a run are consecutive indices, so a step k walks ``run * ntid`` elements in a row; the
entry stores each block's index in the context before its part, so a failure names its block.

Why the order is one the GPU allows: the threads of the run execute exactly the iterations they
execute on a GPU (thread g runs i = g + k * S while i < n), each thread's iterations in its own
order (k increasing); only the interleaving of different threads changes, which CUDA leaves open
between synchronization points. What the IR must show (`to_flat` returns None otherwise):

* the kernel's first block computes ``start = ctaid.x * ntid.x + tid.x`` (the block-loop form's
  parameters, the ``ntid.x`` special register; for a 64-bit index, that sum widened and the width a
  product of the widened registers) and branches on ``start < n`` (signed or unsigned, either
  operand order) to the loop or to a block holding only ``ret void``;
* the blocks from there to the loop are straight-line and do nothing but compute values (no store,
  atomic, fence or call other than special-register reads and intrinsics); so is the first block;
* the loop's header has one phi, ``i = [start, preheader], [i + S, latch]``, S being
  ``ntid.x * nctaid.x``; its only exit is the latch's ``i + S < n`` (the same comparison and n) to
  that returning block; ``i + S`` and the comparison are used by nothing else;
* nothing else reads the thread or block index (no other value depends on them), and the module
  has no atomic or volatile access, fence or printf (`block_loop.ORDERED`: orders that results
  could show).

At run time the entry takes this form only for one-dimensional blocks, and a call returns 2 (then
the thread loop runs instead) unless ``n - 1 + S`` fits the index type, so that no thread's index
wraps around as it could on the GPU.
"""

from __future__ import annotations

import logging
import re

from mneme.core import envvars
from mneme.plugins.backends.host import block_loop, grid_stride_walk, lanes, retarget, row_ranges, steps
from mneme.plugins.backends.host.irtext import (
    COND_BR,
    DEBUG_REF,
    DEF,
    LOCAL,
    branch_taken,
    function_span,
    match_paren,
    min_max,
    successors,
    symbol_ref,
)

log = logging.getLogger(__name__)

ENV = "MNEME_HOST_GRID_STRIDE"
#: a build-cache key: another form is another build product (2: a guard in the loop on its index runs its range
#: through a copy, `row_ranges.loop_guard`; 3: claims walked in a row, `grid_stride_walk`; 4: its check keeps a
#: 32-bit index below 2^31, and a plain zext only of the index)
VERSION = "4"
SUFFIX = ".__mneme_flat"
THREADS_ENTRY = retarget.ENTRY + ".threads"
_BINARY = re.compile(r"(add|mul|or)(?: nuw)?(?: nsw)? i32 (%[-\w.$]+|-?\d+), (%[-\w.$]+|-?\d+)$")
_SREG = re.compile(
    r"(?:tail |notail )?call [^@]*i32 @__mneme\.nvvm\.read\.ptx\.sreg\.(ntid|nctaid)\.x\(\)(?:\s*#\d+)?$"
)
_ICMP = re.compile(r"icmp (slt|sgt|ult|ugt) (i32|i64) (%[-\w.$]+), (%[-\w.$]+)$")
_PHI = re.compile(r"phi (i32|i64) \[ (%[-\w.$]+), (%[-\w.$]+) \], \[ (%[-\w.$]+), (%[-\w.$]+) \]$")
_ZEXT = re.compile(r"zext(?: nneg)? i32 (%[-\w.$]+) to i64$")
_BR1 = re.compile(r"^\s*br label (%[-\w.$]+)(,.*)?$")
# what may run once per call instead of once per thread: computing values, reading special registers
_EFFECT = re.compile(r"\b(?:store|atomicrmw|cmpxchg|fence|alloca|va_arg|invoke|callbr|unreachable|ret)\b")
_PURE_CALL = re.compile(r"@(?:__mneme\.nvvm\.read\.ptx\.sreg\.|llvm\.(?!mem|stack|trap|debugtrap|assume))")
_MAX = {("s", "i32"): (1 << 31) - 1, ("u", "i32"): (1 << 32) - 1, ("s", "i64"): (1 << 63) - 1}


def enabled() -> bool:
    """Whether grid-stride loops run as plain loops (``MNEME_HOST_GRID_STRIDE``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def key() -> str:
    """The form's part of the build key: its version, and whether independent loops are walked in a row."""
    if not enabled():
        return "off"
    return VERSION if grid_stride_walk.enabled() else VERSION + "-ordered"


def to_flat(text: str, kernel_name: str, kernel_params, runs: bool) -> str | None:
    """Host IR text in block-loop form with the flat form of `kernel_name` added; None if it does not apply."""
    if any(block_loop.ORDERED.search(line) for line in text.split("\n") if not line.startswith("declare ")):
        return None
    named = steps._run_passes(text, lambda pm: pm.add_instruction_namer_pass())
    lines = named.split("\n")
    span = function_span(lines, kernel_name)
    if span is None:
        return None
    start, end = span
    header = lines[start]
    if not all(p in header for p in block_loop.TID_PARAMS):
        return None
    blocks = lanes._blocks(lines[start + 1 : end])
    if blocks is None or blocks[0][0] == "%__mneme_first":
        return None
    params = set(LOCAL.findall(header[header.find(symbol_ref(kernel_name) + "(") :]))
    flat_body = _flat_body(blocks, (lines, kernel_name), params)
    if flat_body is None:
        return None
    body, walk = flat_body
    flat = _flat_header(header, kernel_name)
    if flat is None:
        return None
    out = "\n".join(lines)
    entry = re.compile(r"(?m)^define void @" + re.escape(retarget.ENTRY) + r"\(ptr %args\) \{")
    if not entry.search(out):
        return None
    out = entry.sub(f"define internal void @{THREADS_ENTRY}(ptr %args) {{", out, count=1)
    function = "\n".join([flat, *body, "}"])
    if walk is not None:
        walker = _flat_header(header, kernel_name, grid_stride_walk.SUFFIX, "i64")
        function += "\n" + "\n".join(grid_stride_walk.walk_function(walker, *walk))
    return out + "\n" + function + "\n" + _entry(kernel_name, kernel_params, runs, walk is not None) + "\n"


def _flat_header(header: str, kernel_name: str, suffix: str = SUFFIX, returns: str = "i32") -> str | None:
    ref = symbol_ref(kernel_name)
    at = header.find(ref + "(")
    if at < 0:
        return None
    open_index = at + len(ref)
    close = match_paren(header, open_index)
    rest = re.sub(r" comdat(\(\$[^)]*\))?", "", DEBUG_REF.sub("", header[close + 1 :]))
    rest = rest.replace(" local_unnamed_addr", "")
    extra = "i32 %__mneme_k, i32 %__mneme_bx0, i32 %__mneme_run"
    inner = header[open_index + 1 : close]
    return f"define internal {returns} {symbol_ref(kernel_name + suffix)}({inner}, {extra}){rest}"


def _operands(text: str) -> list[str]:
    return lanes._TOKEN.findall(text)


def _flat_body(blocks: list[tuple[str, list[str]]], kernel: tuple[list[str], str], params: set[str]):
    """The flat function's body lines and what the walk function needs (None where the loop's iterations are not
    shown independent: `grid_stride_walk`), or None where the kernel is not the canonical grid-stride loop.

    `kernel`: (the module's lines, the kernel's name), where a guard at the top of the loop's body on its index may
    run as a range (`row_ranges.loop_guard`); `params`: the kernel's parameter names."""
    defs: dict[str, str] = {}  # value -> the right-hand side of its definition
    where: dict[str, str] = {}  # value -> label of its block
    uses: dict[str, int] = {}
    labels = {label for label, _ in blocks}
    for label, body in blocks:
        for line in body:
            m = DEF.match(line)
            if m:
                defs[m.group(1)] = DEBUG_REF.sub("", m.group(2)).strip()
                where[m.group(1)] = label
            for token in _operands(line[m.end(1) :] if m else line):
                if token not in labels:
                    uses[token] = uses.get(token, 0) + 1
    by_label = dict(blocks)
    entry_label, entry_body = blocks[0]
    guard_br = COND_BR.match(entry_body[-1])
    if not guard_br:
        return None
    guard, taken, exit_label = guard_br.group(1), guard_br.group(2), guard_br.group(3)
    returning = by_label.get(exit_label, [])
    if len(returning) != 1 or re.sub(r",\s*!.*$", "", returning[0]).strip() != "ret void":
        return None
    cmp = _ICMP.fullmatch(defs.get(guard, ""))
    if not cmp:
        return None
    pred, ity, a, b = cmp.groups()
    start, bound = (a, b) if pred in ("slt", "ult") else (b, a)  # start < bound, either way written
    signed = pred[0]
    if (signed, ity) not in _MAX and ity != "i64":
        return None
    # a 64-bit index (size_t i = ...) starts from the 32-bit sum, widened
    start32 = (_ZEXT.fullmatch(defs.get(start, "")) or [None, None])[1] if ity == "i64" else start
    ntid = _start_ntid(start32, defs) if start32 else None
    if ntid is None:
        return None
    # the straight-line blocks from the guard to the loop
    chain: list[str] = []
    label = taken
    while True:
        body = by_label.get(label)
        if body is None or label == entry_label:
            return None
        if any(" = phi " in line for line in body):
            break  # the loop's header
        jump = _BR1.match(body[-1])
        if not jump or label in chain:
            return None
        chain.append(label)
        label = jump.group(1)
    loop_header = label
    preheader = chain[-1] if chain else entry_label
    for lbl in [entry_label, *chain]:
        for line in by_label[lbl][:-1]:
            if _EFFECT.search(line) or (" call " in line and not _PURE_CALL.search(line)) or " = phi " in line:
                return None
    phis = [line for line in by_label[loop_header] if " = phi " in line]
    if len(phis) != 1:
        return None
    m = DEF.match(phis[0])
    phi = _PHI.fullmatch(defs[m.group(1)]) if m else None
    if not phi or phi.group(1) != ity:
        return None
    index = m.group(1)
    incoming = {phi.group(3): phi.group(2), phi.group(5): phi.group(4)}
    if incoming.get(preheader) != start or len(incoming) != 2:
        return None
    latch = next(lbl for lbl in incoming if lbl != preheader)
    following = incoming[latch]
    step = re.fullmatch(rf"add(?: nuw)?(?: nsw)? {ity} (%[-\w.$]+), (%[-\w.$]+)", defs.get(following, ""))
    if not step or index not in step.groups() or where.get(following) != latch:
        return None
    stride = step.group(2) if step.group(1) == index else step.group(1)
    if not _is_grid_width(stride, defs, ity):
        return None
    latch_br = COND_BR.match(by_label.get(latch, [""])[-1])
    if not latch_br or {latch_br.group(2), latch_br.group(3)} != {loop_header, exit_label}:
        return None
    cond = latch_br.group(1)
    again = _ICMP.fullmatch(defs.get(cond, ""))
    if not again or where.get(cond) != latch:
        return None
    ap, aty, aa, ab = again.groups()
    if aty != ity or ap[0] != signed or ((aa, ab) if ap in ("slt", "ult") else (ab, aa)) != (following, bound):
        return None
    if latch_br.group(2) != loop_header:
        return None  # the back edge is taken while i + S < n
    if uses.get(following) != 2 or uses.get(cond) != 1 or uses.get(guard) != 1:
        return None
    loop = _loop_blocks(blocks, loop_header, latch)
    if entry_label in loop or set(chain) & set(loop):
        return None
    for lbl in loop:
        for succ in successors(by_label[lbl][-1]):
            if succ not in loop and not (lbl == latch and succ == exit_label):
                return None  # another way out of the loop
        if re.match(r"^\s*(?:ret|unreachable|resume)\b", by_label[lbl][-1]):
            return None
    if bound in defs and where.get(bound) != entry_label:
        return None  # the bound is computed after the guard; it must be known before it
    if not _only_start_reads_indices(blocks, defs, {start, start32, guard}, index):
        return None
    found = {"bound": bound, "ntid": ntid, "index": index, "following": following, "cond": cond}
    guard = None
    if block_loop.guard_split() and ity == "i32" and loop_header != latch:
        outside = {v for v, lbl in where.items() if lbl not in loop}
        guard = row_ranges.loop_guard(*kernel, loop_header, latch, index, outside, ".__mneme_r")
    body = _emit(by_label, entry_label, chain, loop, loop_header, latch, exit_label, found, (signed, ity), guard)
    walk = None
    if grid_stride_walk.enabled():
        first = {v for v, lbl in where.items() if lbl == entry_label}
        loop_lines = [line for lbl in loop for line in by_label[lbl]]
        sites = grid_stride_walk.sites(loop_lines, defs, index, first | params)
        if sites is not None:
            first_block = [
                DEBUG_REF.sub("", line) for line in by_label[entry_label][:-1] if not re.match(r"\s*#dbg_", line)
            ]
            walk = (first_block, sites, _width_and_bound(ntid, bound, (signed, ity)), ity == "i64")
    return body, walk


def _width_and_bound(ntid: str, bound: str, kind: tuple[str, str]) -> list[str]:
    """Lines defining ``%__mneme_s64``, the grid's width ``ntid.x * nctaid.x``, and ``%__mneme_n64``, the loop's
    bound, both in 64 bits (the bound widened as the index's signedness says)."""
    signed, ity = kind
    if ity == "i32":
        bound64 = f"  %__mneme_n64 = {'sext' if signed == 's' else 'zext'} i32 {bound} to i64"
    else:
        bound64 = f"  %__mneme_n64 = or i64 {bound}, 0"
    return [
        "  %__mneme_nc = call i32 @__mneme.nvvm.read.ptx.sreg.nctaid.x()",
        f"  %__mneme_nt64 = zext i32 {ntid} to i64",
        "  %__mneme_nc64 = zext i32 %__mneme_nc to i64",
        "  %__mneme_s64 = mul i64 %__mneme_nt64, %__mneme_nc64",
        bound64,
    ]


def _value(name: str, defs: dict[str, str]) -> str:
    """`name` seen through ``or x, 0`` (the block-loop form's way of writing a parameter)."""
    m = re.fullmatch(r"or i32 (%[-\w.$]+), 0", defs.get(name, ""))
    return m.group(1) if m else name


def _start_ntid(start: str, defs: dict[str, str]) -> str | None:
    """The ``ntid.x`` value if `start` is ``ctaid.x * ntid.x + tid.x``; None otherwise."""
    add = _BINARY.fullmatch(defs.get(start, ""))
    if not add or add.group(1) != "add":
        return None
    tid, ctaid = block_loop.TID_PARAMS[0], block_loop.CTAID_PARAM
    for x, other in ((add.group(2), add.group(3)), (add.group(3), add.group(2))):
        if _value(x, defs) != tid:
            continue
        mul = _BINARY.fullmatch(defs.get(other, ""))
        if not mul or mul.group(1) != "mul":
            return None
        for c, n in ((mul.group(2), mul.group(3)), (mul.group(3), mul.group(2))):
            sreg = _SREG.fullmatch(defs.get(n, ""))
            if _value(c, defs) == ctaid and sreg and sreg.group(1) == "ntid":
                return n
    return None


def _is_grid_width(stride: str, defs: dict[str, str], ity: str = "i32") -> bool:
    """Whether `stride` is ``ntid.x * nctaid.x`` (for a 64-bit index: of the widened registers, or widened)."""
    if ity == "i64":
        widened = _ZEXT.fullmatch(defs.get(stride, ""))
        if widened:
            return _is_grid_width(widened.group(1), defs)
        mul = re.fullmatch(r"mul(?: nuw)?(?: nsw)? i64 (%[-\w.$]+), (%[-\w.$]+)$", defs.get(stride, ""))
        if not mul:
            return False
        narrow = [_ZEXT.fullmatch(defs.get(v, "")) for v in mul.groups()]
        if not all(narrow):
            return False
        kinds = sorted(
            _SREG.fullmatch(defs.get(n.group(1), "")).group(1)
            for n in narrow
            if _SREG.fullmatch(defs.get(n.group(1), ""))
        )
        return kinds == ["nctaid", "ntid"]
    mul = _BINARY.fullmatch(defs.get(stride, ""))
    if not mul or mul.group(1) != "mul":
        return False
    kinds = sorted(
        _SREG.fullmatch(defs.get(v, "")).group(1) for v in mul.group(2, 3) if _SREG.fullmatch(defs.get(v, ""))
    )
    return kinds == ["nctaid", "ntid"]


def _loop_blocks(blocks, header: str, latch: str) -> list[str]:
    """The labels of the loop (the blocks reaching the latch without passing the header), in function order."""
    preds: dict[str, set[str]] = {}
    for label, body in blocks:
        for succ in successors(body[-1]):
            preds.setdefault(succ, set()).add(label)
    inside, todo = {header, latch}, [latch] if latch != header else []
    while todo:
        for p in preds.get(todo.pop(), ()):
            if p not in inside:
                inside.add(p)
                todo.append(p)
    return [label for label, _ in blocks if label in inside]


def _only_start_reads_indices(blocks, defs: dict[str, str], allowed: set[str], index: str) -> bool:
    """Whether the thread and block indices reach nothing but the start (`allowed`: it, widened, its guard)
    and the loop's phi."""
    tainted = set(block_loop.TID_PARAMS) | {block_loop.CTAID_PARAM}
    guard = next(v for v in allowed if defs.get(v, "").startswith("icmp "))
    changed = True
    while changed:
        changed = False
        for _, body in blocks:
            for line in body:
                m = DEF.match(line)
                if m and m.group(1) == index:
                    continue  # the phi: its start becomes the call's range
                operands = _operands(line[m.end(1) :] if m else line)
                if not tainted.intersection(operands):
                    continue
                if not m:
                    if (br := COND_BR.match(line)) and br.group(1) == guard:
                        continue
                    return False  # a store, call or branch reads an index
                if m.group(1) not in tainted:
                    tainted.add(m.group(1))
                    changed = True
    indices = set(block_loop.TID_PARAMS) | {block_loop.CTAID_PARAM}
    wrappers = {v for v in tainted - indices if _value(v, defs) in indices}
    products = {v for v in tainted if re.fullmatch(r"mul(?: nuw)?(?: nsw)? i32 .*", defs.get(v, ""))}
    return tainted - indices - wrappers - allowed <= products and len(products & tainted) <= 1


def _emit(by_label, entry_label, chain, loop, header, latch, exit_label, found, kind, guard=None) -> list[str]:
    """The flat function's body: the first block and the checks, the chain, the range, the loop with a unit step.

    `kind`: ("s" or "u", the index type). The range is computed in 64 bits; a 32-bit index's bound is widened.
    `guard` (`row_ranges.LoopGuard`): the range splits in three, each its own copy of the loop: the indices below
    the guard's range, those within it (a copy whose guard branch is taken: no masked loads and stores), those above
    it. Any order of the indices of one step would do (each is another thread's); this one keeps theirs.
    """
    signed, ity = kind
    bound, ntid = found["bound"], found["ntid"]
    preheader = chain[-1] if chain else entry_label
    less = "slt" if signed == "s" else "ult"
    out = [entry_label[1:] + ":", *by_label[entry_label][:-1]]
    if ity == "i32":
        limit = _MAX[kind] + 1
        # no index wraps: the largest any thread computes, n - 1 + S, fits (where a thread runs at all)
        fits = [
            "  %__mneme_top = add i64 %__mneme_n64, %__mneme_s64",
            f"  %__mneme_fits = icmp sle i64 %__mneme_top, {limit}",
            f"  %__mneme_sfit = icmp slt i64 %__mneme_s64, {limit}",
        ]
        less = "slt"  # the widened bound and the range compare as signed 64-bit values
    else:
        top = _MAX[kind] if signed == "s" else -1  # INT64_MAX, or UINT64_MAX written as -1
        fits = [
            f"  %__mneme_room = sub i64 {top}, %__mneme_s64",
            f"  %__mneme_fits = icmp {'sle' if signed == 's' else 'ule'} i64 %__mneme_n64, %__mneme_room",
            "  %__mneme_sfit = or i1 true, false",
        ]
    out += [
        *_width_and_bound(ntid, bound, kind),
        "  %__mneme_k64 = zext i32 %__mneme_k to i64",
        "  %__mneme_b64 = zext i32 %__mneme_bx0 to i64",
        "  %__mneme_r64 = zext i32 %__mneme_run to i64",
        "  %__mneme_g0 = mul i64 %__mneme_b64, %__mneme_nt64",
        "  %__mneme_ks = mul i64 %__mneme_k64, %__mneme_s64",
        "  %__mneme_lo = add i64 %__mneme_g0, %__mneme_ks",
        "  %__mneme_w = mul i64 %__mneme_r64, %__mneme_nt64",
        "  %__mneme_hi = add i64 %__mneme_lo, %__mneme_w",
        *fits,
        f"  %__mneme_none = icmp {'slt' if signed == 's' else 'ult'} i64 %__mneme_n64, 1",
        "  %__mneme_ok0 = or i1 %__mneme_fits, %__mneme_none",
        "  %__mneme_ok = and i1 %__mneme_ok0, %__mneme_sfit",
        "  br i1 %__mneme_ok, label %__mneme_fguard, label %__mneme_fno",
        "__mneme_fno:",
        "  ret i32 2",
        "__mneme_fguard:",
        f"  %__mneme_go = icmp {less} i64 %__mneme_lo, %__mneme_n64",
        f"  br i1 %__mneme_go, label {chain[0] if chain else '%__mneme_frange'}, label %__mneme_fdone",
        "__mneme_fdone:",
        "  ret i32 0",
    ]
    for lbl in chain:
        body = by_label[lbl]
        out += [lbl[1:] + ":", *body[:-1]]
        out.append("  br label %__mneme_frange" if lbl == preheader else body[-1])
    narrow = ity == "i32"
    out += [
        "__mneme_frange:",
        "  %__mneme_loi = " + ("trunc i64 %__mneme_lo to i32" if narrow else "or i64 %__mneme_lo, 0"),
        f"  %__mneme_short = icmp {less} i64 %__mneme_hi, %__mneme_n64",
        "  %__mneme_hic = select i1 %__mneme_short, i64 %__mneme_hi, i64 %__mneme_n64",
        "  %__mneme_hii = " + ("trunc i64 %__mneme_hic to i32" if narrow else "or i64 %__mneme_hic, 0"),
    ]
    if guard is None:
        out.append(f"  br label {header}")
        ends = (header, latch, exit_label, "%__mneme_fmore")
        out += _loop_copy(by_label, loop, ends, found, kind, "", "%__mneme_frange", "%__mneme_loi", "%__mneme_hii")
        out += ["__mneme_fmore:", "  ret i32 1"]
        return [DEBUG_REF.sub("", line) for line in out if not re.match(r"\s*#dbg_", line)]
    # the guard's range within [lo, hi): [ga, gb); below it copy 0, within it copy 1 (the guard taken), above copy 2
    out += [
        *guard.lines,
        *min_max("%__mneme_gl1", "sgt", guard.lo, "%__mneme_lo"),
        *min_max("%__mneme_gl", "slt", "%__mneme_gl1", "%__mneme_hic"),
        *min_max("%__mneme_gh1", "slt", guard.hi, "%__mneme_hic"),
        *min_max("%__mneme_gh", "sgt", "%__mneme_gh1", "%__mneme_gl"),
        "  %__mneme_ga = trunc i64 %__mneme_gl to i32",
        "  %__mneme_gb = trunc i64 %__mneme_gh to i32",
        "  br label %__mneme_seg0",
    ]
    segments = [("%__mneme_loi", "%__mneme_ga"), ("%__mneme_ga", "%__mneme_gb"), ("%__mneme_gb", "%__mneme_hii")]
    for k, (first, stop) in enumerate(segments):
        after = f"%__mneme_seg{k + 1}" if k < 2 else "%__mneme_fmore"
        out += [
            f"__mneme_seg{k}:",
            f"  %__mneme_any{k} = icmp ult i32 {first}, {stop}",
            f"  br i1 %__mneme_any{k}, label {header}.__mneme_s{k}, label {after}",
        ]
        ends = (header, latch, exit_label, after)
        taken = guard.taken if k == 1 else None
        out += _loop_copy(by_label, loop, ends, found, kind, f".__mneme_s{k}", f"%__mneme_seg{k}", first, stop, taken)
    out += ["__mneme_fmore:", "  ret i32 1"]
    return [DEBUG_REF.sub("", line) for line in out if not re.match(r"\s*#dbg_", line)]


def _loop_copy(by_label, loop, ends, found, kind, suffix, pre, first, stop, taken=None) -> list[str]:
    """One copy of the loop over [`first`, `stop`) with a unit step, entered from block `pre`: its values and labels
    named with `suffix`. `ends`: (header, latch, the kernel's exit label, the label the copy leaves to); `taken`: the
    side the copy's header branch takes (the guard's copy), or None."""
    header, latch, exit_label, exit_to = ends
    signed, ity = kind
    index, following, cond = found["index"], found["following"], found["cond"]
    local = set(loop) | {m.group(1) for lbl in loop for line in by_label[lbl] for m in [DEF.match(line)] if m}

    def rename(line: str) -> str:
        return lanes._TOKEN.sub(lambda t: t.group(0) + suffix if t.group(0) in local else t.group(0), line)

    wraps = "nuw nsw" if signed == "s" else "nuw"
    out = []
    for lbl in loop:
        out.append(lbl[1:] + suffix + ":")
        for line in by_label[lbl]:
            m = DEF.match(line)
            name = m.group(1) if m else None
            if name == index:
                line = f"  {index} = phi {ity} [ {first}, {pre} ], [ {following}, {latch} ]"
            elif name == following:
                line = f"  {following} = add {wraps} {ity} {index}, 1"
            elif name == cond:
                line = f"  {cond} = icmp ne {ity} {following}, {stop}"
            elif lbl == latch and line is by_label[lbl][-1]:
                # the copy's loop gets no loop metadata of its own: an id shared with the kernel's loop
                line = re.sub(r",\s*!llvm\.loop ![0-9]+", "", line)
                out.append(rename(line).replace(f"label {exit_label}", f"label {exit_to}"))
                continue
            elif taken is not None and lbl == header and line is by_label[lbl][-1]:
                line = branch_taken(line, taken)
            out.append(rename(line))
    return out


def _entry(kernel_name: str, params, runs: bool, walk: bool) -> str:
    """``__mneme_entry(args)``: the flat form for one-dimensional blocks, the thread loop otherwise.

    With `walk` (`grid_stride_walk`), a launch whose checks hold runs the claimed blocks' contiguous pieces
    instead of their blocks step after step."""
    body, kernel_args = retarget.unpack_args(params)
    call_args = [*kernel_args, "i32 0", "i32 0", "i32 0", "i32 0", "i32 %bx", "i32 %k", "i32 %bx", "i32 1"]
    flat = symbol_ref(kernel_name + SUFFIX)
    if walk:
        ask = [*kernel_args, *["i32 0"] * 8]
        piece = [*kernel_args, "i32 0", "i32 0", "i32 0", "i32 0", "i32 %wb", "i32 %wk", "i32 %wb", "i32 1"]
        order = [
            f"  %steps = call i64 {symbol_ref(kernel_name + grid_stride_walk.SUFFIX)}({', '.join(ask)})",
            "  %walking = icmp ne i64 %steps, 0",
            "  br i1 %walking, label %wstart, label %range",
            # block v of the row runs pieces [v * K, (v + 1) * K); piece p is block p mod nctaid.x at step
            # p / nctaid.x, so a claim of consecutive blocks is one range of indices, walked in order
            "wstart:",
            "  %wnc = call i32 @__mneme.nvvm.read.ptx.sreg.nctaid.x()",
            "  %wnc64 = zext i32 %wnc to i64",
            "  %wbx64 = zext i32 %bx0 to i64",
            "  %wrun64 = zext i32 %run to i64",
            "  %wp0 = mul i64 %wbx64, %steps",
            "  %wv1 = add i64 %wbx64, %wrun64",
            "  %wp1 = mul i64 %wv1, %steps",
            "  %wk0w = udiv i64 %wp0, %wnc64",
            "  %wb0w = urem i64 %wp0, %wnc64",
            "  %wk0 = trunc i64 %wk0w to i32",
            "  %wb0 = trunc i64 %wb0w to i32",
            "  br label %wpiece",
            "wpiece:",
            "  %wp = phi i64 [ %wp0, %wstart ], [ %wpn, %wnext ]",
            "  %wk = phi i32 [ %wk0, %wstart ], [ %wkn, %wnext ]",
            "  %wb = phi i32 [ %wb0, %wstart ], [ %wbn, %wnext ]",
            "  store i32 %wb, ptr %bxp, align 4",
            f"  %wst = call i32 {flat}({', '.join(piece)})",
            # 0: this piece and every later one lie past n; 2: an index could wrap (the first call)
            "  switch i32 %wst, label %threads [ i32 0, label %done i32 1, label %wnext ]",
            "wnext:",
            "  %wpn = add nuw i64 %wp, 1",
            "  %wb1 = add nuw i32 %wb, 1",
            "  %wrow = icmp eq i32 %wb1, %wnc",
            "  %wbn = select i1 %wrow, i32 0, i32 %wb1",
            "  %wk1 = add nuw i32 %wk, 1",
            "  %wkn = select i1 %wrow, i32 %wk1, i32 %wk",
            "  %wmore = icmp ult i64 %wpn, %wp1",
            "  br i1 %wmore, label %wpiece, label %done",
        ]
    else:
        order = ["  br label %range"]
    ntid = block_loop.CTX_NTID
    lines = [
        f"define void @{retarget.ENTRY}(ptr %args) {{",
        "entry:",
        *body,
        "  %ctx = call ptr @__mneme_ctx()",
        f"  %ntyp = getelementptr i8, ptr %ctx, i64 {ntid + 4}",
        f"  %ntzp = getelementptr i8, ptr %ctx, i64 {ntid + 8}",
        "  %nty = load i32, ptr %ntyp, align 4",
        "  %ntz = load i32, ptr %ntzp, align 4",
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_CTAID}",
        "  %bx0 = load i32, ptr %bxp, align 4",
        *(
            [f"  %runp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_RUN}", "  %run = load i32, ptr %runp, align 4"]
            if runs
            else ["  %run = or i32 1, 0"]
        ),
        "  %nyz = or i32 %nty, %ntz",
        "  %flat = icmp eq i32 %nyz, 1",
        "  br i1 %flat, label %order, label %threads",
        "order:",
        *order,
        "range:",
        "  %k = phi i32 [ 0, %order ], [ %k1, %knext ]",
        "  br label %blk",
        # a call per block of the run, in order (consecutive blocks: consecutive indices), its index in the
        # context first: a failure names the block it happened in
        "blk:",
        "  %b = phi i32 [ 0, %range ], [ %b1, %bnext ]",
        "  %bx = add i32 %bx0, %b",
        "  store i32 %bx, ptr %bxp, align 4",
        f"  %st = call i32 {flat}({', '.join(call_args)})",
        # 0: this block's indices at step k are past n, so are all later ones; 2: an index could wrap (first call)
        "  switch i32 %st, label %threads [ i32 0, label %done i32 1, label %bnext ]",
        "bnext:",
        "  %b1 = add nuw i32 %b, 1",
        "  %cb = icmp ult i32 %b1, %run",
        "  br i1 %cb, label %blk, label %knext",
        "knext:",
        "  %k1 = add nuw i32 %k, 1",
        "  br label %range",
        "threads:",
        "  store i32 %bx0, ptr %bxp, align 4",  # the claim's first block: a call returning 2 may have named another
        f"  call void @{THREADS_ENTRY}(ptr %args)",
        "  ret void",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)
