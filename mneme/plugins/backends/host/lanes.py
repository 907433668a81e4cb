"""A block's work-items in lockstep groups: the host backend's work-item interleaving.

A kernel without barriers runs as one call per block (`block_loop.entry`): before this pass,
a loop over the threads called the kernel, each thread running to its end before the next began.
A grid-stride thread then runs its whole loop alone, its accesses a grid's width apart (64 KiB for
64 x 256 threads), and every cache line comes back once per thread instead of once
(docs/design/investigations/host-grid-stride-2026-12-06.md).

Here the kernel becomes a function that runs WIDTH consecutive threads (by linear index: x
fastest, then y, then z) in lockstep:

* LLVM's reg2mem pass puts every value that crosses a basic block in an alloca; each alloca
  becomes an array of one element per lane, so a value lives on in its lane's element;
* each lane has a program counter (the number of the block it runs next, -1 when it returned);
* a *sweep* visits the kernel's blocks in reverse post-order and, for each, runs a loop over the
  lanes whose counter names it: the block's instructions for that lane, its terminator stored as
  the lane's next counter. A branch forward runs later in the same sweep, a loop's back edge in
  the next one, so the lanes advance one loop iteration per sweep, together, and consecutive
  lanes touch consecutive addresses one after another;
* the sweeps repeat until every lane has returned.

The lane loops carry ``llvm.loop.parallel_accesses``: the lanes of a group are distinct GPU
threads between two synchronization points, which CUDA lets run in any interleaving (a warp runs
them instruction by instruction), so LLVM's loop vectorizer may run a block for 8 or 16 lanes in
SIMD registers, with masked loads and stores where a lane is elsewhere. Atomics and calls it
cannot widen leave that loop scalar, still in lockstep. The order of one lane's own accesses and
of accesses to one address by one instruction across lanes (lane order) is the scalar loop's.

Applies to the kernels `retarget` runs as a block loop (no barriers, warp operations or fibers;
only the kernel reads the thread index). `to_lanes` returns None for what it does not take
(kernels without a loop, whose thread loop LLVM vectorizes with contiguous accesses; dynamic or
non-entry allocas, inline assembly, indirect branches, exception handling, ``musttail``; more than
`MAX_BLOCKS` blocks or `MAX_LANE_BYTES` of lane arrays); the caller keeps the thread loop then.
"""

from __future__ import annotations

import logging
import re

from mneme.core import envvars
from mneme.plugins.backends.host import accesses, block_loop, retarget, steps
from mneme.plugins.backends.host.irtext import LABEL, UNMARKED, function_span, successors

log = logging.getLogger(__name__)

ENV = "MNEME_HOST_LANES"
#: lanes of a group by default; a build-cache key with `VERSION` (another width is another product)
DEFAULT_WIDTH = 16
VERSION = "1"
DONE = -1
_TOKEN = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[-\w.$]+)')
_ALLOCA = re.compile(r"^\s*(%[-\w.$]+|%\"[^\"]+\") = alloca (.+?)(?:, align (\d+))?(?:, !.*)?$")
_REFUSED = re.compile(
    r"\b(?:asm|indirectbr|callbr|invoke|landingpad|resume|catchswitch|catchpad|cleanuppad|"
    r"blockaddress|musttail|va_arg|llvm\.stacksave|llvm\.stackrestore|llvm\.localescape)\b"
)

_MEMORY = re.compile(r"^\s*(?:%\S+ = )?(?:load|store|atomicrmw|cmpxchg|(?:tail |notail )?call)\b")
_DROPPED = re.compile(r"^\s*(?:#dbg_|call void @llvm\.(?:dbg\.|lifetime\.))")
# What a lane loop may hold and still be marked parallel for the vectorizer: plain loads and stores, and
# calls to intrinsics and to the special-register reads. Volatile and atomic accesses, fences and other
# calls leave the loop unmarked (scalar, in lockstep): LLVM's vectorizer asserts on some of them.
_MARKABLE_CALL = re.compile(r"@(?:llvm\.|__mneme\.nvvm\.read\.ptx\.sreg\.)")
_CALL = re.compile(r'^\s*(?:%\S+ = )?(?:tail |notail )?call\b[^@%]*?([@%](?:"[^"]+"|[-\w.$]+))\(')
MAX_BLOCKS = 512  # basic blocks of the kernel after reg2mem: each becomes a loop the vectorizer looks at
MAX_LANE_BYTES = 1 << 20  # every lane's copy of the kernel's locals, on the stack of the thread running the block
_SCALAR_BYTES = {"half": 2, "bfloat": 2, "float": 4, "double": 8, "fp128": 16, "x86_fp80": 16, "ptr": 8}
_TID_PARAMS = dict(zip(block_loop.TID_PARAMS, ("x", "y", "z", "lin")))


def width() -> int:
    """Lanes per group (``MNEME_HOST_LANES``; 0 or 1 keeps thread after thread)."""
    value = envvars.get_int(ENV, DEFAULT_WIDTH, minimum=0)
    return value if value is not None else DEFAULT_WIDTH


def to_lanes(text: str, kernel_name: str, params, lanes: int, runs: bool = False) -> str | None:
    """Host IR text in block-loop form rewritten to run `lanes` threads in lockstep; None if it does not apply.

    `runs`: the entry runs a run of blocks along x (retarget.FLAG_BLOCK_RUNS), block after block.
    """
    if lanes < 2:
        return None
    lines = text.split("\n")
    span = function_span(lines, kernel_name)
    if span is None or not all(p in lines[span[0]] for p in _TID_PARAMS):
        return None
    if any(_REFUSED.search(line) for line in lines[span[0] + 1 : span[1]]):
        return None
    original = _blocks(lines[span[0] + 1 : span[1]])
    if original is None or not _has_loop(original):
        return None  # each thread runs straight through: the thread loop vectorizes as it is
    demoted = steps._run_passes(text, lambda pm: (pm.add_instruction_namer_pass(), pm.add_register_to_memory_pass()))
    lines = demoted.split("\n")
    span = function_span(lines, kernel_name)
    if span is None:
        return None
    start, end = span
    blocks = _blocks(lines[start + 1 : end])
    if blocks is None:
        return None
    next_md = max((int(m) for m in re.findall(r"!(\d+)\b", demoted)), default=0) + 1
    body, metadata = _lockstep(blocks, lanes, next_md)
    if body is None:
        return None
    header = lines[start]
    tid = ", ".join(f"i32 {p}" for p in _TID_PARAMS)
    if tid not in header:
        return None
    header = header.replace(tid, "i32 %__mneme_lin0, i32 %__mneme_count, i32 %__mneme_ntx, i32 %__mneme_nty")
    out = lines[:start] + [header] + body + lines[end:]
    text = re.sub(r"(?ms)^define void @__mneme_entry\(ptr %args\) \{.*?^\}\n?", "", "\n".join(out))
    return text + "\n" + _entry(kernel_name, params, lanes, runs) + "\n" + "\n".join(metadata) + "\n"


def _blocks(body: list[str]) -> list[tuple[str, list[str]]] | None:
    """(label, instruction lines) per basic block; a multi-line ``switch`` joined into one line."""
    blocks: list[tuple[str, list[str]]] = []
    pending: list[str] = []
    for line in body:
        if pending:
            pending.append(line.strip())
            if line.strip() == "]":
                blocks[-1][1].append(" ".join(pending))
                pending = []
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(";"):
            continue
        m = LABEL.match(line)
        if m:
            blocks.append(("%" + m.group(1), []))
            continue
        if not blocks:
            blocks.append(("%__mneme_first", []))
        if stripped.startswith("switch ") and stripped.endswith("["):
            pending = [line.rstrip()]
            continue
        if _DROPPED.match(line):
            continue  # debug records name values by the old form; lifetime markers may name only allocas
        blocks[-1][1].append(line)
    return blocks if blocks and not pending else None


def _order(blocks: list[tuple[str, list[str]]]) -> list[int]:
    """Block indices in reverse post-order from the entry, then the unreachable ones."""
    index = {label: i for i, (label, _) in enumerate(blocks)}
    seen: set[int] = set()
    post: list[int] = []
    stack = [(0, iter(successors(blocks[0][1][-1])))]
    seen.add(0)
    while stack:
        node, it = stack[-1]
        for label in it:
            nxt = index.get(label)
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(successors(blocks[nxt][1][-1]))))
                break
        else:
            post.append(node)
            stack.pop()
    order = post[::-1]
    return order + [i for i in range(len(blocks)) if i not in seen]


def _bytes(type_text: str) -> int:
    """About how many bytes a value of `type_text` takes (padding ignored; a named type counts 64)."""
    text = type_text.strip()
    if m := re.fullmatch(r"[\[<]\s*(\d+)\s+x\s+(.+)[\]>]", text):
        return int(m.group(1)) * _bytes(m.group(2))
    if text.startswith(("{", "<{")):
        inner = text.strip("<>{} ")
        return sum(_bytes(part) for part in accesses.split_operands(inner)) if inner else 0
    if m := re.fullmatch(r"i(\d+)", text):
        return (int(m.group(1)) + 7) // 8
    return _SCALAR_BYTES.get(text, 64)


def _markable(body: list[str]) -> bool:
    """Whether a block's lane loop may be marked parallel (see `UNMARKED`)."""
    for line in body:
        if UNMARKED.search(line):
            return False
        call = _CALL.match(line)
        if call and not _MARKABLE_CALL.match(call.group(1)):
            return False
    return True


def _has_loop(blocks: list[tuple[str, list[str]]]) -> bool:
    """Whether the control flow has a cycle (a branch back to a block at or before it in reverse post-order)."""
    position = {blocks[i][0]: n for n, i in enumerate(_order(blocks))}
    return any(
        position.get(target, len(blocks)) <= position[label]
        for label, body in blocks
        for target in successors(body[-1])
    )


def _suffixed(token: str, suffix: str) -> str:
    return token[:-1] + suffix + '"' if token.endswith('"') else token + suffix


def _lockstep(blocks: list[tuple[str, list[str]]], lanes: int, md: int) -> tuple[list[str] | None, list[str]]:
    """The lockstep function body and the metadata it references; (None, []) if it cannot be built."""
    allocas: dict[str, tuple[str, int]] = {}  # name -> (element type, alignment)
    for k, (_, body) in enumerate(blocks):
        if not body:
            return None, []
        for line in body:
            m = _ALLOCA.match(line)
            if m:
                type_text = m.group(2)
                count = re.fullmatch(r"(.+?), i\d+ 1", type_text)
                if k != 0 or ("," in type_text and not count):
                    return None, []  # a dynamic alloca, or one outside the entry block
                allocas[m.group(1)] = ((count.group(1) if count else type_text).strip(), int(m.group(3) or 1))
            elif " = phi " in line:
                return None, []
    if len(blocks) > MAX_BLOCKS or lanes * sum(_bytes(t) for t, _ in allocas.values()) > MAX_LANE_BYTES:
        return None, []  # compile time grows with the blocks; the lane arrays live on the worker's stack
    order = _order(blocks)
    number = {blocks[i][0]: n for n, i in enumerate(order)}
    per_lane = set(allocas) | set(_TID_PARAMS)

    out = ["__mneme_lanes:"]
    for name, (type_text, align) in allocas.items():
        out.append(f"  {name} = alloca [{lanes} x {{ [0 x <{align} x i8>], {type_text} }}], align {max(align, 64)}")
    for array in ("pc", "x", "y", "z", "lin"):
        out.append(f"  %__mneme_{array} = alloca [{lanes} x i32], align 64")
    out += [
        "  %__mneme_x0 = urem i32 %__mneme_lin0, %__mneme_ntx",
        "  %__mneme_q0 = udiv i32 %__mneme_lin0, %__mneme_ntx",
        "  %__mneme_y0 = urem i32 %__mneme_q0, %__mneme_nty",
        "  %__mneme_z0 = udiv i32 %__mneme_q0, %__mneme_nty",
        "  br label %__mneme_init",
        # lane by lane, the thread index counts on: x fastest, then y, then z (no division per lane)
        "__mneme_init:",
        "  %__mneme_il = phi i32 [ 0, %__mneme_lanes ], [ %__mneme_il1, %__mneme_init ]",
        "  %__mneme_ix = phi i32 [ %__mneme_x0, %__mneme_lanes ], [ %__mneme_ix1, %__mneme_init ]",
        "  %__mneme_iy = phi i32 [ %__mneme_y0, %__mneme_lanes ], [ %__mneme_iy1, %__mneme_init ]",
        "  %__mneme_iz = phi i32 [ %__mneme_z0, %__mneme_lanes ], [ %__mneme_iz1, %__mneme_init ]",
        "  %__mneme_il64 = zext i32 %__mneme_il to i64",
        "  %__mneme_ilin = add i32 %__mneme_lin0, %__mneme_il",
        "  %__mneme_ion = icmp ult i32 %__mneme_il, %__mneme_count",
        f"  %__mneme_ipc = select i1 %__mneme_ion, i32 0, i32 {DONE}",
        "  %__mneme_xn = add i32 %__mneme_ix, 1",
        "  %__mneme_xw = icmp eq i32 %__mneme_xn, %__mneme_ntx",
        "  %__mneme_ix1 = select i1 %__mneme_xw, i32 0, i32 %__mneme_xn",
        "  %__mneme_yn = zext i1 %__mneme_xw to i32",
        "  %__mneme_ya = add i32 %__mneme_iy, %__mneme_yn",
        "  %__mneme_yw = icmp eq i32 %__mneme_ya, %__mneme_nty",
        "  %__mneme_iy1 = select i1 %__mneme_yw, i32 0, i32 %__mneme_ya",
        "  %__mneme_zn = zext i1 %__mneme_yw to i32",
        "  %__mneme_iz1 = add i32 %__mneme_iz, %__mneme_zn",
    ]
    for array, value in (("pc", "ipc"), ("x", "ix"), ("y", "iy"), ("z", "iz"), ("lin", "ilin")):
        out += [
            f"  %__mneme_ip{array} = getelementptr inbounds [{lanes} x i32], ptr %__mneme_{array}, i64 0, i64 %__mneme_il64",
            f"  store i32 %__mneme_{value}, ptr %__mneme_ip{array}, align 4",
        ]
    out += [
        "  %__mneme_il1 = add nuw nsw i32 %__mneme_il, 1",
        f"  %__mneme_ic = icmp ult i32 %__mneme_il1, {lanes}",
        "  br i1 %__mneme_ic, label %__mneme_init, label %__mneme_sweep",
        "__mneme_sweep:",
        "  br label %__mneme_g0",
    ]
    metadata = []
    props = md
    metadata += [
        f'!{props} = !{{!"llvm.loop.vectorize.enable", i1 true}}',
        f'!{props + 1} = !{{!"llvm.loop.unroll.disable"}}',
    ]
    md += 2
    for n, i in enumerate(order):
        body = blocks[i][1]
        group, loop, parallel = md, md + 1, md + 2
        md += 3
        if _markable(body):
            metadata += [
                f"!{group} = distinct !{{}}",
                f"!{loop} = distinct !{{!{loop}, !{parallel}, !{props}, !{props + 1}}}",
                f'!{parallel} = !{{!"llvm.loop.parallel_accesses", !{group}}}',
            ]
            tag = f", !llvm.access.group !{group}"
        else:
            metadata.append(f"!{loop} = distinct !{{!{loop}, !{props + 1}}}")
            tag = ""
        sfx = f".__mneme{n}"
        lane = f"%__mneme_l{n}"
        previous = f"%__mneme_g{n}"
        after = f"%__mneme_g{n + 1}" if n + 1 < len(order) else "%__mneme_check"
        # no lane at this block: skip its loop (the vectorized body would run with every lane off)
        out += [
            f"__mneme_g{n}:",
            f"  %__mneme_gv{n} = load <{lanes} x i32>, ptr %__mneme_pc, align 64",
            f"  %__mneme_gm{n} = icmp eq <{lanes} x i32> %__mneme_gv{n}, splat (i32 {n})",
            f"  %__mneme_gb{n} = bitcast <{lanes} x i1> %__mneme_gm{n} to i{lanes}",
            f"  %__mneme_ga{n} = icmp ne i{lanes} %__mneme_gb{n}, 0",
            f"  br i1 %__mneme_ga{n}, label %__mneme_h{n}, label {after}",
        ]
        out += [
            f"__mneme_h{n}:",
            f"  {lane} = phi i64 [ 0, {previous} ], [ %__mneme_n{n}, %__mneme_t{n} ]",
            f"  %__mneme_pp{n} = getelementptr inbounds [{lanes} x i32], ptr %__mneme_pc, i64 0, i64 {lane}",
            f"  %__mneme_p{n} = load i32, ptr %__mneme_pp{n}, align 4{tag}",
            f"  %__mneme_on{n} = icmp eq i32 %__mneme_p{n}, {n}",
            f"  br i1 %__mneme_on{n}, label %__mneme_b{n}, label %__mneme_t{n}",
            f"__mneme_b{n}:",
        ]
        used = {t for line in body for t in _TOKEN.findall(line) if t in per_lane}
        for name in sorted(used):
            if name in allocas:
                type_text, align = allocas[name]
                out.append(
                    f"  {_suffixed(name, sfx)} = getelementptr inbounds [{lanes} x {{ [0 x <{align} x i8>], {type_text} }}], "
                    f"ptr {name}, i64 0, i64 {lane}, i32 1"
                )
            else:
                array = _TID_PARAMS[name]
                out += [
                    f"  %__mneme_{array}p{n} = getelementptr inbounds [{lanes} x i32], ptr %__mneme_{array}, i64 0, i64 {lane}",
                    f"  {_suffixed(name, sfx)} = load i32, ptr %__mneme_{array}p{n}, align 4{tag}",
                ]

        def rename(line: str, sfx: str = sfx) -> str:
            return _TOKEN.sub(lambda m: _suffixed(m.group(0), sfx) if m.group(0) in per_lane else m.group(0), line)

        for line in body[:-1]:
            if _ALLOCA.match(line):
                continue
            line = rename(line)
            if tag and _MEMORY.match(line) and "!llvm.access.group" not in line:
                line += tag
            out.append(line)
        nxt = _terminator(rename(body[-1]), number, n)
        if nxt is None:
            return None, []
        if nxt == "unreachable":
            out.append("  unreachable")
        else:
            out += nxt[0]
            out.append(f"  br label %__mneme_t{n}")
        # every lane stores its counter, changed or not: a whole-vector store, which the next
        # block's whole-vector load reads without waiting (a masked store would make it wait)
        incoming = f"[ {nxt[1]}, %__mneme_b{n} ], " if nxt != "unreachable" else ""
        out += [
            f"__mneme_t{n}:",
            f"  %__mneme_np{n} = phi i32 {incoming}[ %__mneme_p{n}, %__mneme_h{n} ]",
            f"  store i32 %__mneme_np{n}, ptr %__mneme_pp{n}, align 4{tag}",
            f"  %__mneme_n{n} = add nuw nsw i64 {lane}, 1",
            f"  %__mneme_c{n} = icmp ult i64 %__mneme_n{n}, {lanes}",
            f"  br i1 %__mneme_c{n}, label %__mneme_h{n}, label {after}, !llvm.loop !{loop}",
        ]
    out += [
        "__mneme_check:",
        f"  %__mneme_cv = load <{lanes} x i32>, ptr %__mneme_pc, align 64",
        f"  %__mneme_cm = icmp ne <{lanes} x i32> %__mneme_cv, splat (i32 {DONE})",
        f"  %__mneme_cb = bitcast <{lanes} x i1> %__mneme_cm to i{lanes}",
        f"  %__mneme_ca = icmp ne i{lanes} %__mneme_cb, 0",
        "  br i1 %__mneme_ca, label %__mneme_sweep, label %__mneme_ret",
        "__mneme_ret:",
        "  ret void",
    ]
    return out, metadata


def _terminator(line: str, number: dict[str, int], n: int) -> tuple[list[str], str] | str | None:
    """(instructions, value) giving a terminator's next block number; "unreachable"; None if not one it takes."""
    text = line.strip()
    text = re.sub(r",\s*!.*$", "", text)  # metadata (!dbg, !llvm.loop, !prof) of the old branch
    if text == "ret void":
        return [], str(DONE)
    if text == "unreachable":
        return "unreachable"
    m = re.fullmatch(r"br label (%\S+)", text)
    if m and m.group(1) in number:
        return [], str(number[m.group(1)])
    m = re.fullmatch(r"br i1 (\S+), label (%\S+), label (%\S+)", text)
    if m and m.group(2) in number and m.group(3) in number:
        name = f"%__mneme_next{n}"
        return [f"  {name} = select i1 {m.group(1)}, i32 {number[m.group(2)]}, i32 {number[m.group(3)]}"], name
    m = re.fullmatch(r"switch (i\d+) (\S+), label (%\S+) \[(.*)\]", text)
    if m and m.group(3) in number:
        ty, value, default = m.group(1), m.group(2), m.group(3)
        cases = re.findall(r"(i\d+) (-?\d+|true|false), label (%\S+)", m.group(4))
        if any(c[2] not in number for c in cases):
            return None
        current, lines = str(number[default]), []
        for k, (_, case, label) in enumerate(cases):
            lines += [
                f"  %__mneme_s{n}.{k} = icmp eq {ty} {value}, {case}",
                f"  %__mneme_v{n}.{k} = select i1 %__mneme_s{n}.{k}, i32 {number[label]}, i32 {current}",
            ]
            current = f"%__mneme_v{n}.{k}"
        return lines, current
    return None


def _entry(kernel_name: str, params, lanes: int, runs: bool) -> str:
    """``__mneme_entry(args)``: the block's threads in groups of `lanes`, in linear order (with `runs`, for each
    block of the run in turn; see `block_loop.entry`)."""
    body, call_args = retarget.unpack_args(params)
    call_args += ["i32 %l0", "i32 %cnt", "i32 %ntx", "i32 %nty", "i32 %bx"]
    lines = [
        f"define void @{retarget.ENTRY}(ptr %args) {{",
        "entry:",
        *body,
        *block_loop.block_extent_loads(),
        "  %nxy = mul i32 %ntx, %nty",
        "  %n = mul i32 %nxy, %ntz",
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_CTAID}",
        "  %bx0 = load i32, ptr %bxp, align 4",
        *(
            [f"  %runp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_RUN}", "  %run = load i32, ptr %runp, align 4"]
            if runs
            else ["  %run = or i32 1, 0"]
        ),
        "  br label %block",
        "block:",
        "  %b = phi i32 [ 0, %entry ], [ %b1, %block.latch ]",
        "  %bx = add i32 %bx0, %b",
        *(["  store i32 %bx, ptr %bxp, align 4"] if runs else []),
        "  br label %loop",
        "loop:",
        "  %l0 = phi i32 [ 0, %block ], [ %l1, %loop ]",
        "  %rem = sub i32 %n, %l0",
        f"  %full = icmp ugt i32 %rem, {lanes}",
        f"  %cnt = select i1 %full, i32 {lanes}, i32 %rem",
        f"  call void {retarget.symbol_ref(kernel_name)}({', '.join(call_args)})",
        f"  %l1 = add nuw i32 %l0, {lanes}",
        "  %more = icmp ult i32 %l1, %n",
        "  br i1 %more, label %loop, label %block.latch",
        "block.latch:",
        "  %b1 = add nuw i32 %b, 1",
        "  %cb = icmp ult i32 %b1, %run",
        "  br i1 %cb, label %block, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)
