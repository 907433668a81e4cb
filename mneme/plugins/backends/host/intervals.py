"""Barrier intervals made cheaper to run as loops over a block's threads (the block step form, `block_steps`).

Three rewrites of a kernel's named IR text, done by `steps.to_steps` when the block step form asks:

* `recompute_across_blocks`: a value that is a pure function of the kernel's parameters, the thread
  and block index and the launch's extents (an address in shared memory, ``tid.y * ntid.x + tid.x``)
  is computed again in every block that uses it instead of living in the thread's frame across a
  barrier. In a loop over the threads it is then affine in the thread index, so an access through it
  is a contiguous vector access, not a gather through a per-thread pointer.
* `pause_before_tails`: a tail from which no barrier can be reached (the block's ``atomicAdd`` after a
  tree reduction) gets a pause point at its start where it holds what may not run as vector lanes
  (atomics, volatile accesses, calls). A thread stops there as at a barrier; the block runs the paused
  threads' tails, in thread order, before any other thread goes on (docs/design/internals.md, "block
  steps"), so the interval before the pause runs its threads as lanes. Legal because the threads of a
  block between two barriers may run in any interleaving (CUDA's rule), and the tails never reach
  another pause or a barrier.
* `yield_at_loops`: the header of a loop between barriers that can run as lanes gets a stop of the same
  kind, so that a pass runs one iteration of every thread (a grid-stride loop's threads then read
  consecutive elements). Each thread still runs its own iterations in its own order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable

from mneme.plugins.backends.host.irtext import DEF, LABEL_REF, LOCAL, blocks_between

PAUSE = "__mneme_pause"  # the marker call `pause_before_tails` inserts; `steps` turns it into a point
YIELD = "__mneme_yield"  # the marker call `yield_at_loops` inserts
_TERMINATOR = re.compile(r"^\s*(?:br|switch|ret|unreachable|indirectbr|callbr|resume)\b")
_PURE_OPS = frozenset(
    ("getelementptr", "add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "zext", "sext", "trunc")
    + ("ptrtoint", "inttoptr", "bitcast", "addrspacecast", "icmp", "select")
)
# reads that give every thread of a block the same value, at any point of the kernel
_PURE_CALL = re.compile(
    r"^(?:tail |notail )?call [^@]*@(?:__mneme\.nvvm\.read\.ptx\.sreg\.(?:ntid|nctaid|ctaid)\.[xyz]|__mneme_ctx)\(\)"
)


def _terminator(lines: list[str], idx: list[int]) -> int:
    """The index of the first line of the block's terminator (a switch spans several lines)."""
    return next((i for i in reversed(idx) if _TERMINATOR.match(lines[i])), idx[-1])


def _pure(rhs: str) -> bool:
    op = rhs.split(None, 1)[0]
    if op in _PURE_OPS:
        return True
    if op == "load":
        return "!invariant.load" in rhs
    return bool(_PURE_CALL.match(rhs))


def recompute_across_blocks(lines: list[str], start: int, end: int) -> list[str]:
    """`lines` with each use of a pure value outside the block defining it fed by a copy computed there.

    Pure: built by the operations of `_PURE_OPS`, invariant loads and the block-uniform reads of
    `_PURE_CALL` from parameters, constants and other pure values. A use in a phi gets its copy at the
    end of the incoming block. Copies are computed where the original had been (it dominates its uses),
    so no copy traps or reads where the original did not.
    """
    blocks = blocks_between(lines, start, end)
    defined_in: dict[str, str] = {}
    rhs_of: dict[str, str] = {}
    for label, idx in blocks:
        for i in idx:
            m = DEF.match(lines[i])
            if m:
                defined_in[m.group(1)] = label
                rhs_of[m.group(1)] = m.group(2)
    pure: set[str] = set()
    changed = True
    while changed:  # operands first: a value is pure when its instruction is and all its local operands are
        changed = False
        for name, rhs in rhs_of.items():
            if name in pure or not _pure(rhs):
                continue
            if all(t in pure or t not in rhs_of for t in LOCAL.findall(rhs)):
                pure.add(name)
                changed = True
    if not pure:
        return lines
    count = 0

    def copies(names: list[str], indent: str) -> tuple[list[str], dict[str, str]]:
        """Lines computing copies of `names` (and their pure operands), and the map to the copies' names."""
        nonlocal count
        made: dict[str, str] = {}
        out: list[str] = []

        def copy(name: str) -> str:
            nonlocal count
            if name in made:
                return made[name]
            rhs = rhs_of[name]
            for t in LOCAL.findall(rhs):
                if t in pure and t not in made:
                    copy(t)
            count += 1
            new = f"{name}.rc{count}"
            out.append(f"{indent}{new} = " + LOCAL.sub(lambda m: made.get(m.group(0), m.group(0)), rhs))
            made[name] = new
            return new

        for n in names:
            copy(n)
        return out, made

    insert_before: dict[int, list[str]] = {}  # line index -> lines to put before it
    replaced: dict[int, str] = {}
    for label, idx in blocks:
        for i in idx:
            line = replaced.get(i, lines[i])
            m = DEF.match(line)
            rhs = m.group(2) if m else line
            if rhs.lstrip().startswith("phi "):
                parts = re.findall(r"\[\s*([^,\]]+?)\s*,\s*(%[-\w.$]+)\s*\]", rhs)
                new_line = line
                for value, pred in parts:
                    if value in pure and defined_in.get(value) != pred:
                        pred_idx = next((ix for lb, ix in blocks if lb == pred), None)
                        if not pred_idx:
                            continue
                        made_lines, made = copies([value], "  ")
                        insert_before.setdefault(_terminator(lines, pred_idx), []).extend(made_lines)
                        new_line = new_line.replace(f"[ {value}, {pred} ]", f"[ {made[value]}, {pred} ]")
                replaced[i] = new_line
                continue
            far = sorted({t for t in LOCAL.findall(rhs) if t in pure and defined_in.get(t) != label})
            if not far:
                continue
            made_lines, made = copies(far, "  ")
            insert_before.setdefault(i, []).extend(made_lines)
            lhs = line[: len(line) - len(rhs)] if m else ""
            replaced[i] = lhs + LOCAL.sub(lambda t, made=made: made.get(t.group(0), t.group(0)), rhs)
    out = lines[: start + 1]
    for i in range(start + 1, end):
        out += insert_before.get(i, [])
        out.append(replaced.get(i, lines[i]))
    return out + lines[end:]


def pause_before_tails(
    lines: list[str], start: int, end: int, sync_call: re.Pattern, unmarkable: Callable[[str], bool]
) -> tuple[list[str], int]:
    """`lines` with ``call void @__mneme_pause()`` before the `unmarkable` lines of the tails; and how many were put.

    A tail: blocks from which no synchronizing call (`sync_call`) can be reached. The pause goes at the start of
    each block holding an unmarkable line where none of them leads to another, else at the entry of each tail
    (a block of a tail entered from a block that can reach a barrier). Nothing is paused (0) where an
    unmarkable line lies outside the tails, where a resumed thread could meet another pause (its effects would
    no longer follow thread order), or where the kernel's first block holds one.
    """
    blocks = blocks_between(lines, start, end)
    if not blocks:
        return lines, 0
    succ = {label: LABEL_REF.findall(" ".join(lines[i] for i in idx)) for label, idx in blocks}
    preds: dict[str, set[str]] = {label: set() for label, _ in blocks}
    for label, targets in succ.items():
        for t in targets:
            preds.setdefault(t, set()).add(label)
    syncs = {label for label, idx in blocks if any(sync_call.search(lines[i]) for i in idx)}
    reaches = set(syncs)
    todo = deque(syncs)
    while todo:  # backwards from the barriers
        for p in preds.get(todo.popleft(), ()):
            if p not in reaches:
                reaches.add(p)
                todo.append(p)
    held = {label for label, idx in blocks if any(unmarkable(lines[i]) for i in idx if not sync_call.search(lines[i]))}
    if not held or held & reaches:
        return lines, 0
    if blocks[0][0] in held:
        return lines, 0
    # a pause right before what is held where a resumed thread meets no other held block: the threads that never
    # reach it do not stop; else one at the entry of each tail
    if all(not (_reach(set(succ[h]), succ) & held) for h in held):
        tails = sorted(held)
    else:
        tails = [
            label
            for label, _ in blocks
            if label not in reaches and preds.get(label, set()) & reaches and _reach({label}, succ) & held
        ]
        if not tails or blocks[0][0] in tails:
            return lines, 0
        for t in tails:
            if _reach(set(succ[t]), succ) & set(tails):
                return lines, 0
        if not held <= _reach(set(tails), succ):
            return lines, 0  # a held line no tail leads to: in the kernel's first blocks
    return _mark_after_phis(lines, start, end, blocks, set(tails), PAUSE)


def yield_at_loops(
    lines: list[str], start: int, end: int, sync_call: re.Pattern, unmarkable: Callable[[str], bool]
) -> tuple[list[str], int]:
    """`lines` with ``call void @__mneme_yield()`` at the header of each loop a thread may run as a lane; and how
    many were put.

    A thread stops at the header at every iteration, so a pass over the block's threads runs one iteration of
    each (a grid-stride loop: consecutive threads read consecutive elements, not one thread's whole loop a
    grid's width apart). Such a loop holds no synchronizing call and no `unmarkable` line, and from its header
    no unmarkable line (a pause's tail) can be reached without passing a barrier: a tail's effects keep thread
    order only where every thread reaches it after the same barrier.
    """
    blocks = blocks_between(lines, start, end)
    if not blocks:
        return lines, 0
    succ = {label: LABEL_REF.findall(" ".join(lines[i] for i in idx)) for label, idx in blocks}
    syncs = {label for label, idx in blocks if any(sync_call.search(lines[i]) for i in idx)}
    held = {label for label, idx in blocks if any(unmarkable(lines[i]) for i in idx if not sync_call.search(lines[i]))}
    order = {label: n for n, (label, _) in enumerate(blocks)}
    preds: dict[str, set[str]] = {label: set() for label, _ in blocks}
    for label, targets in succ.items():
        for t in targets:
            preds.setdefault(t, set()).add(label)
    headers = []
    for header, _ in blocks:
        latches = preds.get(header, set()) & _reach({header}, succ)
        if not latches or header == blocks[0][0]:
            continue
        body, todo = {header}, deque(latches)
        while todo:  # the natural loop: the blocks that reach a latch without passing the header
            b = todo.popleft()
            if b not in body:
                body.add(b)
                todo.extend(preds.get(b, ()))
        if any(preds.get(b, set()) - body for b in body - {header}) or not all(
            order[header] <= order.get(b, -1) for b in body
        ):
            continue  # not entered only through its header: leave it alone
        if body & syncs or body & held:
            continue
        beyond, todo = set(), deque([header])
        while todo:  # what the header reaches before a barrier
            b = todo.popleft()
            for s in succ.get(b, ()):
                if s not in beyond:
                    beyond.add(s)
                    if s not in syncs:
                        todo.append(s)
        if beyond & held:
            continue
        headers.append(header)
    if not headers:
        return lines, 0
    return _mark_after_phis(lines, start, end, blocks, set(headers), YIELD)


def _mark_after_phis(
    lines: list[str], start: int, end: int, blocks: list[tuple[str, list[int]]], labels: set[str], marker: str
) -> tuple[list[str], int]:
    """A call of `marker` at the top of each block in `labels`, after its phis: (the lines, how many marked)."""
    at = set()
    for label, idx in blocks:
        if label in labels:
            k = 0
            while k < len(idx) and re.match(r"^\s*%[-\w.$]+ = phi ", lines[idx[k]]):
                k += 1
            at.add(idx[k] if k < len(idx) else idx[-1])
    out = lines[: start + 1]
    for i in range(start + 1, end):
        if i in at:
            out.append(f"  call void @{marker}()")
        out.append(lines[i])
    return out + lines[end:], len(at)


def _reach(starts: set[str], succ: dict[str, list[str]]) -> set[str]:
    seen, todo = set(starts), deque(starts)
    while todo:
        for s in succ.get(todo.popleft(), ()):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen
