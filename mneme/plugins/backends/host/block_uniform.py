"""Frame fields the same in every thread of a block, read once per pass (the block step form, `block_steps`).

A value that lives across a barrier lives in each thread's frame, even where every thread holds the same
one (a tree reduction's stride ``k``, a loop counter). Loaded per thread, it makes every access it
indexes a gather (``s[t + k]``). Here each load of a frame field that reads the value the field had when
the pass began (no store to the field can come before it in the interval) gets a twin: the field's value
when every thread holds the same, passed in as a parameter. Every loop over all the threads folds the least
and greatest value of each such field after each thread ran (`fold_specs`); where they are equal (the
parameter is the least), the next pass's loop runs the copy of the step function that reads the parameter
(uniform: contiguous accesses), else the copy that reads each thread's frame. Exact: the copy chosen reads
the same values either way.

A field that a thread's index feeds (a grid-stride loop's ``i = blockIdx.x * blockDim.x + threadIdx.x``,
advanced by the same stride in every thread) is never the same in every thread, but often the same up to
the thread's linear index: such a field (`thread_indexed`) folds the least and greatest of its value less
the linear index instead, and its twin reads the parameter plus the linear index, so that ``x[i]`` is a
contiguous load, not a gather (a gather's misses serialize where the data leaves the caches).
"""

from __future__ import annotations

import re
from collections import deque

from mneme.plugins.backends.host.irtext import LABEL_REF, blocks_between

_SCALAR = re.compile(r"^(?:i1|i8|i16|i32|i64|ptr)$")  # compared as integers (a float is left alone)
AT = "%__mneme_snap_at"  # the interval whose first values the parameters hold; -2: none
NONE = -2
# a field's value type with this suffix (in `used`): the same in every thread up to the linear thread index
AFFINE = "+l"
LINEAR = "%__mneme_linear"  # the step function's linear thread index
_THREAD_INDEX = ("%__mneme_tid_x", "%__mneme_tid_y", "%__mneme_tid_z", LINEAR)
_NAME = re.compile(r"%[-\w.$]+")


def value_type(ty: str) -> str:
    """The LLVM type of a `used` field's value (without `AFFINE`)."""
    return ty.removesuffix(AFFINE)


def thread_indexed(lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]]) -> set[int]:
    """The integer frame fields (indices) whose stored values the thread index may feed, through values and slots.

    A guess, checked at run time (the fold of the value less the linear index): a field it names that is not the
    same in every thread up to its index only loses its twin."""
    defs: dict[str, list[str]] = {}  # value -> the names its instruction reads; slot -> the values stored into it
    for line in lines[start + 1 : end]:
        stored = re.match(r"^\s*store \S+ (%[-\w.$]+), ptr (%[-\w.$]+)", line)
        if stored:
            defs.setdefault(stored.group(2), []).append(stored.group(1))
            continue
        value = re.match(r"^\s*(%[-\w.$]+) = (.*)$", line)
        if value:
            defs[value.group(1)] = _NAME.findall(value.group(2))
    tainted = set(_THREAD_INDEX)
    changed = True
    while changed:
        changed = False
        for name, reads in defs.items():
            if name not in tainted and any(r in tainted for r in reads):
                tainted.add(name)
                changed = True
    return {k for name, (k, f) in slots.items() if name in tainted and field_value_type(f) in ("i32", "i64")}


def field_value_type(field: str) -> str:
    """``T`` of a frame field ``{ [0 x <W x i8>], T }``."""
    return field.rsplit("], ", 1)[1].rstrip(" }").strip()


def snapshot_loads(
    lines: list[str],
    start: int,
    end: int,
    slots: dict[str, tuple[int, str]],
    points: dict[int, str],
    affine: set[int] = frozenset(),
) -> tuple[list[str], dict[int, list[int]], dict[int, str]]:
    """The step function with its pass-start loads of scalar fields twinned by parameters.

    `slots` maps a frame slot's name to (field index, field type); `points` a resume point to its label; the
    `affine` fields' twins read the parameter plus the linear thread index (see the module's docstring).
    Returns (lines, the fields each point's interval reads at their pass-start values, field -> value type,
    with `AFFINE` appended for the affine fields).
    """
    scalar = {name: (k, field_value_type(f)) for name, (k, f) in slots.items() if _SCALAR.match(field_value_type(f))}
    if not scalar:
        return lines, {}, {}
    blocks = blocks_between(lines, start, end)
    by_label = dict(blocks)
    succ = {label: LABEL_REF.findall(" ".join(lines[i] for i in idx)) for label, idx in blocks}
    load = re.compile(r"^\s*(%[-\w.$]+) = load (\S+), ptr (%[-\w.$]+)(,.*)?$")
    store = re.compile(r"^\s*store \S+ [^,]+, ptr (%[-\w.$]+)(,.*)?$")
    first: dict[int, set[int]] = {}  # line of a load -> the points at whose pass start it reads
    for point, label in points.items():
        region, todo = {label}, deque([label])
        while todo:
            for s in succ.get(todo.popleft(), ()):
                if s not in region and s in by_label:
                    region.add(s)
                    todo.append(s)
        preds: dict[str, set[str]] = {b: set() for b in region}
        for b in region:
            for s in succ[b]:
                if s in region:
                    preds[s].add(b)
        stored_in = {b: set() for b in region}  # slots a store may have written on entry to the block
        changed = True
        while changed:
            changed = False
            for b in region:
                state = set().union(*(_after(lines, by_label[p], stored_in[p], store) for p in preds[b]))
                if state != stored_in[b]:
                    stored_in[b], changed = state, True
        for b in region:
            state = set(stored_in[b])
            for i in by_label[b]:
                m = load.match(lines[i])
                if m and m.group(3) in scalar and m.group(3) not in state:
                    first.setdefault(i, set()).add(point)
                s = store.match(lines[i])
                if s:
                    state.add(s.group(1))
    if not first:
        return lines, {}, {}
    reads: dict[int, set[int]] = {}
    for i, at in first.items():
        k = scalar[load.match(lines[i]).group(3)][0]
        for point in at:
            reads.setdefault(point, set()).add(k)
    types = {k: t for k, t in scalar.values()}
    used = sorted({k for ks in reads.values() for k in ks})
    affine = {k for k in affine if types.get(k) in ("i32", "i64")}
    params = "".join(f", {types[k]} %__mneme_snap.{k}" for k in used)
    header = lines[start].replace("i64 %__mneme_frame_n", f"i64 %__mneme_frame_n, i32 {AT}{params}")
    out = [*lines[:start], header]
    for i in range(start + 1, end):
        if i not in first:
            out.append(lines[i])
            continue
        m = load.match(lines[i])
        name, ty, slot = m.group(1), m.group(2), m.group(3)
        k = scalar[slot][0]
        tests = [f"{name}.at{j} = icmp eq i32 {AT}, {p}" for j, p in enumerate(sorted(first[i]))]
        pick = f"{name}.at0"
        out += [f"  {name}.fl = load {ty}, ptr {slot}{m.group(4) or ''}", *(f"  {t}" for t in tests)]
        for j in range(1, len(tests)):
            out.append(f"  {name}.any{j} = or i1 {pick}, {name}.at{j}")
            pick = f"{name}.any{j}"
        twin = f"%__mneme_snap.{k}"
        if k in affine:  # every thread's value less its index, plus its index (wrapping: exact)
            twin = f"{name}.af"
            if ty == "i64":
                out += [f"  {name}.lx = zext i32 {LINEAR} to i64", f"  {twin} = add i64 %__mneme_snap.{k}, {name}.lx"]
            else:
                out.append(f"  {twin} = add i32 %__mneme_snap.{k}, {LINEAR}")
        out.append(f"  {name} = select i1 {pick}, {ty} {twin}, {ty} {name}.fl")
    used_types = {k: types[k] + (AFFINE if k in affine else "") for k in used}
    return out + lines[end:], {p: sorted(ks) for p, ks in reads.items()}, used_types


def _after(lines: list[str], idx: list[int], state: set[str], store: re.Pattern) -> set[str]:
    out = set(state)
    for i in idx:
        s = store.match(lines[i])
        if s:
            out.add(s.group(1))
    return out


def _wide(ty: str) -> str:
    return "i64" if value_type(ty) in ("ptr", "i64") else "i32"


def _widen(ty: str, value: str) -> str:
    if ty == "ptr":
        return f"ptrtoint ptr {value} to i64"
    if ty in ("i32", "i64"):
        return f"or {ty} {value}, 0"
    return f"zext {ty} {value} to i32"


def _narrow(ty: str, value: str) -> str:
    if ty == "ptr":
        return f"inttoptr i64 {value} to ptr"
    if ty in ("i32", "i64"):
        return f"or {ty} {value}, 0"
    return f"trunc i32 {value} to {ty}"


def fold_setup(used: dict[int, str], frame_fields: list[str], proved: frozenset[int] = frozenset()) -> list[str]:
    """Entry lines: each `used` field's array (``%fb.{k}``) and, unless `proved` (`divergence`: no fold needed),
    the cells its least and greatest value over the block's threads are folded into, marked unknown (least above
    greatest)."""
    lines = []
    for k, ty in used.items():
        offset = f"ptrtoint (ptr getelementptr (%__mneme_frame_t, ptr null, i32 0, i32 {k}) to i64)"
        lines += [
            f"  %fo.{k} = mul i64 %n64, {offset}",
            f"  %fb.{k} = getelementptr inbounds i8, ptr %frames, i64 %fo.{k}",
        ]
        if k not in proved:
            w = _wide(ty)
            lines += [f"  %fmin.{k}.a = alloca {w}, align 8", f"  %fmax.{k}.a = alloca {w}, align 8"]
    return lines + unknown({k: t for k, t in used.items() if k not in proved})


def unknown(used: dict[int, str]) -> list[str]:
    """Lines marking every `used` field's fold unknown (after a pass that did not run every thread)."""
    return [
        line
        for k, ty in used.items()
        for line in (
            f"  store {_wide(ty)} 1, ptr %fmin.{k}.a, align 8",
            f"  store {_wide(ty)} 0, ptr %fmax.{k}.a, align 8",
        )
    ]


def fold_specs(used: dict[int, str], p: str) -> list[tuple[str, str, str, int, str]]:
    """The folds of the `used` fields' values: (cell, width, operation, identity, the value ``fold_values`` makes)."""
    specs = []
    for k, ty in used.items():
        w = _wide(ty)
        bits = 64 if w == "i64" else 32
        specs += [
            (f"fmin.{k}", w, "smin", (1 << (bits - 1)) - 1, f"%{p}fw{k}"),
            (f"fmax.{k}", w, "smax", -(1 << (bits - 1)), f"%{p}fw{k}"),
        ]
    return specs


def fold_values(used: dict[int, str], frame_fields: list[str], p: str, tag: str) -> list[str]:
    """Lines after thread ``%{p}l`` ran: its value of each `used` field, widened (``%{p}fw{k}``)."""
    lines = []
    for k, ty in used.items():
        vt = value_type(ty)
        lines += [
            f"  %{p}fp{k} = getelementptr inbounds {frame_fields[k]}, ptr %fb.{k}, i32 %{p}l, i32 1",
            f"  %{p}fv{k} = load {vt}, ptr %{p}fp{k}, align 4{tag}",
        ]
        if ty == vt:
            lines.append(f"  %{p}fw{k} = {_widen(ty, f'%{p}fv{k}')}")
            continue
        # affine: the value less the linear index (wrapping: adding the index back gives the value exactly)
        if vt == "i32":
            lines.append(f"  %{p}fw{k} = sub i32 %{p}fv{k}, %{p}l")
        else:
            lines += [f"  %{p}lw{k} = zext i32 %{p}l to i64", f"  %{p}fw{k} = sub i64 %{p}fv{k}, %{p}lw{k}"]
    return lines


def pick(point: int, fields: list[int], used: dict[int, str], frame_fields: list[str], proved=frozenset()) -> list[str]:
    """Entry lines from ``at{point}:``: to ``at{point}.u`` with ``%s{point}.{k}`` the value every thread holds in
    field k of `fields` where the last loop over every thread found one, else to ``at{point}.g``. A `proved` field
    (`divergence`: every thread holds the same value whenever all wait at `point`) is thread 0's, with no test."""
    p = f"at{point}"
    lines = [f"{p}:"]
    same = "true"
    for k in fields:
        if k in proved:
            lines += [
                f"  %{p}.fp{k} = getelementptr inbounds {frame_fields[k]}, ptr %fb.{k}, i32 0, i32 1",
                f"  %s{point}.{k} = load {value_type(used[k])}, ptr %{p}.fp{k}, align 4",
            ]
            continue
        w = _wide(used[k])
        lines += [
            f"  %{p}.lo{k} = load {w}, ptr %fmin.{k}.a, align 8",
            f"  %{p}.hi{k} = load {w}, ptr %fmax.{k}.a, align 8",
            f"  %{p}.eq{k} = icmp eq {w} %{p}.lo{k}, %{p}.hi{k}",
            f"  %{p}.all{k} = and i1 {same}, %{p}.eq{k}",
        ]
        same = f"%{p}.all{k}"
        lines.append(f"  %s{point}.{k} = {_narrow(value_type(used[k]), f'%{p}.lo{k}')}")
    if same == "true":
        return [*lines, f"  br label %{p}.u"]
    return [*lines, f"  br i1 {same}, label %{p}.u, label %{p}.g"]


def arguments(point: int | None, used: dict[int, str], fields: list[int]) -> str:
    """The call's trailing arguments: the interval `point` whose pass-start `fields` it passes, or none."""
    if point is None or not fields:
        return f", i32 {NONE}" + "".join(f", {value_type(t)} {_zero(t)}" for t in used.values())
    return f", i32 {point}" + "".join(
        f", {value_type(t)} %s{point}.{k}" if k in fields else f", {value_type(t)} {_zero(t)}" for k, t in used.items()
    )


def _zero(ty: str) -> str:
    return "null" if ty == "ptr" else "0"
