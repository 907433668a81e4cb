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
from mneme.plugins.backends.host import block_loop, lanes, retarget, steps
from mneme.plugins.backends.host.irtext import symbol_ref

log = logging.getLogger(__name__)

ENV = "MNEME_HOST_BLOCK_STEPS"
#: a build-cache key: another form is another build product
VERSION = "1"
MAX_FRAME_BYTES = 1024  # per thread, on the stack of the worker running the block (1024 threads: 1 MiB)
_FRAME_TYPE = re.compile(r"^%__mneme_frame_t = type (.*)$", re.MULTILINE)
_SWITCH = re.compile(r"switch i32 %__mneme_resume, label (%[-\w.$]+) \[(.*)\]")
_CASE = re.compile(r"i32 (\d+), label (%[-\w.$]+)")
_UNMARKED = re.compile(r"\b(?:volatile|atomic|atomicrmw|cmpxchg|fence|llvm\.mem\w*)\b|= alloca ")
_PER_THREAD_CALL = re.compile(
    r"( call [^@\n]*)@__mneme\.nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|ctaid\.x|lanemask\.\w+)\("
)
_INTRINSIC_CALL = re.compile(r"( call [^@\n]*)@llvm\.nvvm\.read\.ptx\.sreg\.")
_MARKABLE_CALL = re.compile(r"@(?:llvm\.|__mneme\.nvvm\.read\.ptx\.sreg\.|__mneme_ctx\()")


def enabled() -> bool:
    """Whether barrier kernels run a block per call (``MNEME_HOST_BLOCK_STEPS``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


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
    stepped = steps.to_steps(indexed, kernel_name, params, static_shared)
    if stepped is None:
        return None
    stepped = re.sub(r"(?ms)^define void @__mneme_entry\(.*?^\}\n?", "", stepped)
    stepped = re.sub(rf"(?m)^@{retarget.INFO} = .*\n?", "", stepped)
    frame = _FRAME_TYPE.search(stepped)
    if frame is None or lanes._bytes(frame.group(1)) > MAX_FRAME_BYTES:
        return None
    out = stepped.split("\n")
    span = steps._function_span(out, kernel_name)
    if span is None:
        return None
    body = out[span[0] + 1 : span[1]]
    blocks = steps._blocks(body)
    if not blocks:
        return None
    switch = next((_SWITCH.search(line) for _, b in blocks for line in b if _SWITCH.search(line)), None)
    if switch is None:
        return None
    points = {0: switch.group(1), **{int(k): label for k, label in _CASE.findall(switch.group(2))}}
    private = any(re.search(r"= alloca ", line) for line in body)
    markable = {k: not private and _markable(blocks, label) for k, label in points.items()}
    next_md = max((int(m) for m in re.findall(r"!(\d+)\b", stepped)), default=0) + 1
    entry, metadata = _entry(kernel_name, params, markable, next_md)
    param_bytes = max((p.offset + p.size for p in params), default=0)
    info = f"@{retarget.INFO} = constant [4 x i64] [i64 {static_shared}, i64 {retarget.FLAG_BLOCK_LOOP}, i64 {param_bytes}, i64 0]"
    return "\n".join([stepped.rstrip("\n"), entry, info, *metadata]) + "\n"


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
        for succ in lanes._successors(body[-1]):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    for line in lines:
        if _UNMARKED.search(line):
            return False
        call = lanes._CALL.match(line)
        if call and not _MARKABLE_CALL.match(call.group(1) + "("):
            return False
    return True


def _entry(kernel_name: str, params, markable: dict[int, bool], md: int) -> tuple[str, list[str]]:
    """``__mneme_entry(args)``: the block's passes; and the loop metadata it references."""
    body, call_args = retarget.unpack_args(params)
    kernel = symbol_ref(kernel_name)
    args = ", ".join(call_args)
    sep = ", " if args else ""
    lines = [
        f"define void @{retarget.ENTRY}(ptr %args) {{",
        "entry:",
        *body,
        *block_loop.block_extent_loads(),
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {block_loop.CTX_CTAID}",
        "  %bx = load i32, ptr %bxp, align 4",
        "  %nxy = mul i32 %ntx, %nty",
        "  %n = mul i32 %nxy, %ntz",
        "  %frames = alloca %__mneme_frame_t, i32 %n, align 64",
        "  br label %init",
        "init:",
        "  %it = phi i32 [ 0, %entry ], [ %it1, %init ]",
        "  %itp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %it",
        "  store i32 0, ptr %itp, align 4",
        "  %it1 = add nuw i32 %it, 1",
        "  %itc = icmp ult i32 %it1, %n",
        "  br i1 %itc, label %init, label %pass",
        # a pass: do all threads resume at one point?
        "pass:",
        "  %r0 = load i32, ptr %frames, align 4",
        "  br label %same",
        "same:",
        "  %st = phi i32 [ 1, %pass ], [ %st1, %same.next ]",
        "  %sd = icmp uge i32 %st, %n",
        "  br i1 %sd, label %uniform, label %same.next",
        "same.next:",
        "  %sp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %st",
        "  %sr = load i32, ptr %sp, align 4",
        "  %st1 = add nuw i32 %st, 1",
        "  %seq = icmp eq i32 %sr, %r0",
        "  br i1 %seq, label %same, label %mixed",
    ]
    cases = " ".join(f"i32 {k}, label %at{k}" for k in sorted(markable))
    lines += ["uniform:", f"  switch i32 %r0, label %mixed [ i32 -1, label %done {cases} ]"]
    metadata: list[str] = []
    # each thread with its own point, in thread order (the runtime's pass)
    lines += _threads(
        "mixed",
        [
            "  %mr = load i32, ptr %{p}fp, align 4",
            "  %mon = icmp ne i32 %mr, -1",
            "  br i1 %mon, label %mixed.call, label %mixed.next",
            "mixed.call:",
            (
                f"  call void {kernel}({args}{sep}i32 %{{p}}x, i32 %{{p}}y, i32 %{{p}}z, i32 %{{p}}l, i32 %bx, "
                "ptr %{p}fp, i32 %mr)"
            ),
            "  br label %mixed.next",
            "mixed.next:",
        ],
        None,
    )
    for k in sorted(markable):
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
        lines += _threads(
            f"at{k}",
            [
                (
                    f"  call void {kernel}({args}{sep}i32 %{{p}}x, i32 %{{p}}y, i32 %{{p}}z, i32 %{{p}}l, i32 %bx, "
                    f"ptr %{{p}}fp, i32 {k}){tag}"
                )
            ],
            loop_md,
        )
    lines += ["done:", "  ret void", "}"]
    return "\n".join(lines), metadata


def _threads(name: str, body: list[str], loop_md: int | None) -> list[str]:
    """A loop over the block's threads (z, y, x; x innermost) around `body`, then back to the next pass.

    In `body`, ``{p}`` stands for the loop's prefix: ``%{p}x`` etc. are the thread's index, ``%{p}fp`` its frame.
    """
    p = name + "."
    inner = [line.replace("{p}", p) for line in body]
    last = inner[-1].strip().endswith(":") and inner[-1].strip()[:-1]
    tail = f", !llvm.loop !{loop_md}" if loop_md is not None else ""
    return [
        f"{name}:",
        f"  br label %{p}lz",
        f"{p}lz:",
        f"  %{p}z = phi i32 [ 0, %{name} ], [ %{p}z1, %{p}lz.latch ]",
        f"  br label %{p}ly",
        f"{p}ly:",
        f"  %{p}y = phi i32 [ 0, %{p}lz ], [ %{p}y1, %{p}ly.latch ]",
        f"  %{p}zy = mul i32 %{p}z, %nty",
        f"  %{p}zyy = add i32 %{p}zy, %{p}y",
        f"  %{p}row = mul i32 %{p}zyy, %ntx",
        f"  br label %{p}lx",
        f"{p}lx:",
        f"  %{p}x = phi i32 [ 0, %{p}ly ], [ %{p}x1, %{last or p + 'lx'} ]",
        f"  %{p}l = add i32 %{p}row, %{p}x",
        f"  %{p}fp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %{p}l",
        *inner,
        f"  %{p}x1 = add nuw i32 %{p}x, 1",
        f"  %{p}cx = icmp ult i32 %{p}x1, %ntx",
        f"  br i1 %{p}cx, label %{p}lx, label %{p}ly.latch{tail}",
        f"{p}ly.latch:",
        f"  %{p}y1 = add nuw i32 %{p}y, 1",
        f"  %{p}cy = icmp ult i32 %{p}y1, %nty",
        f"  br i1 %{p}cy, label %{p}ly, label %{p}lz.latch",
        f"{p}lz.latch:",
        f"  %{p}z1 = add nuw i32 %{p}z, 1",
        f"  %{p}cz = icmp ult i32 %{p}z1, %ntz",
        f"  br i1 %{p}cz, label %{p}lz, label %pass",
    ]
