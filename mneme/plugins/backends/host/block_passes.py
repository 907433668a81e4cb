"""The loops a block step entry (`block_steps`) runs its passes with, and what they learn of the threads' resume points.

A pass runs the step function once per thread, in a loop over the block's threads (`threads`: z, y, x) or, for
blocks of rows of a power-of-two length, over each z plane's linear index (`flat`). Every loop keeps what decides
the next pass: the least and greatest resume point its threads stored (with pauses, also the first and last paused
thread and the greatest point of the others), folded in the loop (`threads`), after it (`census`), or not at all
where thread 0's stop tells every thread's (`steady_exit`). Paused threads run their tails in thread order
(`drain`).
"""

from __future__ import annotations

from mneme.plugins.backends.host import block_uniform, steps

CHUNK = 16  # threads of a row one vector step of a row-chunked flat loop runs (`flat`)

# what the loops over the threads fold their threads' resume points into: least and greatest (lo, hi); with
# pauses, the first and last paused thread (pf, pt) and the greatest point of the others (hn)
FOLDS = ("lo", "hi", "pf", "pt", "hn")
FOLD_OPS = {
    "lo": ("smin", 0x7FFFFFFF),
    "hi": ("smax", -0x80000000),
    "pf": ("smin", 0x7FFFFFFF),
    "pt": ("smax", -1),
    "hn": ("smax", -1),
}
STOPS = steps.PAUSE_BIT | steps.YIELD_BIT  # points a thread stops at between barriers (pauses and yields)


def drain(call: str, cell: str, unknown: list[str], yields: bool) -> list[str]:
    """The paused threads, first to last in thread order, each to its return; then on to ``drained``.

    With `yields`, a thread stopped at a loop's header runs to its next stop, which may be another: the
    threads' points are then counted again (``recount``) and the pass starts over."""
    p = "drain."
    return [
        "drain:",
        "  %drain.first = load i32, ptr %pf.a, align 4",
        "  %drain.last = load i32, ptr %pt.a, align 4",
        "  %drain.hn = load i32, ptr %hn.a, align 4",
        "  %drain.none = icmp sgt i32 %drain.first, %drain.last",
        "  br i1 %drain.none, label %mixed, label %drain.lx",
        "drain.lx:",
        "  %drain.l = phi i32 [ %drain.first, %drain ], [ %drain.l1, %drain.next ]",
        f"  %drain.rp = getelementptr inbounds {cell}, ptr %frames, i32 %drain.l",
        "  %drain.fp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %drain.l",
        "  %drain.r = load i32, ptr %drain.rp, align 4",
        f"  %drain.pb = and i32 %drain.r, {STOPS}",
        "  %drain.pz = icmp ne i32 %drain.pb, 0",
        "  %drain.live = icmp ne i32 %drain.r, -1",
        "  %drain.on = and i1 %drain.pz, %drain.live",
        "  br i1 %drain.on, label %drain.call, label %drain.next",
        "drain.call:",
        "  %drain.x = urem i32 %drain.l, %ntx",
        "  %drain.q = udiv i32 %drain.l, %ntx",
        "  %drain.y = urem i32 %drain.q, %nty",
        "  %drain.z = udiv i32 %drain.q, %nty",
        call.replace("{p}", p),
        "  br label %drain.next",
        "drain.next:",
        "  %drain.l1 = add nsw i32 %drain.l, 1",
        "  %drain.more = icmp sle i32 %drain.l1, %drain.last",
        "  br i1 %drain.more, label %drain.lx, label %drain.done",
        "drain.done:",
        *unknown,  # the folds of field values cover only the threads a loop ran
        *(
            _recount(cell)
            if yields
            else [  # every paused thread returned; the others kept their points
                "  store i32 -1, ptr %lo.a, align 4",
                "  store i32 %drain.hn, ptr %hi.a, align 4",
                "  br label %drained",
            ]
        ),
    ]


def _recount(cell: str) -> list[str]:
    """Every thread's point folded again (`FOLDS`), thread by thread; then back to ``pass``."""
    lines = [
        *(f"  store i32 {ident}, ptr %{f}.a, align 4" for f, (_, ident) in FOLD_OPS.items()),
        "  br label %recount",
        "recount:",
        "  %rc.l = phi i32 [ 0, %drain.done ], [ %rc.l1, %recount ]",
        f"  %rc.p = getelementptr inbounds {cell}, ptr %frames, i32 %rc.l",
        "  %rc.r = load i32, ptr %rc.p, align 4",
        f"  %rc.sb = and i32 %rc.r, {STOPS}",
        "  %rc.sz = icmp ne i32 %rc.sb, 0",
        "  %rc.live = icmp ne i32 %rc.r, -1",
        "  %rc.stop = and i1 %rc.sz, %rc.live",
        f"  %rc.pf = select i1 %rc.stop, i32 %rc.l, i32 {0x7FFFFFFF}",
        "  %rc.pt = select i1 %rc.stop, i32 %rc.l, i32 -1",
        "  %rc.hv = select i1 %rc.stop, i32 -1, i32 %rc.r",
    ]
    values = {"lo": "%rc.r", "hi": "%rc.r", "pf": "%rc.pf", "pt": "%rc.pt", "hn": "%rc.hv"}
    for f, (op, _) in FOLD_OPS.items():
        lines += [
            f"  %rc.{f}0 = load i32, ptr %{f}.a, align 4",
            f"  %rc.{f}1 = call i32 @llvm.{op}.i32(i32 %rc.{f}0, i32 {values[f]})",
            f"  store i32 %rc.{f}1, ptr %{f}.a, align 4",
        ]
    return [
        *lines,
        "  %rc.l1 = add nuw i32 %rc.l, 1",
        "  %rc.more = icmp ult i32 %rc.l1, %n",
        "  br i1 %rc.more, label %recount, label %pass",
    ]


def flat(
    name: str,
    body: list[str],
    loop_md: int,
    soa: bool,
    steady: set[int] | None = None,
    chunk: bool = False,
    bound: str = "%nxy",
) -> list[str]:
    """A loop over the linear index of each z plane of a block of rows of a power-of-two length, around `body`;
    then the census.

    ``tid.y`` is the plane's index shifted right, ``tid.x`` the index less ``tid.y * ntid.x`` (not a mask: the
    kernel's ``tid.y * ntid.x + tid.x`` folds back to the index, so a 16x16 tile's accesses by linear thread
    stay contiguous across its rows). The threads run in the nested loops' order. The loop over the planes makes
    the flat loop its parent's only child: LLVM's unswitching scales its cost by the number of sibling loops, and
    the entry's many top-level loops kept it from unswitching a uniform branch (a shared cell's test) there, which
    left the loop scalar. No folds in the loop: one reduction per pass (`census`), not one per row, and none where
    thread 0 stopped at one of the `steady` stops (`steady_exit`).

    With `chunk` (rows of at least `CHUNK` threads), the loop over the plane runs chunks of `CHUNK` threads of one
    row, each one vector step: ``tid.y`` is the same in every lane, so an index ``tid.y * W + tid.x`` into a buffer
    (a 16x16 tile's ``x[(by * 16 + ty) * 1024 + bx * 16 + tx]``) is a contiguous load, not a gather.

    `bound`: the threads of a plane the loop runs (`block_guards`: the others would change nothing).
    """
    p = name + "."
    inner = [line.replace("{p}", p) for line in body]
    last = inner[-1].strip().endswith(":") and inner[-1].strip()[:-1]
    head = [
        f"{name}:",
        f"  br label %{p}lz",
        f"{p}lz:",
        f"  %{p}z = phi i32 [ 0, %{name} ], [ %{p}z1, %{p}lz.latch ]",
        f"  %{p}zb = mul i32 %{p}z, %nxy",
    ]
    tail = [
        f"{p}lz.latch:",
        f"  %{p}z1 = add nuw i32 %{p}z, 1",
        f"  %{p}cz = icmp ult i32 %{p}z1, %ntz",
        f"  br i1 %{p}cz, label %{p}lz, label %{p + 'st' if steady else 'census'}",
        *(steady_exit(p, steady) if steady else []),
    ]
    if chunk:
        return [
            *head,
            f"  br label %{p}lc",
            f"{p}lc:",
            f"  %{p}c = phi i32 [ 0, %{p}lz ], [ %{p}c1, %{p}lc.latch ]",
            f"  %{p}y = lshr i32 %{p}c, %sx",
            f"  %{p}yx = mul i32 %{p}y, %ntx",
            f"  %{p}xc = sub i32 %{p}c, %{p}yx",
            f"  br label %{p}lx",
            f"{p}lx:",
            f"  %{p}j = phi i32 [ 0, %{p}lc ], [ %{p}j1, %{last or p + 'lx'} ]",
            f"  %{p}m = add nuw i32 %{p}c, %{p}j",
            f"  %{p}x = add nuw i32 %{p}xc, %{p}j",
            f"  %{p}l = add i32 %{p}zb, %{p}m",
            f"  %{p}fp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %{p}l",
            f"  %{p}rp = getelementptr inbounds {'i32' if soa else '%__mneme_frame_t'}, ptr %frames, i32 %{p}l",
            *inner,
            f"  %{p}j1 = add nuw i32 %{p}j, 1",
            f"  %{p}cl = icmp ult i32 %{p}j1, {CHUNK}",
            f"  br i1 %{p}cl, label %{p}lx, label %{p}lc.latch, !llvm.loop !{loop_md}",
            f"{p}lc.latch:",
            f"  %{p}c1 = add nuw i32 %{p}c, {CHUNK}",
            f"  %{p}cc = icmp ult i32 %{p}c1, {bound}",
            f"  br i1 %{p}cc, label %{p}lc, label %{p}lz.latch",
            *tail,
        ]
    return [
        *head,
        f"  br label %{p}lx",
        f"{p}lx:",
        f"  %{p}m = phi i32 [ 0, %{p}lz ], [ %{p}m1, %{last or p + 'lx'} ]",
        f"  %{p}y = lshr i32 %{p}m, %sx",
        f"  %{p}yx = mul i32 %{p}y, %ntx",
        f"  %{p}x = sub i32 %{p}m, %{p}yx",
        f"  %{p}l = add i32 %{p}zb, %{p}m",
        f"  %{p}fp = getelementptr inbounds %__mneme_frame_t, ptr %frames, i32 %{p}l",
        f"  %{p}rp = getelementptr inbounds {'i32' if soa else '%__mneme_frame_t'}, ptr %frames, i32 %{p}l",
        *inner,
        f"  %{p}m1 = add nuw i32 %{p}m, 1",
        f"  %{p}cl = icmp ult i32 %{p}m1, {bound}",
        f"  br i1 %{p}cl, label %{p}lx, label %{p}lz.latch, !llvm.loop !{loop_md}",
        *tail,
    ]


def census(cell: str, pauses: bool, used: dict[int, str], fields: list[str]) -> list[str]:
    """``census:`` one loop over every thread folding the least and greatest resume point and the `used` fields'
    least and greatest values (`block_uniform.fold_specs`), after a `flat` loop; then back to ``pass``.

    With pauses, the first and last paused thread and the greatest point of the others (the other `FOLDS`) are
    folded by a second loop only where the points differ: ``pass`` reads them (``drain``) only then."""
    p = "census."
    specs = [(f, "i32", FOLD_OPS[f][0], FOLD_OPS[f][1], f"%{p}rr") for f in FOLDS[:2]]
    specs += block_uniform.fold_specs(used, p)
    lines = _census_loop("census", cell, specs, [*block_uniform.fold_values(used, fields, p, "")], "{CENSUS_MD}")
    if not pauses:
        return [*lines, "  br label %pass"]
    q = "census.p."
    values = {"pf": "pf", "pt": "pt", "hn": "hv"}
    specs = [(f, "i32", FOLD_OPS[f][0], FOLD_OPS[f][1], f"%{q}{values[f]}") for f in FOLDS[2:]]
    return [
        *lines,
        "  %census.lo = load i32, ptr %lo.a, align 8",
        "  %census.hi = load i32, ptr %hi.a, align 8",
        "  %census.same = icmp eq i32 %census.lo, %census.hi",
        "  br i1 %census.same, label %pass, label %census.p",
        "census.p:",
        f"  %census.p.all = call {_PAUSED_T} @{PAUSED_CENSUS}(ptr %frames, i32 %n)",
        *(
            line
            for j, f in enumerate(FOLDS[2:])
            for line in (
                f"  %census.p.{f} = extractvalue {_PAUSED_T} %census.p.all, {j}",
                f"  store i32 %census.p.{f}, ptr %{f}.a, align 8",
            )
        ),
        "  br label %pass",
    ]


PAUSED_CENSUS = "__mneme_paused_census"
_PAUSED_T = "{ i32, i32, i32 }"


def paused_census(cell: str, md: str) -> list[str]:
    """``@__mneme_paused_census(frames, n)``: the first and last paused thread and the greatest point of the others.

    A function of its own, not inlined: a loop in the entry that 1D blocks never run made their passes slower
    (what LLVM keeps in registers across the pass loop)."""
    q = "census.p."
    values = {"pf": "pf", "pt": "pt", "hn": "hv"}
    specs = [(f, "i32", FOLD_OPS[f][0], FOLD_OPS[f][1], f"%{q}{values[f]}") for f in FOLDS[2:]]
    loop = _census_loop("census.p", cell, specs, _paused(q), md)
    loop[0] = "census.p:"
    return [
        f"define internal {_PAUSED_T} @{PAUSED_CENSUS}(ptr %frames, i32 %n) noinline {{",
        "entry:",
        *(f"  %{f}.a = alloca i32, align 8" for f in FOLDS[2:]),
        "  br label %census.p",
        *loop,
        *(f"  %r.{f} = load i32, ptr %{f}.a, align 8" for f in FOLDS[2:]),
        f"  %r0 = insertvalue {_PAUSED_T} poison, i32 %r.pf, 0",
        f"  %r1 = insertvalue {_PAUSED_T} %r0, i32 %r.pt, 1",
        f"  %r2 = insertvalue {_PAUSED_T} %r1, i32 %r.hn, 2",
        f"  ret {_PAUSED_T} %r2",
        "}",
    ]


def _paused(p: str) -> list[str]:
    """Lines after thread ``%{p}l`` ran (its point ``%{p}rr``): what it adds to the folds of the first and last
    paused thread (``%{p}pf``, ``%{p}pt``) and of the greatest point of the others (``%{p}hv``)."""
    return [
        f"  %{p}pb = and i32 %{p}rr, {STOPS}",
        f"  %{p}pz = icmp ne i32 %{p}pb, 0",
        f"  %{p}live = icmp ne i32 %{p}rr, -1",
        f"  %{p}pp = and i1 %{p}pz, %{p}live",
        f"  %{p}pf = select i1 %{p}pp, i32 %{p}l, i32 {0x7FFFFFFF}",
        f"  %{p}pt = select i1 %{p}pp, i32 %{p}l, i32 -1",
        f"  %{p}hv = select i1 %{p}pp, i32 -1, i32 %{p}rr",
    ]


def _census_loop(name: str, cell: str, specs: list[tuple[str, str, str, int, str]], values: list[str], md: str):
    """A loop over every thread (``%{name}.l``, its point ``%{name}.rr``) folding `specs` from `values`' lines;
    it ends in ``{name}.done:``, to which the caller adds the branch on."""
    p = name + "."
    lines = [f"{name}:", *(f"  store {w} {ident}, ptr %{c}.a, align 8" for c, w, _, ident, _ in specs)]
    lines += [
        f"  br label %{p}lx",
        f"{p}lx:",
        f"  %{p}l = phi i32 [ 0, %{name} ], [ %{p}l1, %{p}lx ]",
        f"  %{p}rp = getelementptr inbounds {cell}, ptr %frames, i32 %{p}l",
        f"  %{p}rr = load i32, ptr %{p}rp, align 4",
        *values,
    ]
    for c, w, op, _, value in specs:
        lines += [
            f"  %{p}o.{c} = load {w}, ptr %{c}.a, align 8",
            f"  %{p}n.{c} = call {w} @llvm.{op}.{w}({w} %{p}o.{c}, {w} {value})",
            f"  store {w} %{p}n.{c}, ptr %{c}.a, align 8",
        ]
    return [
        *lines,
        f"  %{p}l1 = add nuw i32 %{p}l, 1",
        f"  %{p}more = icmp ult i32 %{p}l1, %n",
        f"  br i1 %{p}more, label %{p}lx, label %{p}done, !llvm.loop !{md}",
        f"{p}done:",
    ]


def threads(
    name: str,
    body: list[str],
    loop_md: int | None,
    soa: bool,
    tag: str = "",
    pauses: bool = False,
    fields: tuple[dict[int, str], list[str]] = ({}, []),
    steady: set[int] | None = None,
    bound: tuple[str, int] | None = None,
) -> list[str]:
    """A loop over the block's threads (z, y, x; x innermost) around `body`, then back to ``pass``.

    In `body`, ``{p}`` stands for the loop's prefix: ``%{p}x`` etc. are the thread's index, ``%{p}fp`` its frame,
    ``%{p}rp`` its resume point. After `body`, the loop folds the thread's resume point into its least and greatest
    (``%lo.a``, ...), and the values of the frame fields `fields` names (`block_uniform.fold_specs`), with
    `tag` (the loop's access group) on those accesses. With `steady` stops (`steady_exit`), no resume points are folded.
    `bound`: (the threads of a row of a 1D block the loop runs, their point): the others (`block_guards`) would store
    nothing but that point, which the loop folds in for them (`after_bound`).
    """
    p = name + "."
    inner = [line.replace("{p}", p) for line in body]
    last = inner[-1].strip().endswith(":") and inner[-1].strip()[:-1]
    tail = f", !llvm.loop !{loop_md}" if loop_md is not None else ""
    names = () if steady else FOLDS if pauses else FOLDS[:2]
    values = {"lo": "rr", "hi": "rr", "pf": "pf", "pt": "pt", "hn": "hv"}
    specs = [(f, "i32", FOLD_OPS[f][0], FOLD_OPS[f][1], f"%{p}{values[f]}") for f in names]
    specs += block_uniform.fold_specs(fields[0], p)
    start, fold = [], []
    for cell, w, op, ident, value in specs:
        start.append(f"  store {w} {ident}, ptr %{cell}.a, align 8")
        fold += [
            f"  %{p}o.{cell} = load {w}, ptr %{cell}.a, align 8{tag}",
            f"  %{p}n.{cell} = call {w} @llvm.{op}.{w}({w} %{p}o.{cell}, {w} {value})",
            f"  store {w} %{p}n.{cell}, ptr %{cell}.a, align 8{tag}",
        ]
    return [
        f"{name}:",
        *start,
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
        f"  %{p}rp = getelementptr inbounds {'i32' if soa else '%__mneme_frame_t'}, ptr %frames, i32 %{p}l",
        *inner,
        *([] if steady else [f"  %{p}rr = load i32, ptr %{p}rp, align 4{tag}"]),
        *(_paused(p) if pauses and not steady else []),
        *block_uniform.fold_values(*fields, p, tag),
        *fold,
        f"  %{p}x1 = add nuw i32 %{p}x, 1",
        f"  %{p}cx = icmp ult i32 %{p}x1, {bound[0] if bound else '%ntx'}",
        f"  br i1 %{p}cx, label %{p}lx, label %{p}ly.latch{tail}",
        f"{p}ly.latch:",
        f"  %{p}y1 = add nuw i32 %{p}y, 1",
        f"  %{p}cy = icmp ult i32 %{p}y1, %nty",
        f"  br i1 %{p}cy, label %{p}ly, label %{p}lz.latch",
        f"{p}lz.latch:",
        f"  %{p}z1 = add nuw i32 %{p}z, 1",
        f"  %{p}cz = icmp ult i32 %{p}z1, %ntz",
        f"  br i1 %{p}cz, label %{p}lz, label %{p + 'st' if steady else p + 'bd' if bound else 'pass'}",
        *(steady_exit(p, steady) if steady else after_bound(p, bound, pauses) if bound else []),
    ]


def after_bound(p: str, bound: tuple[str, int], pauses: bool) -> list[str]:
    """``{p}bd:`` after a loop that stopped at `bound` (`threads`): the threads it skipped hold the bound's point,
    folded into the least and greatest (and, with pauses, the greatest point of the threads not paused)."""
    limit, point = bound
    folds = [("lo", "smin"), ("hi", "smax")] + ([("hn", "smax")] if pauses else [])
    return [
        f"{p}bd:",
        f"  %{p}bd.cut = icmp ult i32 {limit}, %ntx",
        f"  br i1 %{p}bd.cut, label %{p}bd.f, label %pass",
        f"{p}bd.f:",
        *(
            line
            for f, op in folds
            for line in (
                f"  %{p}bd.o.{f} = load i32, ptr %{f}.a, align 8",
                f"  %{p}bd.n.{f} = call i32 @llvm.{op}.i32(i32 %{p}bd.o.{f}, i32 {point})",
                f"  store i32 %{p}bd.n.{f}, ptr %{f}.a, align 8",
            )
        ),
        "  br label %pass",
    ]


def steady_exit(p: str, stops: set[int]) -> list[str]:
    """``{p}st:`` after a loop that folded no resume points: where thread 0 stopped at one of `stops`, which every
    thread reaches alike (`divergence.steady_stops`), so did every thread: its point is the least and the greatest;
    otherwise the census folds them."""
    tests = [f"  %{p}st.is{j} = icmp eq i32 %{p}st.r0, {v}" for j, v in enumerate(sorted(stops))]
    pick = f"%{p}st.is0"
    for j in range(1, len(tests)):
        tests.append(f"  %{p}st.any{j} = or i1 {pick}, %{p}st.is{j}")
        pick = f"%{p}st.any{j}"
    return [
        f"{p}st:",
        f"  %{p}st.r0 = load i32, ptr %frames, align 4",
        *tests,
        f"  br i1 {pick}, label %{p}st.same, label %census",
        f"{p}st.same:",
        f"  store i32 %{p}st.r0, ptr %lo.a, align 4",
        f"  store i32 %{p}st.r0, ptr %hi.a, align 4",
        "  br label %pass",
    ]
