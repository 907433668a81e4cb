"""Frame fields alike in every thread kept once per block, not once per thread (the block step form, `block_steps`).

A field `divergence` proves alike (every thread stores the same values in the same order) need not be an array
over the block's threads: each pass, every thread that stores it stores the same value. It lives in two cells
of the block (``%__mneme_cells``): *new*, which its stores write, and *old*, its value when the pass began
(the entry copies new to old before each pass). A load that no store of the thread can precede in its
interval reads old (as the thread's own frame would have held it when the pass began, whatever other threads
stored since), a load that a store of the thread precedes on every path reads new (its own value, or the same
value another thread stored). So a tree reduction's stride costs no per-thread store, load or fold.

Kept per thread (not shared) where: the kernel has yields at loop headers (a stopped thread may run an
interval's stores after another thread's next pass began); a field is not a scalar; a load of it is preceded by
a store on some paths of an interval and not on others; or a path of an interval stores it twice (the
threads' stores of one pass may then interleave with different values).
"""

from __future__ import annotations

import re
from collections import deque

from mneme.plugins.backends.host import steps
from mneme.plugins.backends.host.irtext import LABEL_REF, blocks_between

CELLS = "%__mneme_cells"  # the step function's parameter: 2 i64 cells per shared field (new, old)
_LOAD = re.compile(r"^\s*%[-\w.$]+ = load \S+, ptr (%[-\w.$]+)(,.*)?$")
_STORE = re.compile(r"^\s*store \S+ [^,]+, ptr (%[-\w.$]+)(,.*)?$")
_SCALAR = re.compile(r"^(?:i1|i8|i16|i32|i64|ptr)$")
_CASE = re.compile(r"i32 (-?\d+), label (%[-\w.$]+)")


def share(
    lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]], alike: set[int]
) -> tuple[list[str], list[int], dict[str, tuple[int, str]]]:
    """The step function with the `alike` fields that can be kept once per block in the block's cells.

    Returns (lines, the shared fields in cell order, the frame slots left per thread). Nothing is shared (the
    lines unchanged) where the kernel has a yield or no field qualifies.
    """
    names = {
        name: k for name, (k, f) in slots.items() if k in alike and _SCALAR.match(f.rsplit("], ", 1)[1].rstrip(" }"))
    }
    if not names:
        return lines, [], slots
    blocks = blocks_between(lines, start, end)
    switch = " ".join(lines[i] for i in blocks[0][1]) if blocks else ""
    default = re.search(r"switch i32 %__mneme_resume, label (%[-\w.$]+)", switch)
    if default is None:
        return lines, [], slots
    cases = {int(k): label for k, label in _CASE.findall(switch.split("[", 1)[1])}
    if any(k & steps.YIELD_BIT for k in cases):
        return lines, [], slots
    points = [default.group(1), *cases.values()]
    by_label = dict(blocks[1:])
    succ = {
        label: [s for s in LABEL_REF.findall(" ".join(lines[i] for i in idx)) if s in by_label]
        for label, idx in blocks[1:]
    }
    reads: dict[int, str] = {}  # line of a load -> "old" or "new"
    bad: set[str] = set()
    for point in points:
        region, todo = {point}, deque([point])
        while todo:
            for s in succ.get(todo.popleft(), ()):
                if s not in region:
                    region.add(s)
                    todo.append(s)
        preds: dict[str, set[str]] = {b: set() for b in region}
        for b in region:
            for s in succ[b]:
                preds[s].add(b)
        may: dict[str, set[str]] = {b: set() for b in region}  # fields a store may have written on entry
        must: dict[str, set[str]] = {b: set(names) for b in region}  # fields a store has written on every path
        must[point] = set()
        changed = True
        while changed:
            changed = False
            for b in region:
                in_may = set().union(*(_stored(lines, by_label[p], may[p], names) for p in preds[b]))
                in_must = set(names) if preds[b] else set()
                for p in preds[b]:
                    in_must &= _stored(lines, by_label[p], must[p], names)
                if b == point:
                    in_must = set()
                if in_may != may[b] or in_must != must[b]:
                    may[b], must[b], changed = in_may, in_must, True
        for b in region:
            now_may, now_must = set(may[b]), set(must[b])
            for i in by_label[b]:
                load, store = _LOAD.match(lines[i]), _STORE.match(lines[i])
                if load and load.group(1) in names:
                    slot = load.group(1)
                    kind = "new" if slot in now_must else "old" if slot not in now_may else None
                    if kind is None or reads.setdefault(i, kind) != kind:
                        bad.add(slot)
                if store and store.group(1) in names:
                    if store.group(1) in now_may:
                        bad.add(store.group(1))  # a second store on one path
                    now_may.add(store.group(1))
                    now_must.add(store.group(1))
    shared = sorted((k, name) for name, k in names.items() if name not in bad)
    if not shared:
        return lines, [], slots
    cell = {name: j for j, (_, name) in enumerate(shared)}
    header = lines[start].replace("i64 %__mneme_frame_n", f"i64 %__mneme_frame_n, ptr {CELLS}")
    out = [*lines[:start], header]
    for i in range(start + 1, end):
        line = lines[i]
        load, store = _LOAD.match(line), _STORE.match(line)
        slot = (load or store).group(1) if (load or store) else None
        if slot in cell:
            which = "new" if store or reads.get(i) == "new" else "old"
            out.append(line.replace(f"ptr {slot}", f"ptr {slot}.{which}", 1))
            continue
        if line.lstrip().startswith(tuple(f"{name} = " for name in cell)):
            name = line.split("=", 1)[0].strip()
            j = cell[name]
            out += [
                f"  {name}.new = getelementptr inbounds i64, ptr {CELLS}, i64 {2 * j}",
                f"  {name}.old = getelementptr inbounds i64, ptr {CELLS}, i64 {2 * j + 1}",
            ]
            continue
        out.append(line)
    kept = "\n".join(out[start + 1 :])
    if any(re.search(re.escape(name) + r"(?![-\w.$])", kept) for name in cell):
        return lines, [], slots  # a use of the slot not understood: keep it per thread
    left = {name: v for name, v in slots.items() if name not in cell}
    return out + lines[end:], [k for k, _ in shared], left


def _stored(lines: list[str], idx: list[int], state: set[str], names: dict[str, int]) -> set[str]:
    out = set(state)
    for i in idx:
        s = _STORE.match(lines[i])
        if s and s.group(1) in names:
            out.add(s.group(1))
    return out


def entry_lines(shared: list[int]) -> tuple[list[str], list[str]]:
    """(the entry's lines allocating the cells, the lines copying every new cell to its old one before a pass)."""
    if not shared:
        return [], []
    alloc = [f"  %cells = alloca i64, i32 {2 * len(shared)}, align 8"]
    copy = []
    for j in range(len(shared)):
        copy += [
            f"  %cells.n{j}.p{{c}} = getelementptr inbounds i64, ptr %cells, i64 {2 * j}",
            f"  %cells.o{j}.p{{c}} = getelementptr inbounds i64, ptr %cells, i64 {2 * j + 1}",
            f"  %cells.v{j}{{c}} = load i64, ptr %cells.n{j}.p{{c}}, align 8",
            f"  store i64 %cells.v{j}{{c}}, ptr %cells.o{j}.p{{c}}, align 8",
        ]
    return alloc, copy
