"""Kernels whose only synchronization is the block barrier, run a whole block per call: the step form's passes in IR.

The step form (`steps`) runs a block as passes: each pass calls the step function once per thread
that has not returned, from the runtime, through a pointer; a thread runs to its next barrier and
stores where to resume. Here the kernel gets the thread index as parameters (as in the block loop)
and ``__mneme_entry`` runs the passes itself, once per block (the runtime's MODE_BLOCK): the frames
of the block's threads live on the entry's stack, and the step function is inlined into the loops
over the threads, so a pass costs no call per thread.

A pass in which every thread resumes at the same point (a barrier all threads reached, the common
case) runs a loop over the threads with that point a constant: the inlined step function keeps
only that interval's code. Where the interval has no atomic or volatile access, fence, call other
than intrinsics and special-register reads, and the kernel keeps no private array outside the frame,
the loop is marked ``llvm.loop.parallel_accesses`` so that LLVM vectorizes it across threads: the
threads of a block between two barriers may run in any interleaving (CUDA's rule, as in `lanes`).
A pass where threads wait at different points (or some have returned) calls each thread with its
own point, in thread order, as the runtime does.

Applies (`to_block_steps` returns None otherwise) to kernels the step form takes whose only
synchronizing calls are barriers (no shuffles, votes, barrier reductions or warp barriers) and
whose thread index only the kernel reads, with at most `MAX_FRAME_BYTES` of frame per thread.
"""

from __future__ import annotations

import logging
import re

from mneme.core import envvars
from mneme.plugins.backends.host import (
    accesses,
    block_guards,
    block_loop,
    block_passes,
    block_prefetch,
    block_shared,
    block_uniform,
    divergence,
    lanes,
    retarget,
    steps,
)
from mneme.plugins.backends.host.irtext import UNMARKED, function_span, successors, symbol_ref

log = logging.getLogger(__name__)

ENV = "MNEME_HOST_BLOCK_STEPS"
LANES_ENV = "MNEME_HOST_BLOCK_LANES"
UNIFORM_ENV = "MNEME_HOST_BLOCK_UNIFORM"
FLAT_ENV = "MNEME_HOST_BLOCK_FLAT"
PREFETCH_ENV = "MNEME_HOST_BLOCK_PREFETCH"
#: a build-cache key: another form is another build product
VERSION = "7"
MAX_FRAME_BYTES = 1024  # per thread, on the stack of the worker running the block (1024 threads: 1 MiB)
# step-function lines the entry's lane loops inline, all copies together: past it, no pass-start copies
# (`block_uniform`), then no flat copies, so that compile time stays near the whole-frame form's
MAX_COPY_LINES = 60000
_FIELD_GEP = re.compile(
    r"^\s*(%[-\w.$]+) = getelementptr inbounds %__mneme_frame_t, ptr %__mneme_frame, i32 0, i32 (\d+), i32 1$"
)
_CTX_DECLARE = re.compile(r"^(declare )(ptr @__mneme_ctx\(\))")
_FRAME_TYPE = re.compile(r"^%__mneme_frame_t = type (.*)$", re.MULTILINE)
_SWITCH = re.compile(r"switch i32 %__mneme_resume, label (%[-\w.$]+) \[(.*)\]")
_CASE = re.compile(r"i32 (\d+), label (%[-\w.$]+)")
# the kernel's own private memory; reg2mem's slots for one value (not live across a barrier: `steps._live_across`)
# become registers again once the step function is inlined
_PRIVATE = re.compile(r"(?<!\.reg2mem)(?<!\.reg2mem\d)(?<!\.reg2mem\d\d)(?<!\.reg2mem\d\d\d) = alloca ")
_PER_THREAD_CALL = re.compile(
    r"( call [^@\n]*)@__mneme\.nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|ctaid\.x|lanemask\.\w+)\("
)
_INTRINSIC_CALL = re.compile(r"( call [^@\n]*)@llvm\.nvvm\.read\.ptx\.sreg\.")
_MARKABLE_CALL = re.compile(r"@(?:llvm\.|__mneme\.nvvm\.read\.ptx\.sreg\.|__mneme_ctx\()")
_PTR_PARAM = re.compile(r"\bptr\b[^,]*?(%(?!__mneme)[-\w.$]+)\s*(?:,|\)\s*(?:local_unnamed_addr|#|\{|$))")


def enabled() -> bool:
    """Whether barrier kernels run a block per call (``MNEME_HOST_BLOCK_STEPS``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def lanes_enabled() -> bool:
    """Whether the block step form lays its frames out for lanes (``MNEME_HOST_BLOCK_LANES``, default on).

    On: one array per frame field, pure values recomputed after a barrier rather than kept in the frame, and a
    pause before a tail that holds an atomic (`intervals`), so that barrier intervals vectorize across threads.
    """
    return (envvars.get(LANES_ENV) or "1") not in ("0", "off", "no", "false")


def uniform_enabled() -> bool:
    """Whether fields proved alike in every thread skip their folds (``MNEME_HOST_BLOCK_UNIFORM``, default on).

    On: a frame field that `divergence` proves the same in every thread wherever all threads wait at one barrier
    is read from thread 0's frame when a pass starts, not folded (least, greatest) over the threads in every loop.
    """
    return (envvars.get(UNIFORM_ENV) or "1") not in ("0", "off", "no", "false")


def flat_enabled() -> bool:
    """Whether blocks of rows of a power-of-two length run each pass as one loop per plane (``MNEME_HOST_BLOCK_FLAT``,
    default on).

    On: the lanes loops get a copy over the linear index of each z plane (`block_passes.flat`), chosen at run time
    for such blocks (16x16 tiles), so a pass vectorizes across rows instead of one short loop per row.
    """
    return (envvars.get(FLAT_ENV) or "1") not in ("0", "off", "no", "false")


def prefetch_enabled() -> bool:
    """Whether a block prefetches the slice of its inputs a later block reads (``MNEME_HOST_BLOCK_PREFETCH``, default
    on; `block_prefetch`)."""
    return (envvars.get(PREFETCH_ENV) or "1") not in ("0", "off", "no", "false")


def key() -> str:
    """The form's part of the build key: `VERSION` and the switches that change the code it generates."""
    if not enabled():
        return "off"
    off = [
        ("whole", lanes_enabled()),
        ("folded", uniform_enabled()),
        ("nested", flat_enabled()),
        ("unfetched", prefetch_enabled()),
    ]
    return "-".join([VERSION, *(name for name, on in off if not on)])


def to_block_steps(text: str, kernel_name: str, params, static_shared: int) -> str | None:
    """Host IR text (fiber form) rewritten to run a block per call; None where it does not apply."""
    lines = text.split("\n")
    sync = steps._sync_functions(lines, steps._defined_functions(lines))
    if not sync or set(sync.values()) != {"barrier"}:
        return None
    if "@__mneme.amdgcn." in text:
        return None  # work-item ids are read through the dispatch packet and intrinsics: one call per thread
    # the retargeted text reads the thread index through the runtime's context; written as the intrinsics the
    # block loop's rewrite knows, it becomes parameters (and a read from any other function refuses it)
    as_intrinsics = _PER_THREAD_CALL.sub(r"\1@llvm.nvvm.read.ptx.sreg.\2(", text)
    indexed, done, _ = block_loop.thread_indices_as_parameters(as_intrinsics, kernel_name, serial=True)
    if not done:
        return None
    indexed = _INTRINSIC_CALL.sub(r"\1@__mneme.nvvm.read.ptx.sreg.", indexed)  # other functions' block index
    soa = lanes_enabled()
    private = bool(re.search(r"= alloca ", indexed))
    stepped = steps.to_steps(
        indexed,
        kernel_name,
        params,
        static_shared,
        tails=_unmarkable_line if soa and not private else None,
        recompute=soa,
        yields=soa and not private,
    )
    if stepped is None:
        return None
    stepped = re.sub(r"(?ms)^define void @__mneme_entry\(.*?^\}\n?", "", stepped)
    stepped = re.sub(rf"(?m)^@{retarget.INFO} = .*\n?", "", stepped)
    frame = _FRAME_TYPE.search(stepped)
    if frame is None or lanes._bytes(frame.group(1)) > MAX_FRAME_BYTES:
        return None
    out = stepped.split("\n")
    span = function_span(out, kernel_name)
    if span is None:
        return None
    fields = accesses.split_operands(frame.group(1).strip()[1:-1])
    slots: dict[str, tuple[int, str]] = {}
    alike: set[int] = set()
    steady: dict[int, set[int]] = {}
    if soa:
        out, slots = _fields_as_arrays(out, *span, fields)
        span = function_span(out, kernel_name)
        alike = divergence.uniform_fields(out, *span, slots) if uniform_enabled() else set()
        steady = divergence.steady_stops(out, *span, slots) if uniform_enabled() else {}
    shared: list[int] = []
    if alike:  # kept once per block where the step function allows (`block_shared`)
        out, shared, slots = block_shared.share(out, *span, slots, alike)
        span = function_span(out, kernel_name)
    body = out[span[0] + 1 : span[1]]
    blocks = steps._blocks(body)
    if not blocks:
        return None
    switch = next((_SWITCH.search(line) for _, b in blocks for line in b if _SWITCH.search(line)), None)
    if switch is None:
        return None
    points = {0: switch.group(1), **{int(k): label for k, label in _CASE.findall(switch.group(2))}}
    private = any(_PRIVATE.search(line) for line in body)
    markable = {k: not private and _markable(blocks, label) for k, label in points.items()}
    # intervals that address the kernel's buffers: their flat loops run rows in chunks (`block_passes.flat`), so that an
    # index built from tid.y and tid.x stays contiguous within a vector step
    buffers = set(_PTR_PARAM.findall(out[span[0]]))
    chunked = {k for k in markable if markable[k] and _mentions(blocks, points[k], buffers)}
    reads: dict[int, list[int]] = {}
    used: dict[int, str] = {}
    if soa:
        # fields a thread's index feeds: their twins read thread 0's value plus the thread's index (`block_uniform`)
        affine = block_uniform.thread_indexed(out, *span, slots) - alike if uniform_enabled() else set()
        out, reads, used = block_uniform.snapshot_loads(out, *span, slots, {k: points[k] for k in markable}, affine)
        # proved alike: read at barriers only (a pause's or yield's threads may be at different iterations)
        alike = alike & {
            k for k in used if all(p > 0 and not p & block_passes.STOPS for p, ks in reads.items() if k in ks)
        }
        reads = {k: f for k, f in reads.items() if markable[k]}  # a loop run thread after thread gains nothing
    lanes_loops = sum(markable.values())
    if len(body) * lanes_loops * 2 * (2 if reads else 1) > MAX_COPY_LINES:
        reads = {}
    # shared cells: LLVM keeps them in registers across a flat loop and vectorizes it only once it unswitched the
    # uniform branches, which it does in a loop that is its parent's only child (`block_passes.flat`: its plane loop)
    flat = soa and flat_enabled() and len(body) * lanes_loops * 2 * (2 if reads else 1) <= MAX_COPY_LINES
    next_md = max((int(m) for m in re.findall(r"!(\d+)\b", stepped)), default=0) + 1
    proved = frozenset(alike)
    uniform = (reads, used, fields, proved)
    steady = {k: v for k, v in steady.items() if k in markable and v}
    # passes whose threads past a uniform bound change nothing: a probe finds the bound, the loops stop there
    guards: dict[int, block_guards.Guard] = {}
    if soa and uniform_enabled():
        span = function_span(out, kernel_name)
        guards = block_guards.thread_bounds(out, *span, slots, {k for k, on in markable.items() if on})
        for k, guard in guards.items():
            out += block_guards.probe(out, *span, _probe_name(kernel_name, k), guard)
    # pointers the entry loads as %a<index> (not byval or byref aggregates, which it passes in place)
    plain = {p.index for p in params if p.type == "ptr" and p.byval is None and not p.byref}
    prefetch = (
        [r for r in block_prefetch.indexed_reads(lines, kernel_name) if r[0] in plain] if prefetch_enabled() else []
    )
    entry, metadata = _entry(
        kernel_name, params, markable, next_md, soa, uniform, flat, len(shared), steady, chunked, guards, prefetch
    )
    param_bytes = max((p.offset + p.size for p in params), default=0)
    info = f"@{retarget.INFO} = constant [4 x i64] [i64 {static_shared}, i64 {retarget.FLAG_BLOCK_LOOP}, i64 {param_bytes}, i64 0]"
    if soa:  # the context is readable whole: its invariant loads (the shared base) may leave a masked branch
        out = [_CTX_DECLARE.sub(r"\1nonnull align 8 dereferenceable(80) \2", line) for line in out]
    if "@llvm.cttz.i32(" not in stepped:
        metadata.append("declare i32 @llvm.cttz.i32(i32, i1)")
    if prefetch and "@llvm.prefetch.p0(" not in stepped:
        metadata.append("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
    declares = [
        f"declare {w} @llvm.{f}.{w}({w}, {w})"
        for f in ("smin", "smax", *(("umin", "umax") if guards or prefetch else ()))
        for w in ("i32", "i64")
        if f"@llvm.{f}.{w}(" not in stepped
    ]
    if guards and "@llvm.memcpy.p0.p0.i64(" not in stepped:
        declares.append("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
    return "\n".join(["\n".join(out).rstrip("\n"), entry, info, *declares, *metadata]) + "\n"


def _probe_lines(point: int, guard, call: str, kernel: str, kernel_name: str, cells: int) -> list[str]:
    """``at{point}.probe:`` thread 0's probe (`block_guards.probe`, on a copy of the cells) and the bounds of the
    point's loops: ``%gx{point}`` for a 1D block's row, ``%gm{point}`` for a plane; the block's extents where the
    probe finds none or the shape does not make the compared index the linear one. Then on to ``at{point}``."""
    probe = f"@{_probe_name(kernel_name, point)}"
    call = call.split(", !llvm.access.group")[0].replace(f"call void {kernel}(", f"call i64 {probe}(")
    for axis in "xyzl":
        call = call.replace(f"i32 %{{p}}{axis},", "i32 0,")
    lines = [f"at{point}.probe:"]
    if cells:
        lines += [
            f"  %pc{point} = alloca i64, i32 {2 * cells}, align 8",
            f"  call void @llvm.memcpy.p0.p0.i64(ptr %pc{point}, ptr %cells, i64 {16 * cells}, i1 false)",
        ]
        call = call.replace("ptr %cells)", f"ptr %pc{point})")
    shape = block_guards.SHAPES[guard.shape]
    return [
        *lines,
        call.replace("  call i64", f"  %pb{point} = call i64"),
        f"  %pn{point} = icmp eq i64 %pb{point}, {block_guards.NONE}",
        f"  %pm{point} = call i64 @llvm.umin.i64(i64 %pb{point}, i64 %n64)",
        f"  %pm1{point} = call i64 @llvm.umax.i64(i64 %pm{point}, i64 1)",  # thread 0 stores the cells
        f"  %pq{point} = trunc i64 %pm1{point} to i32",
        f"  %pk{point} = xor i1 %pn{point}, true",
        f"  %pok{point} = and i1 %pk{point}, {shape}",
        f"  %gb{point} = select i1 %pok{point}, i32 %pq{point}, i32 %n",
        f"  %gx{point} = select i1 %ntx1d, i32 %gb{point}, i32 %ntx",
        f"  %gm{point} = select i1 %ntz1, i32 %gb{point}, i32 %nxy",
        f"  br label %at{point}",
    ]


def _unmarkable_line(line: str) -> bool:
    """Whether `line` keeps a loop over the threads from running them as lanes (see `_markable`)."""
    if UNMARKED.search(line) or _PRIVATE.search(line):
        return True
    call = lanes._CALL.match(line)
    return bool(call and not _MARKABLE_CALL.match(call.group(1) + "("))


def _fields_as_arrays(
    lines: list[str], start: int, end: int, fields: list[str]
) -> tuple[list[str], dict[str, tuple[int, str]]]:
    """The step function's frame as one array per field across the block's threads (struct of arrays).

    The kernel gets the block's frames (``%__mneme_frame``) and their count (``%__mneme_frame_n``); field k of
    thread l lies at ``frames + n * offset(k) + l * size(k)``, so consecutive threads' values are contiguous.
    Returns the lines and the frame slots: name -> (field index, field type).
    """
    slots = {}
    header = lines[start].replace(
        "ptr %__mneme_frame, i32 %__mneme_resume", "ptr %__mneme_frame, i32 %__mneme_resume, i64 %__mneme_frame_n"
    )
    out = [*lines[:start], header]
    for line in lines[start + 1 : end]:
        m = _FIELD_GEP.match(line)
        if m:
            name, k = m.group(1), int(m.group(2))
            slots[name] = (k, fields[k])
            offset = f"ptrtoint (ptr getelementptr (%__mneme_frame_t, ptr null, i32 0, i32 {k}) to i64)"
            out += [
                f"  {name}.fo = mul i64 %__mneme_frame_n, {offset}",
                f"  {name}.fb = getelementptr inbounds i8, ptr %__mneme_frame, i64 {name}.fo",
                f"  {name} = getelementptr inbounds {fields[k]}, ptr {name}.fb, i32 %__mneme_linear, i32 1",
            ]
            continue
        if line == "__mneme_dispatch:":
            out += [line, "  %__mneme_resume_at = getelementptr inbounds i32, ptr %__mneme_frame, i32 %__mneme_linear"]
            continue
        out.append(line.replace("ptr %__mneme_frame, align 4", "ptr %__mneme_resume_at, align 4"))
    return out + lines[end:], slots


def _mentions(blocks: list[tuple[str, list[str]]], start: str, names: set[str]) -> bool:
    """Whether the interval from `start` (to the stops that end it) names one of `names`."""
    by_label = dict(blocks)
    seen, todo = {start}, [start]
    while todo:
        body = by_label.get(todo.pop(), [])
        if any(t in names for line in body for t in re.findall(r"%[-\w.$]+", line)):
            return True
        for succ in successors(body[-1]) if body else []:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return False


def _markable(blocks: list[tuple[str, list[str]]], start: str) -> bool:
    """Whether the interval from `start` (to the returns that end it) may run its threads as parallel lanes."""
    by_label = dict(blocks)
    seen, todo = {start}, [start]
    lines = list(blocks[0][1])  # the dispatch block: every interval runs it
    while todo:
        label = todo.pop()
        body = by_label.get(label)
        if body is None:
            return False
        lines += body
        for succ in successors(body[-1]):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return not any(_unmarkable_line(line) for line in lines)


def _probe_name(kernel_name: str, point: int) -> str:
    return symbol_ref(f"{kernel_name}.__mneme_probe.{point}")[1:]


def _entry(
    kernel_name: str,
    params,
    markable: dict[int, bool],
    md: int,
    soa: bool,
    uniform,
    flat: bool = False,
    cells: int = 0,
    steady: dict[int, set[int]] | None = None,
    chunked: set[int] = frozenset(),
    guards: dict | None = None,
    prefetch: list[tuple[int, int]] = (),
) -> tuple[str, list[str]]:
    """``__mneme_entry(args)``: the block's passes; and the loop metadata it references.

    Every loop over the threads keeps the least and the greatest resume point its threads stored
    (`block_passes.threads`), so the next pass knows without a scan whether all threads resume at one point; with
    pauses, also the first and last paused thread and the greatest point of the others: the paused threads run their
    tails (`block_passes.drain`, in thread order) before any thread passes a barrier, and all of them return. `uniform`: (the frame fields
    each point's interval reads at their pass-start values, their value types, the frame's field types), see
    `block_uniform`, and those of them proved alike in every thread (`divergence`: not folded). `cells`: how many
    fields the block keeps once (`block_shared`), copied from new to old before every pass. `steady`: point -> the
    stops its interval reaches in every thread alike (`divergence.steady_stops`): its loops fold no resume points
    (`block_passes.steady_exit`). `chunked`: points whose flat loops run rows in chunks of `block_passes.CHUNK`
    threads (`block_passes.flat`). `guards`: points whose loops stop at the bound their probe finds (`block_guards`).
    `prefetch`: (parameter position, element bytes) of the buffers whose next slice the block prefetches
    (`block_prefetch`).
    """
    steady = steady or {}
    guards = guards or {}
    reads, used, fields, proved = uniform
    folded = {k: t for k, t in used.items() if k not in proved}
    alloc, copy = block_shared.entry_lines(list(range(cells)))
    body, call_args = retarget.unpack_args(params)
    kernel = symbol_ref(kernel_name)
    args = ", ".join(call_args)
    sep = ", " if args else ""
    frame = (
        "ptr %frames, i32 %{p}r, i64 %n64{snap}" + (", ptr %cells" if cells else "")
        if soa
        else "ptr %{p}fp, i32 %{p}r{snap}"
    )
    call = f"  call void {kernel}({args}{sep}i32 %{{p}}x, i32 %{{p}}y, i32 %{{p}}z, i32 %{{p}}l, i32 %bx, {frame})"
    pauses = any(k & block_passes.STOPS for k in markable)
    yields = any(k & steps.YIELD_BIT for k in markable)
    plain = call.replace("{snap}", block_uniform.arguments(None, used, []) if used else "")
    cell = "i32" if soa else "%__mneme_frame_t"
    lines = [
        f"define void @{retarget.ENTRY}(ptr %args) {{",
        "entry:",
        *body,
        *(line.replace("align 4", "align 4, !invariant.load !{}") for line in block_loop.block_extent_loads()),
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_CTAID}",
        "  %bx = load i32, ptr %bxp, align 4",
        "  %nxy = mul i32 %ntx, %nty",
        "  %n = mul i32 %nxy, %ntz",
        "  %n64 = zext i32 %n to i64",
        # a block of rows whose length is a power of two runs its lanes loops over the linear index (`block_passes`)
        "  %mx = add i32 %ntx, -1",
        "  %sx = call i32 @llvm.cttz.i32(i32 %ntx, i1 true)",
        "  %px = and i32 %ntx, %mx",
        "  %pow2 = icmp eq i32 %px, 0",
        "  %rows = icmp ugt i32 %nty, 1",
        "  %flat = and i1 %pow2, %rows",
        f"  %wide = icmp uge i32 %ntx, {block_passes.CHUNK}",
        "  %flatc = and i1 %flat, %wide",
        "  %ntz1 = icmp eq i32 %ntz, 1",  # the linear index of one plane (`block_guards.SHAPES`)
        "  %ntx1d = icmp eq i32 %n, %ntx",
        "  %frames = alloca %__mneme_frame_t, i32 %n, align 64",
        *alloc,
        *(f"  %{a}.a = alloca i32, align 8" for a in block_passes.FOLDS),
        *block_uniform.fold_setup(used, fields, proved),
        *(block_prefetch.entry_lines(prefetch, "%init") or ["  br label %init"]),
        "init:",
        f"  %it = phi i32 [ 0, {'%nb.done' if prefetch else '%entry'} ], [ %it1, %init ]",
        f"  %itp = getelementptr inbounds {cell}, ptr %frames, i32 %it",
        "  store i32 0, ptr %itp, align 4",
        "  %it1 = add nuw i32 %it, 1",
        "  %itc = icmp ult i32 %it1, %n",
        "  br i1 %itc, label %init, label %init.done",
        "init.done:",
        "  store i32 0, ptr %lo.a, align 4",
        "  store i32 0, ptr %hi.a, align 4",
        "  br label %pass",
        # a pass: do all threads resume at one point?
        "pass:",
        *(line.replace("{c}", "p") for line in copy),
        "  %lo = load i32, ptr %lo.a, align 4",
        "  %hi = load i32, ptr %hi.a, align 4",
        "  %same = icmp eq i32 %lo, %hi",
        f"  br i1 %same, label %uniform, label %{'drain' if pauses else 'mixed'}",
        "drained:",
        *(line.replace("{c}", "d") for line in copy),
        "  %dlo = load i32, ptr %lo.a, align 4",
        "  %dhi = load i32, ptr %hi.a, align 4",
        "  %dsame = icmp eq i32 %dlo, %dhi",
        "  br i1 %dsame, label %uniform, label %mixed",
        "uniform:",
        "  %u = phi i32 [ %lo, %pass ], [ %dlo, %drained ]",
    ]
    cases = " ".join(f"i32 {k}, label %at{k}{'.probe' if k in guards else ''}" for k in sorted(markable))
    lines += [f"  switch i32 %u, label %mixed [ i32 -1, label %done {cases} ]"]
    metadata: list[str] = []
    # each thread with its own point, in thread order (the runtime's pass)
    lines += block_passes.threads(
        "mixed",
        [
            "  %{p}r = load i32, ptr %{p}rp, align 4",
            "  %{p}on = icmp ne i32 %{p}r, -1",
            "  br i1 %{p}on, label %mixed.call, label %mixed.next",
            "mixed.call:",
            plain,
            "  br label %mixed.next",
            "mixed.next:",
        ],
        None,
        soa,
        pauses=pauses,
        fields=(folded, fields),
    )
    if pauses:
        lines += block_passes.drain(plain, cell, block_uniform.unknown(folded), yields)
    for k in sorted(markable):
        at = call.replace("%{p}r,", f"{k},").replace("%{p}r{snap}", f"{k}{{snap}}")
        loops = [(f"at{k}", block_uniform.arguments(None, used, []) if used else "")]
        nested_bound, flat_bound = None, "%nxy"
        if k in guards:
            lines += _probe_lines(k, guards[k], at.replace("{snap}", loops[0][1]), kernel, kernel_name, cells)
            flat_bound = f"%gm{k}"
            if not folded:  # a nested loop folds the fields of the threads it runs only
                nested_bound = (f"%gx{k}", k)
        if k in reads:  # the same values in every thread: the copy that reads them as parameters
            lines += block_uniform.pick(k, reads[k], used, fields, proved)
            loops = [(f"at{k}.u", block_uniform.arguments(k, used, reads[k])), (f"at{k}.g", loops[0][1])]
            if proved.issuperset(reads[k]):
                loops = loops[:1]  # no test: the per-thread copy would never run
        for name, snap in loops:
            tag, loop_md = "", None
            if markable[k]:
                group, loop_md, parallel = md, md + 1, md + 2
                md += 3
                metadata += [
                    f"!{group} = distinct !{{}}",
                    f"!{loop_md} = distinct !{{!{loop_md}, !{parallel}}}",
                    f'!{parallel} = !{{!"llvm.loop.parallel_accesses", !{group}}}',
                ]
                tag = f", !llvm.access.group !{group}"
            body = [at.replace("{snap}", snap) + tag]
            stops = steady.get(k) if soa else None

            # the pass as a loop over each thread's frame: alone, or beside the flat copy
            nested = (body, loop_md, soa, tag)
            nested_kw = {"pauses": pauses, "fields": (folded, fields), "steady": stops, "bound": nested_bound}
            if loop_md is None or not flat:
                lines += block_passes.threads(name, *nested, **nested_kw)
                continue
            metadata += [f"!{md} = distinct !{{!{md}, !{loop_md + 1}}}"]  # the flat copy: a loop of its own
            if k in chunked:  # one vector step a chunk: neither unrolled first nor interleaved
                metadata[-1] = f"!{md} = distinct !{{!{md}, !{loop_md + 1}, !{md + 1}, !{md + 2}, !{md + 3}}}"
                metadata += [
                    f'!{md + 1} = !{{!"llvm.loop.unroll.disable"}}',
                    f'!{md + 2} = !{{!"llvm.loop.vectorize.width", i32 {block_passes.CHUNK}}}',
                    f'!{md + 3} = !{{!"llvm.loop.interleave.count", i32 1}}',
                ]
            lines += [f"{name}:", f"  br i1 %{'flatc' if k in chunked else 'flat'}, label %{name}.f, label %{name}.n"]
            lines += block_passes.flat(f"{name}.f", body, md, soa, steady=stops, chunk=k in chunked, bound=flat_bound)
            lines += block_passes.threads(f"{name}.n", *nested, **nested_kw)
            md += 4
    if (flat or steady) and any(markable.values()):  # its many folds in one vector each: no interleaving, no spills
        lines += [line.replace("{CENSUS_MD}", str(md)) for line in block_passes.census(cell, pauses, folded, fields)]
        metadata += [
            f"!{md} = distinct !{{!{md}, !{md + 1}}}",
            f'!{md + 1} = !{{!"llvm.loop.interleave.count", i32 1}}',
            f"!{md + 2} = distinct !{{!{md + 2}, !{md + 1}}}",
        ]
        if pauses:
            metadata += block_passes.paused_census(cell, str(md + 2))
        md += 3
    lines += ["done:", "  ret void", "}"]
    return "\n".join(lines), metadata
