"""Kernels with barriers and warp operations as step functions: one call runs one thread up to
its next barrier or warp point.

The runtime runs a block as passes over its threads (a warp passes a warp point when all its
lanes reached it, the block a barrier likewise), with no stack per thread: several times cheaper
than a fiber switch at every barrier. Shuffles, votes and ``__syncthreads_count/and/or`` become
"put my value; point; get the result".

How: every barrier becomes the end of a basic block; LLVM's reg2mem pass puts every value that
crosses blocks in an alloca; the allocas that a barrier can separate from their uses move to a
per-thread frame (``ptr %__mneme_frame``); a barrier stores its resume point in the frame's first
word and returns, ``ret`` stores -1 (done), and a dispatch block jumps to the resume point.

Applies when every barrier, shuffle (``shfl.sync`` without the predicate output), vote and
barrier reduction is called from the kernel itself (after inlining the functions that reach
them); anything else (synchronization in a ``noinline`` function, ``activemask``, dynamic
allocas) keeps fibers: `to_steps` returns None then.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable

import llvmlite.binding as llvm

from mneme.plugins.backends.host import intervals, intrinsics, retarget
from mneme.plugins.backends.host.irtext import LABEL, LABEL_REF, LOCAL, function_span
from mneme.plugins.backends.host.machine import target_machine

log = logging.getLogger(__name__)

FLAG_STEPS = 4
POINT = "__mneme_barrier_point"
_OTHER_SYNC = (
    "@__mneme_barrier_red(",
    "@__mneme_warp_sync(",
    "@__mneme_shfl(",
    "@__mneme_vote(",
    "@__mneme_activemask(",
    "@__mneme_wave_read(",
    "@__mneme_wave_ballot(",
)

WARP_POINT = "__mneme_warp_point"
WARP_BIT = 1 << 30  # resume ids of warp points: the runtime lets a warp, not the block, pass them
PAUSE_POINT = "__mneme_pause_point"
PAUSE_BIT = 1 << 29  # resume ids of pauses (`intervals.pause_before_tails`): only the block step form makes them
YIELD_POINT = "__mneme_yield_point"
YIELD_BIT = 1 << 28  # resume ids of yields at loop headers (`intervals.yield_at_loops`): block step form only
_POINTS = (f"@{POINT}()", f"@{WARP_POINT}()", f"@{PAUSE_POINT}()", f"@{YIELD_POINT}()")
_ALLOCA = re.compile(r"^\s*(%[-\w.$]+) = alloca (.+?)(?:, align (\d+))?(?:, !.*)?$")


def _defined_functions(lines: list[str]) -> dict[str, tuple[int, int]]:
    spans = {}
    for i, line in enumerate(lines):
        if line.startswith("define "):
            m = re.search(r"@([-\w.$]+|\"[^\"]+\")\(", line)
            if m:
                spans[m.group(1).strip('"')] = (i, lines.index("}", i))
    return spans


_SHFL_IMPL = re.compile(r"__mneme\.nvvm\.shfl\.sync\.(idx|up|down|bfly)\.(i32|f32)")
_SHFL_MODES = {"idx": 0, "up": 1, "down": 2, "bfly": 3}
_VOTE_IMPL = re.compile(r"__mneme\.nvvm\.vote\.(all|any|uni|ballot)(\.sync)?")
_VOTE_MODES = {"all": 0, "any": 1, "uni": 2, "ballot": 3}
_RED_IMPL = re.compile(r"__mneme\.nvvm\.barrier(?:0\.|\.cta\.red\.)(popc|and|or)(\..*)?")
_RED_OPS = {"popc": 0, "and": 1, "or": 2}


def _sync_functions(lines: list[str], spans: dict[str, tuple[int, int]]) -> dict[str, str] | None:
    """The synchronizing implementations by kind ("barrier", "shfl", "warp"); None if another
    function synchronizes (votes, barrier reductions, ...)."""
    found = {}
    for name, (start, end) in spans.items():
        body = "\n".join(lines[start + 1 : end])
        if "@__mneme_barrier()" in body and name.startswith(("__mneme.nvvm.barrier", "__mneme.amdgcn.s.barrier")):
            found[name] = "barrier"
        elif "@__mneme_shfl(" in body and _SHFL_IMPL.fullmatch(name):
            found[name] = "shfl"
        elif "@__mneme_warp_sync(" in body and name == "__mneme.nvvm.bar.warp.sync":
            found[name] = "warp"
        elif "@__mneme_vote(" in body and _VOTE_IMPL.fullmatch(name):
            found[name] = "vote"
        elif "@__mneme_barrier_red(" in body and _RED_IMPL.fullmatch(name):
            found[name] = "red"
        elif any(s in body for s in (*_OTHER_SYNC, "@__mneme_barrier()")):
            return None
    return found


def _run_passes(text: str, add) -> str:
    module = llvm.parse_assembly(text)
    pb = llvm.create_pass_builder(target_machine(), llvm.PipelineTuningOptions())
    try:
        pm = llvm.create_new_module_pass_manager()
        add(pm)
        pm.run(module, pb)
    finally:
        pb.close()
    return str(module)


def _split_at_barriers(
    lines: list[str], start: int, end: int, barrier_calls: re.Pattern, kinds: dict[str, str]
) -> tuple[list[str], int]:
    """Make every barrier the end of its block: ``call point(); br label %resume.K`` then ``resume.K:``.

    A shuffle becomes: put the value, a warp point, and after it get the chosen lane's value."""
    body: list[str] = []
    renamed: dict[str, str] = {}  # block label -> label of the block now holding its terminator
    current = None
    count = 0
    for line in lines[start + 1 : end]:
        m = LABEL.match(line)
        if m:
            current = "%" + m.group(1)
        found = barrier_calls.search(line)
        if found:
            count += 1
            resume = f"__mneme_resume.{count}"
            kind = kinds[found.group(1)]
            if current is None:
                return [], 0
            if kind in ("shfl", "vote", "red"):
                put, get = _exchange(line, found, count, kind)
                if put is None:
                    return [], 0
                point = POINT if kind == "red" else WARP_POINT
                body += put + [f"  call void @{point}()", f"  br label %{resume}", f"{resume}:"] + get
            else:
                point = {"barrier": POINT, "pause": PAUSE_POINT, "yield": YIELD_POINT}.get(kind, WARP_POINT)
                body += [
                    f"  call void @{point}()",
                    f"  br label %{resume}",
                    f"{resume}:",
                ]
            renamed[current] = "%" + resume
            continue
        body.append(line)
    # the entry block's label, and every block's terminator, may have moved: fix phi incomings
    origin = {}
    for key in renamed:
        last = key
        while last in renamed:
            last = renamed[last]
        origin[key] = last
    fixed = []
    for line in body:
        if " = phi " in line:
            line = re.sub(
                r"(,\s*)(%[-\w.$]+)(\s*\])",
                lambda m: m.group(1) + origin.get(m.group(2), m.group(2)) + m.group(3),
                line,
            )
        fixed.append(line)
    return lines[: start + 1] + fixed + lines[end:], count


def _exchange(line: str, found: re.Match, k: int, kind: str) -> tuple[list[str] | None, list[str]]:
    """The two halves around the point of a shuffle, vote or barrier reduction call line."""
    target = re.match(r"^\s*(%[-\w.$]+) = ", line)
    if not target:
        return None, []
    open_index = found.end() - 1
    args = [
        a.split()[-1] for a in intrinsics.split_top_level(line[open_index + 1 : retarget.match_paren(line, open_index)])
    ]
    name = found.group(1)
    result = target.group(1)
    if kind == "shfl":
        impl = _SHFL_IMPL.fullmatch(name)
        if len(args) != 4:
            return None, []
        value, b, c = args[1:]
        ty = "float" if impl.group(2) == "f32" else "i32"
        put = [
            f"  %__mneme_xv.{k} = " + (f"bitcast float {value} to i32" if ty == "float" else f"add i32 {value}, 0"),
            f"  call void @__mneme_exchange_put(i32 %__mneme_xv.{k})",
        ]
        get = [
            f"  %__mneme_xw.{k} = call i64 @__mneme_exchange_get(i32 {_SHFL_MODES[impl.group(1)]}, i32 {b}, i32 {c})",
            f"  %__mneme_xl.{k} = trunc i64 %__mneme_xw.{k} to i32",
            f"  {result} = "
            + (f"bitcast i32 %__mneme_xl.{k} to float" if ty == "float" else f"add i32 %__mneme_xl.{k}, 0"),
        ]
        return put, get
    ret_type = re.search(r"call (?:[a-z]+ )*(i1|i32) @", line)
    if not ret_type:
        return None, []
    ret = ret_type.group(1)
    convert = f"trunc i32 %__mneme_xr.{k} to i1" if ret == "i1" else f"add i32 %__mneme_xr.{k}, 0"
    pred_type = "i1" if kind == "vote" else ("i1" if re.search(r",\s*i1 [^,]*\)\s*(#\d+)?\s*$", line) else "i32")
    pred = args[-1]
    widen = f"zext i1 {pred} to i32" if pred_type == "i1" else f"add i32 {pred}, 0"
    if kind == "vote":
        impl = _VOTE_IMPL.fullmatch(name)
        mask = args[0] if impl.group(2) else "-1"
        put = [f"  %__mneme_xv.{k} = {widen}", f"  call void @__mneme_exchange_put(i32 %__mneme_xv.{k})"]
        get = [
            f"  %__mneme_xr.{k} = call i32 @__mneme_vote_get(i32 {_VOTE_MODES[impl.group(1)]}, i32 {mask})",
            f"  {result} = {convert}",
        ]
        return put, get
    op = _RED_OPS[_RED_IMPL.fullmatch(name).group(1)]
    put = [f"  %__mneme_xv.{k} = {widen}", f"  call void @__mneme_block_put(i32 %__mneme_xv.{k})"]
    get = [f"  %__mneme_xr.{k} = call i32 @__mneme_block_get(i32 {op})", f"  {result} = {convert}"]
    return put, get


def _blocks(body: list[str]) -> list[tuple[str, list[str]]]:
    blocks: list[tuple[str, list[str]]] = []
    for line in body:
        m = LABEL.match(line)
        if m:
            blocks.append(("%" + m.group(1), []))
        elif line.strip() and not line.lstrip().startswith(";"):
            if not blocks:
                return []
            blocks[-1][1].append(line)
    return blocks


def to_steps(
    text: str,
    kernel_name: str,
    params,
    static_shared: int,
    *,
    tails: Callable[[str], bool] | None = None,
    recompute: bool = False,
    yields: bool = False,
) -> str | None:
    """Rewrite host IR text (fiber form) into step form, or None where it does not apply.

    For the block step form only (the runtime knows no pauses): `tails`, a predicate on IR lines, pauses the
    threads before a tail holding such lines (`intervals.pause_before_tails`); `recompute` computes pure values
    again where they are used rather than keep them in the frame (`intervals.recompute_across_blocks`); `yields`
    (with `tails`) stops the threads at the header of each loop between barriers that can run as lanes
    (`intervals.yield_at_loops`).
    """
    lines = text.split("\n")
    spans = _defined_functions(lines)
    sync = _sync_functions(lines, spans)
    if not sync or kernel_name not in spans:
        return None
    calls = re.compile(r"call [^@]*@(" + "|".join(re.escape(b) for b in sorted(sync)) + r")\(")
    for name, (start, end) in spans.items():
        if name != kernel_name and any(calls.search(line) for line in lines[start + 1 : end]):
            return None  # a barrier in a called function
    # Drop the fiber-form entry and info; they are rebuilt below.
    text = _drop(text)
    named = _run_passes(text, lambda pm: pm.add_instruction_namer_pass())
    lines = named.split("\n")
    span = function_span(lines, kernel_name)
    if span is None:
        return None
    if tails is not None:
        lines, paused = intervals.pause_before_tails(lines, *span, calls, tails)
        added = {intervals.PAUSE: "pause"} if paused else {}
        if yields:
            span = function_span(lines, kernel_name)
            lines, looped = intervals.yield_at_loops(lines, *span, calls, tails)
            added |= {intervals.YIELD: "yield"} if looped else {}
        if added:
            sync = {**sync, **added}
            calls = re.compile(r"call [^@]*@(" + "|".join(re.escape(b) for b in sorted(sync)) + r")\(")
        span = function_span(lines, kernel_name)
    lines, count = _split_at_barriers(lines, *span, calls, sync)
    if not count:
        return None
    if recompute:
        lines = intervals.recompute_across_blocks(lines, *function_span(lines, kernel_name))
    text = "\n".join(lines) + f"\ndeclare void @{POINT}() nounwind\ndeclare void @{WARP_POINT}() nounwind\n"
    text += f"declare void @{PAUSE_POINT}() nounwind\ndeclare void @{YIELD_POINT}() nounwind\n"
    text += (
        "declare void @__mneme_exchange_put(i32) nounwind\ndeclare i64 @__mneme_exchange_get(i32, i32, i32) nounwind\n"
    )
    text += "declare i32 @__mneme_vote_get(i32, i32) nounwind\ndeclare void @__mneme_block_put(i32) nounwind\n"
    text += "declare i32 @__mneme_block_get(i32) nounwind\n"
    demoted = _run_passes(text, lambda pm: pm.add_register_to_memory_pass())
    lines = demoted.split("\n")
    span = function_span(lines, kernel_name)
    if span is None:
        return None
    start, end = span
    blocks = _blocks(lines[start + 1 : end])
    if not blocks:
        return None
    frame_body, frame_types = _frame(blocks, count, lean=recompute)
    if frame_body is None:
        return None
    header = lines[start]
    open_index = header.index(retarget.symbol_ref(kernel_name) + "(") + len(retarget.symbol_ref(kernel_name))
    close = retarget.match_paren(header, open_index)
    sep = ", " if header[open_index + 1 : close].strip() else ""
    header = header[:close] + sep + "ptr %__mneme_frame, i32 %__mneme_resume" + header[close:]
    frame_type = "{ i32" + "".join(", " + t for t in frame_types) + " }"
    out = lines[:start] + [header] + frame_body + lines[end:]
    out = [line for line in out if not (line.startswith("declare ") and any(p[:-1] in line for p in _POINTS))]
    entry = _entry(kernel_name, params)
    param_bytes = max((p.offset + p.size for p in params), default=0)
    info = (
        f"@{retarget.INFO} = constant [4 x i64] [i64 {static_shared}, i64 {FLAG_STEPS}, i64 {param_bytes}, "
        f"i64 ptrtoint (ptr getelementptr (%__mneme_frame_t, ptr null, i32 1) to i64)]"
    )
    at = next(i for i, line in enumerate(out) if line.startswith(("define ", "declare ", "@", "%")))
    out.insert(at, "%__mneme_frame_t = type " + frame_type)  # before its first use
    return "\n".join(out) + "\n" + entry + "\n" + info + "\n"


def _drop(text: str) -> str:
    text = re.sub(r"(?ms)^define void @__mneme_entry\(ptr %args\) \{.*?^\}\n?", "", text)
    return re.sub(rf"(?m)^@{retarget.INFO} = .*\n?", "", text)


def _frame(blocks: list[tuple[str, list[str]]], count: int, lean: bool = False):
    """The kernel body in step form and the frame's field types; (None, None) if it cannot be.

    `lean`: a slot only read and written whole moves to the frame only where a barrier can separate a store to it
    from a load (`_live_across`), not wherever a region with a barrier mentions it.
    """
    entry_label = blocks[0][0]
    barrier_blocks = {label for label, body in blocks if any(p in line for line in body for p in _POINTS)}
    successors = {label: set(LABEL_REF.findall("\n".join(body))) for label, body in blocks}
    entries = [entry_label] + [f"%__mneme_resume.{k}" for k in range(1, count + 1)]
    regions: dict[str, set[str]] = {}
    for e in entries:
        seen, todo = {e}, deque([e])
        while todo:
            b = todo.popleft()
            if b in barrier_blocks:
                continue  # a barrier ends the region
            for s in successors.get(b, ()):
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
        regions[e] = seen
    synced = {e for e, blocks_of in regions.items() if blocks_of & barrier_blocks}
    in_synced = set().union(*(regions[e] for e in synced)) if synced else set()

    allocas = []
    for label, body in blocks:
        for line in body:
            m = _ALLOCA.match(line)
            if m:
                if label != entry_label or re.search(r",\s*i\d+ [^,]*%", m.group(2)):
                    return None, None  # a dynamic alloca
                allocas.append((m.group(1), m.group(2), int(m.group(3) or 1), line))
    uses: dict[str, set[str]] = {}  # local name -> labels of the blocks that mention it
    for label, body in blocks:
        for ln in body:
            if _ALLOCA.match(ln):
                continue  # the definition itself does not keep a value alive
            for token in LOCAL.findall(ln):
                uses.setdefault(token, set()).add(label)
    frame_fields, dispatch, moved = [], [], set()
    live_known, live = _live_across(blocks, [a[0] for a in allocas], entries[1:]) if lean else (set(), set())
    for name, type_text, align, line in allocas:
        used_in = uses.get(name, set())
        moved.add(line)
        if name in live if lean and name in live_known else used_in & in_synced:
            k = len(frame_fields) + 1
            width = max(align, 1)
            frame_fields.append(f"{{ [0 x <{width} x i8>], {type_text} }}")
            dispatch.append(
                f"  {name} = getelementptr inbounds %__mneme_frame_t, ptr %__mneme_frame, i32 0, i32 {k}, i32 1"
            )
        else:
            dispatch.append(line)  # stays a private alloca in the new entry block
    ids = {}  # resume block -> its id (warp points carry WARP_BIT)
    for _, lines in blocks:
        for i, line in enumerate(lines[:-1]):
            if any(p in line for p in _POINTS):
                k = int(re.search(r"label %__mneme_resume\.(\d+)", lines[i + 1]).group(1))
                ids[k] = k | (
                    WARP_BIT
                    if WARP_POINT in line
                    else PAUSE_BIT
                    if PAUSE_POINT in line
                    else YIELD_BIT
                    if YIELD_POINT in line
                    else 0
                )
    if len(ids) != count:
        return None, None
    cases = " ".join(f"i32 {ids[k]}, label %__mneme_resume.{k}" for k in range(1, count + 1))
    body = ["__mneme_dispatch:", *dispatch, f"  switch i32 %__mneme_resume, label {entry_label} [ {cases} ]"]
    for label, lines in blocks:
        body.append(label[1:] + ":")
        i = 0
        while i < len(lines):
            line = lines[i]
            if line in moved or re.match(r"^\s*call void @llvm\.lifetime\.(start|end)\.", line):
                i += 1  # lifetime markers may only name allocas; frame slots are not
                continue
            if any(p in line for p in _POINTS):
                m = re.search(r"label %__mneme_resume\.(\d+)", lines[i + 1])
                body += [f"  store i32 {ids[int(m.group(1))]}, ptr %__mneme_frame, align 4", "  ret void"]
                i += 2
                continue
            if re.match(r"^\s*ret void", line):
                body += ["  store i32 -1, ptr %__mneme_frame, align 4", line]
                i += 1
                continue
            body.append(line)
            i += 1
    return body, frame_fields


def _live_across(
    blocks: list[tuple[str, list[str]]], slots: list[str], resumes: list[str]
) -> tuple[set[str], set[str]]:
    """(the slots only loaded and stored whole, those of them whose value a barrier can separate from a load).

    A slot's value crosses a barrier when some path from a resume point reaches a load of it before a store.
    """
    simple = set(slots)
    upward: dict[str, set[str]] = {}
    stored: dict[str, set[str]] = {}
    for label, body in blocks:
        up, st = set(), set()
        for line in body:
            for token in set(LOCAL.findall(line)) & simple:
                load = re.match(rf"^\s*%[-\w.$]+ = load [^,]+, ptr {re.escape(token)}(,|$)", line)
                store = re.match(rf"^\s*store [^,]+, ptr {re.escape(token)}(,|$)", line)
                if store and LOCAL.findall(line).count(token) == 1:
                    st.add(token)
                elif load:
                    if token not in st:
                        up.add(token)
                elif not _ALLOCA.match(line):
                    simple.discard(token)  # its address escapes (a call, a pointer stored): keep the coarse rule
        upward[label], stored[label] = up, st
    successors = {label: set(LABEL_REF.findall("\n".join(body))) for label, body in blocks}
    live_in: dict[str, set[str]] = {label: set(upward[label]) for label, _ in blocks}
    changed = True
    while changed:
        changed = False
        for label, _ in reversed(blocks):
            out = set().union(*(live_in.get(s, set()) for s in successors[label]))
            new = upward[label] | (out - stored[label])
            if new != live_in[label]:
                live_in[label], changed = new, True
    crossing = set().union(*(live_in.get(r, set()) for r in resumes)) if resumes else set()
    return simple, crossing & simple


def _entry(kernel_name: str, params) -> str:
    body, call_args = retarget.unpack_args(params)
    lines = [f"define void @{retarget.ENTRY}(ptr %args, ptr %frame, i32 %resume) {{", *body]
    call_args += ["ptr %frame", "i32 %resume"]
    lines += [f"  call void {retarget.symbol_ref(kernel_name)}({', '.join(call_args)})", "  ret void", "}"]
    return "\n".join(lines)
