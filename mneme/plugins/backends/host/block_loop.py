"""The block loop: one call of ``__mneme_entry`` runs every thread of a block, or a run of blocks along x.

A kernel without barriers or warp operations whose thread index only the kernel itself reads
gets the thread index (and its block's x index) as parameters (`thread_indices_as_parameters`);
`entry` then inlines it into a loop over the threads, which LLVM vectorizes across threads.
With `runs` (retarget.FLAG_BLOCK_RUNS, the runtime's MODE_BLOCK_RUNS) one call runs
``mn_ctx.run`` blocks along x, a row of threads of each in turn (docs/design/internals.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mneme.core import envvars
from mneme.plugins.backends.host import intrinsics
from mneme.plugins.backends.host.irtext import function_span, min_max, parameter_list, symbol_ref

if TYPE_CHECKING:
    from mneme.plugins.backends.host.row_ranges import Guard

ENTRY = "__mneme_entry"
#: the entry's form, in the build key: 2 runs the rows of a run of short power-of-two rows as one loop, 3 runs the
#: threads below a kernel's guard through a copy with the guard taken, 4 the threads within a guard's range of the
#: row (`row_ranges`: bounds on both sides, offsets, 2D tiles, the run's rows as one loop too), 5 checks the
#: run's blocks against the range without an early exit, 6 takes HIP kernels too (AMDGPU's work-item ids),
#: 7 their guards as ranges
VERSION = "7"
#: 0: long rows run every thread through the kernel's own guard (masked vector steps), as in form 2
GUARD_ENV = "MNEME_HOST_GUARD_SPLIT"
CTX_NTID = intrinsics.CTX_OFFSETS["ntid"]
CTX_CTAID = intrinsics.CTX_OFFSETS["ctaid"]
CTX_RUN = 76  # mn_ctx.run (runtime.c): how many blocks along x the call runs, from ctaid.x on
CTX_RUN_ROWS = 80  # mn_ctx.run_rows: set where the call runs the run's rows as one loop (a failure names the run)
SHORT_ROW = 64  # threads along x below which a row runs as masked vector steps (`entry`)

# Special registers that differ between the threads of a block (NVVM's, and AMDGPU's work-item ids and lane
# counts); read through the context otherwise.
_THREAD_SREGS = re.compile(
    r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|lanemask\.\w+)\(|@llvm\.nvvm\.activemask\("
    r"|@llvm\.amdgcn\.(workitem\.id\.[xyz]|mbcnt\.(?:lo|hi))\("
)
_THREAD_SREG_CALL = re.compile(
    r"^(\s*%[-\w.$\"]+) = (?:tail |notail )?call [^@]*@llvm\."
    r"(?:nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|ctaid\.x)|amdgcn\.(workitem\.id\.[xyz]|workgroup\.id\.x))"
    r"\(\).*$"
)
_AMDGPU_SREG = {f"workitem.id.{c}": f"tid.{c}" for c in "xyz"} | {"workgroup.id.x": "ctaid.x"}
_CTAID_X = re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.ctaid\.x\(|@llvm\.amdgcn\.workgroup\.id\.x\(")
# what makes the order of a block's threads observable, where races are not: atomics, volatile accesses, printf
ORDERED = re.compile(
    r"\b(?:atomicrmw|cmpxchg|fence)\b|\b(?:load|store) (?:atomic|volatile)\b|@llvm\.nvvm\.atomic|@__nv_atom|@vprintf\("
)

TID_PARAMS = ("%__mneme_tid_x", "%__mneme_tid_y", "%__mneme_tid_z", "%__mneme_linear")
CTAID_PARAM = "%__mneme_ctaid_x"


def block_extent_loads() -> list[str]:
    """IR lines of an entry that load the launch context (``%ctx``) and the block's extent from it
    (``%ntx``, ``%nty``, ``%ntz``)."""
    return [
        "  %ctx = call ptr @__mneme_ctx()",
        f"  %ntxp = getelementptr i8, ptr %ctx, i64 {CTX_NTID}",
        f"  %ntyp = getelementptr i8, ptr %ctx, i64 {CTX_NTID + 4}",
        f"  %ntzp = getelementptr i8, ptr %ctx, i64 {CTX_NTID + 8}",
        "  %ntx = load i32, ptr %ntxp, align 4",
        "  %nty = load i32, ptr %ntyp, align 4",
        "  %ntz = load i32, ptr %ntzp, align 4",
    ]


def thread_indices_as_parameters(text: str, kernel_name: str, serial: bool = False) -> tuple[str, bool, bool]:
    """Pass the thread index (and the block's x index) to the kernel as parameters, when only the kernel reads it.

    Then `entry` can run a whole block in one call (the kernel inlined into a loop over
    the threads, every block-invariant value hoisted out of it). Returns (text, done, runs):
    `runs` when the call may run several blocks along x: nothing else reads the block's x index,
    the module has no atomic or volatile access, fence or printf (`ORDERED`) and the caller did
    not ask for blocks one at a time (`serial`: shared memory, a block's own; atomics in code
    added later), so running the rows of consecutive blocks one after another is a thread order
    of the GPU whose results are those of block after block.
    """
    lines = text.split("\n")
    span = function_span(lines, kernel_name)
    if span is None:
        return text, False, False
    start, end = span
    for i, line in enumerate(lines):
        if (i < start or i > end) and not line.startswith("declare ") and _THREAD_SREGS.search(line):
            return text, False, False  # another function reads the thread index: keep one call per thread
    if "@llvm.nvvm.activemask(" in "\n".join(lines[start:end]) or "sreg.lanemask" in "\n".join(lines[start:end]):
        return text, False, False
    if re.search(r"\b(noinline|optnone)\b", lines[start]):
        return text, False, False
    runs = (
        not serial
        and not any(
            (i < start or i > end) and not line.startswith("declare ") and _CTAID_X.search(line)
            for i, line in enumerate(lines)
        )
        and not any(ORDERED.search(line) for line in lines if not line.startswith("declare "))
    )
    for i in range(start + 1, end):
        m = _THREAD_SREG_CALL.match(lines[i])
        if not m:
            continue
        target, nvvm, amdgpu = m.groups()
        which = nvvm or _AMDGPU_SREG[amdgpu]
        if which.startswith("tid."):
            value = TID_PARAMS["xyz".index(which[-1])]
            lines[i] = f"{target} = or i32 {value}, 0"
        elif which == "laneid":
            lines[i] = f"{target} = and i32 %__mneme_linear, 31"
        elif which == "ctaid.x":
            lines[i] = f"{target} = or i32 {CTAID_PARAM}, 0"
        else:
            lines[i] = f"{target} = lshr i32 %__mneme_linear, 5"
    if any(_THREAD_SREGS.search(line) for line in lines[start + 1 : end]):
        return text, False, False  # a read of a form not rewritten above
    runs = runs and not any(_CTAID_X.search(line) for line in lines[start + 1 : end])
    line = lines[start]
    open_index, close = parameter_list(line, kernel_name)
    extra = ", ".join(f"i32 {p}" for p in (*TID_PARAMS, CTAID_PARAM))
    sep = ", " if line[open_index + 1 : close].strip() else ""
    lines[start] = line[:close] + sep + extra + line[close:]
    return "\n".join(lines), True, runs


def guard_split() -> bool:
    """Whether rows run the threads within a kernel's guard through its copy (`GUARD_ENV`, `row_ranges`)."""
    return (envvars.get(GUARD_ENV) or "1") not in ("0", "off", "no", "false")


def key() -> str:
    """The entry's form in the build key."""
    return VERSION if guard_split() else f"{VERSION}-unsplit"


_CALL = re.compile(r"\bcall\b[^@\n]*@(?!llvm\.)([-\w.$\"]+)\(")


def calls_nothing(text: str) -> bool:
    """Whether module `text` calls no function but LLVM's intrinsics: no assertion, trap or printf whose message
    would name a block (then a run's rows may run as one loop, whose failures name the run: `entry`)."""
    return all(
        m.group(1) == "__mneme_ctx" or m.group(1).startswith("__mneme.nvvm.read.ptx.sreg.")  # the context's reads
        for m in _CALL.finditer(text)
    )


def entry(
    kernel_name: str,
    unpacked: tuple[list[str], list[str]],
    runs: bool = False,
    loop_md: int | None = None,
    rows_as_one: bool = False,
    guard: Guard | None = None,
) -> str:
    """``__mneme_entry(args)`` that runs every thread of the block: x fastest, then y, then z.

    With `runs`, it runs ``mn_ctx.run`` blocks along x from the context's ctaid.x on, a row of
    threads of each in turn: for z, for y, for each block, for x. A 16x16 tile launch then walks
    memory row after row as a loop over the array would, instead of 16 rows of 64 bytes per block
    (the two orders in plain C: 2.2x at 2^20 floats, docs/design/investigations/host-grid-stride-2026-12-06.md).
    The entry stores each block's x index in the context, so that a failure names its block.
    `unpacked`: `retarget.unpack_args` of the kernel's parameters (the lines reading them, the call's arguments).

    `loop_md`: a free metadata number; rows shorter than SHORT_ROW threads then run a copy of the
    loop over x that asks LLVM to fold its remainder into masked vector steps instead of vector
    and scalar epilogues: a 16-thread row (a 16x16 tile) is one masked step (tile saxpy at 2^20:
    1.3x). Long rows keep the unmasked loop, which a masked one slowed (the stencil: 1.5x).

    `rows_as_one` (with `runs` and `loop_md`; for kernels that call nothing, `calls_nothing`): rows of a
    power-of-two length shorter than SHORT_ROW run the run's row, every block's threads in the same order, as
    one loop over m = b * ntx + x: x is m less (m >> log2 ntx) * ntx, so the kernel's ``bx * ntx + x`` folds
    back to ``bx0 * ntx + m`` and a 16x16 tile's row is one contiguous vector loop (saxpy tile at 2^20, one
    worker: 0.242 -> 0.172 ms; the stencil 0.469 -> 0.227 ms). No store of each block's index in the loop
    (it would keep it scalar): the entry marks the context (``mn_ctx.run_rows``), and a fault names the run's
    blocks, ``one of blocks (a..b, y, z)``. This copy replaces the masked one (two inlined copies, not three:
    compile time): short rows of another length then run the unmasked loop.

    `guard` (`row_ranges.find_guard`): long rows run the threads within the guard's range of the row (its span,
    computed once per row) through the kernel's copy whose guard branches are taken, those below and above it
    through the kernel; a run's rows as one loop run through the copy where every block's row lies within the
    range.
    """
    body, call_args = unpacked[0], list(unpacked[1])
    lines = [f"define void @{ENTRY}(ptr %args) {{", "entry:", *body]
    call_args += ["i32 %x", "i32 %y", "i32 %z", "i32 %lin", "i32 %bx"]
    lines += [
        *block_extent_loads(),
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {CTX_CTAID}",
        "  %bx0 = load i32, ptr %bxp, align 4",
    ]
    if runs:
        lines += [f"  %runp = getelementptr i8, ptr %ctx, i64 {CTX_RUN}", "  %run = load i32, ptr %runp, align 4"]
    else:
        lines += ["  %run = or i32 1, 0"]
    lines += [f"  %short = icmp ult i32 %ntx, {SHORT_ROW}"]
    flat_runs = runs and loop_md is not None and rows_as_one
    masked = loop_md is not None and not flat_runs  # the copy for short rows, where no flat copy replaces it
    if flat_runs:  # short rows of a power-of-two length: the run's rows as one loop (below)
        lines += [
            "  %ntx1 = add i32 %ntx, -1",
            "  %ntxm = and i32 %ntx, %ntx1",
            "  %pow2 = icmp eq i32 %ntxm, 0",
            "  %flatrun = and i1 %short, %pow2",
            "  %sx = call i32 @llvm.cttz.i32(i32 %ntx, i1 false)",
            "  %nf = mul i32 %run, %ntx",
        ]
    lines += [
        "  br label %lz",
        "lz:",
        "  %z = phi i32 [ 0, %entry ], [ %z1, %lz.latch ]",
        "  br label %ly",
        "ly:",
        "  %y = phi i32 [ 0, %lz ], [ %y1, %ly.latch ]",
        "  %zy = mul i32 %z, %nty",
        "  %zyy = add i32 %zy, %y",
        "  %row = mul i32 %zyy, %ntx",
        "  br i1 %flatrun, label %lf.pre, label %lb" if flat_runs else "  br label %lb",
        "lb:",
        "  %b = phi i32 [ 0, %ly ], [ %b1, %lb.latch ]",
        "  %bx = add i32 %bx0, %b",
        *(["  store i32 %bx, ptr %bxp, align 4"] if runs else []),
        *(_guarded_rows(guard, call_args, "%lxs" if masked else None) if guard else []),
        *([] if guard else ["  br i1 %short, label %lxs, label %lx" if masked else "  br label %lx"]),
        "lx:",
        *(
            [
                "  %x = phi i32 [ 0, %lx.pre ], [ %ghi, %lx.last ], [ %x1, %lx ]",
                "  %xend = phi i32 [ %glo, %lx.pre ], [ %ntx, %lx.last ], [ %xend, %lx ]",
            ]
            if guard
            else ["  %x = phi i32 [ 0, %lb ], [ %x1, %lx ]"]
        ),
        "  %lin = add i32 %row, %x",
        f"  call void {symbol_ref(kernel_name)}({', '.join(call_args)})",
        "  %x1 = add nuw i32 %x, 1",
        *(
            [  # the threads below the span, then those above it (`_guarded_rows`)
                "  %cx = icmp ult i32 %x1, %xend",
                "  br i1 %cx, label %lx, label %lx.done",
                "lx.done:",
                "  %xall = icmp eq i32 %xend, %ntx",
                "  br i1 %xall, label %lb.latch, label %lx.mid",
            ]
            if guard
            else ["  %cx = icmp ult i32 %x1, %ntx", "  br i1 %cx, label %lx, label %lb.latch"]
        ),
    ]
    if masked:  # the same loop for short rows, its remainder folded into masked vector steps
        short_args = ", ".join(
            a.replace("%x", "%xs").replace("%lin", "%lins") if a in ("i32 %x", "i32 %lin") else a for a in call_args
        )
        lines += [
            "lxs:",
            "  %xs = phi i32 [ 0, %lb ], [ %xs1, %lxs ]",
            "  %lins = add i32 %row, %xs",
            f"  call void {symbol_ref(kernel_name)}({short_args})",
            "  %xs1 = add nuw i32 %xs, 1",
            "  %cxs = icmp ult i32 %xs1, %ntx",
            f"  br i1 %cxs, label %lxs, label %lb.latch, !llvm.loop !{loop_md}",
        ]
    if flat_runs:
        # x of the run's row as one index m: block m >> sx of the run, thread m - (m >> sx) * ntx of it, so that
        # the kernel's bx * ntx + x folds back to bx0 * ntx + m and a 16x16 tile's row is one contiguous loop
        lines += [
            "lf.pre:",
            "  store i32 %bx0, ptr %bxp, align 4",
            f"  %rrp = getelementptr i8, ptr %ctx, i64 {CTX_RUN_ROWS}",
            "  store i32 1, ptr %rrp, align 4",
            "  br label %lfc" if guard else "  br label %lf",
        ]
        flat_loops = [("lf", kernel_name, "lf.pre" if not guard else "lfc.done")]
        if guard:  # every block's row within the guard's span: the run's row through the guard's copy
            lines += [
                "lfc:",  # blocks whose row leaves the range, counted without an early exit: a loop LLVM vectorizes
                "  %fb = phi i32 [ 0, %lf.pre ], [ %fb1, %lfc ]",
                "  %fout = phi i32 [ 0, %lf.pre ], [ %fout1, %lfc ]",
                "  %fbx = add i32 %bx0, %fb",
                _span_call("%cs", guard, call_args, "%fbx"),
                "  %cs.l = extractvalue { i64, i64 } %cs, 0",
                "  %cs.h = extractvalue { i64, i64 } %cs, 1",
                "  %cs.n = zext i32 %ntx to i64",
                "  %cs.lo = icmp sgt i64 %cs.l, 0",
                "  %cs.hi = icmp slt i64 %cs.h, %cs.n",
                "  %cs.any = or i1 %cs.lo, %cs.hi",
                "  %cs.one = zext i1 %cs.any to i32",
                "  %fout1 = add i32 %fout, %cs.one",
                "  %fb1 = add nuw i32 %fb, 1",
                "  %fbm = icmp ult i32 %fb1, %run",
                "  br i1 %fbm, label %lfc, label %lfc.done",
                "lfc.done:",
                "  %fall = icmp eq i32 %fout1, 0",
                "  br i1 %fall, label %lfg, label %lf",
            ]
            flat_loops.append(("lfg", guard.name, "lfc.done"))

        def flat_args(loop: str) -> str:
            renamed = {a: f"i32 %{loop}.{a[5:]}f" for a in ("i32 %x", "i32 %lin", "i32 %bx")}
            return ", ".join(renamed.get(a, a) for a in call_args)

        for loop, callee, pre in flat_loops:
            lines += [
                f"{loop}:",
                f"  %{loop}.m = phi i32 [ 0, %{pre} ], [ %{loop}.m1, %{loop} ]",
                f"  %{loop}.bo = lshr i32 %{loop}.m, %sx",
                f"  %{loop}.bxf = add i32 %bx0, %{loop}.bo",
                f"  %{loop}.bon = mul i32 %{loop}.bo, %ntx",
                f"  %{loop}.xf = sub i32 %{loop}.m, %{loop}.bon",
                f"  %{loop}.linf = add i32 %row, %{loop}.xf",
                f"  call void {symbol_ref(callee)}({flat_args(loop)})",
                f"  %{loop}.m1 = add nuw i32 %{loop}.m, 1",
                f"  %{loop}.cf = icmp ult i32 %{loop}.m1, %nf",
                f"  br i1 %{loop}.cf, label %{loop}, label %ly.latch",
            ]
    lines += [
        "lb.latch:",
        "  %b1 = add nuw i32 %b, 1",
        "  %cb = icmp ult i32 %b1, %run",
        "  br i1 %cb, label %lb, label %ly.latch",
        "ly.latch:",
        "  %y1 = add nuw i32 %y, 1",
        "  %cy = icmp ult i32 %y1, %nty",
        "  br i1 %cy, label %ly, label %lz.latch",
        "lz.latch:",
        "  %z1 = add nuw i32 %z, 1",
        "  %cz = icmp ult i32 %z1, %ntz",
        "  br i1 %cz, label %lz, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]
    if masked:
        lines += [
            f"!{loop_md} = distinct !{{!{loop_md}, !{loop_md + 1}}}",
            f'!{loop_md + 1} = !{{!"llvm.loop.vectorize.predicate.enable", i1 true}}',
        ]
    if flat_runs:
        lines += ["declare i32 @llvm.cttz.i32(i32, i1)"]
    return "\n".join(lines)


def _guarded_rows(guard: Guard, call_args: list[str], short_label: str | None) -> list[str]:
    """The lines from the end of block `lb` to the loop over a row's threads (`lx`): the span of the guard's threads
    (`row_ranges`), threads [0, lo) through the kernel (`lx`, then `lx.mid`), [lo, hi) through the guard's copy
    (`lxh`), [hi, ntx) through the kernel again (`lx.last`): the row's threads in their order."""
    lines = [
        f"  br i1 %short, label {short_label}, label %lx.pre" if short_label else "  br label %lx.pre",
        "lx.pre:",
        _span_call("%gs", guard, call_args, "%bx"),
        *_clamped_span("%gs", "%glo", "%ghi"),
        "  %gfirst = icmp ne i32 %glo, 0",
        "  br i1 %gfirst, label %lx, label %lx.mid",
        "lx.mid:",
        "  %gmid = icmp ult i32 %glo, %ghi",
        "  br i1 %gmid, label %lxh, label %lx.last",
        "lxh:",
        "  %xh = phi i32 [ %glo, %lx.mid ], [ %xh1, %lxh ]",
        "  %linh = add i32 %row, %xh",
    ]
    args = ", ".join({"i32 %x": "i32 %xh", "i32 %lin": "i32 %linh"}.get(a, a) for a in call_args)
    lines += [
        f"  call void {symbol_ref(guard.name)}({args})",
        "  %xh1 = add nuw i32 %xh, 1",
        "  %cxh = icmp ult i32 %xh1, %ghi",
        "  br i1 %cxh, label %lxh, label %lx.last",
        "lx.last:",
        "  %glast = icmp ult i32 %ghi, %ntx",
        "  br i1 %glast, label %lx, label %lb.latch",
    ]
    return lines


def _span_call(out: str, guard: Guard, call_args: list[str], bx: str) -> str:
    """The line calling the guard's span for the row of block `bx`: the kernel's arguments, thread x 0."""
    args = ", ".join({"i32 %x": "i32 0", "i32 %lin": "i32 %row", "i32 %bx": f"i32 {bx}"}.get(a, a) for a in call_args)
    return f"  {out} = call {{ i64, i64 }} {symbol_ref(guard.span_name)}({args})"


def _clamped_span(span: str, lo: str, hi: str) -> list[str]:
    """`span`'s {lo, hi} as i32 `lo` and `hi`, 0 <= lo <= hi <= ntx."""
    p = lo
    return [
        f"  {p}.l = extractvalue {{ i64, i64 }} {span}, 0",
        f"  {p}.h = extractvalue {{ i64, i64 }} {span}, 1",
        f"  {p}.n = zext i32 %ntx to i64",
        *min_max(f"{p}.l0", "sgt", f"{p}.l", "0"),
        *min_max(f"{p}.l1", "slt", f"{p}.l0", f"{p}.n"),
        *min_max(f"{p}.h0", "slt", f"{p}.h", f"{p}.n"),
        *min_max(f"{p}.h1", "sgt", f"{p}.h0", f"{p}.l1"),
        f"  {lo} = trunc i64 {p}.l1 to i32",
        f"  {hi} = trunc i64 {p}.h1 to i32",
    ]
