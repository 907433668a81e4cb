"""Frame fields a block's threads all hold the same value of at a barrier, proved from the IR (a divergence analysis).

The block step form (`block_steps`) folds the least and greatest value of each frame field its pass-start
copies read (`block_uniform`) in every loop over the threads, to learn whether every thread holds the same
value. Where the step function itself shows that they do, the fold is not needed: the pass reads thread 0's.

The analysis runs on the step function laid out for lanes (after reg2mem: no phis, values that cross
blocks live in slots, private or in the frame), over the kernel's control flow with every stop joined to
its resume block again. It is conservative:

* *Values.* Uniform: parameters other than the thread index and the frame; constants (not ``undef`` or
  ``poison``); the block's extents, block index and context; invariant loads through uniform pointers;
  integer and pointer arithmetic, comparisons, casts and selects of uniform values; loads of uniform slots.
  Anything else (the thread index, loads of memory threads write, atomics, calls, floating point, phis) is
  not.
* *Control.* A block is run by every thread alike unless it is control dependent (through the
  post-dominator tree, with every return and stop a path to one exit) on a branch or switch whose
  condition is not uniform, or on a branch in such a block.
* *Slots.* Uniform when every store to it stores a uniform value from a block every thread runs alike, and
  its address is only loaded from and stored to.

It proves anything only where every barrier lies in a block every thread runs alike: then all threads pass
the same barriers in the same order (a thread may stop at a pause or a yield in between, but the block runs
the stopped threads before any thread passes a barrier), so in a pass where all threads wait at one barrier,
each uniform slot holds the value of the same store in every thread.
"""

from __future__ import annotations

import re

from mneme.plugins.backends.host import steps
from mneme.plugins.backends.host.irtext import DEF, LABEL_REF, LOCAL, blocks_between

_LOAD = re.compile(r"^load (\S+), ptr (%[-\w.$]+)(,.*)?$")
_STORE = re.compile(r"^\s*store (\S+) ([^,]+), ptr (%[-\w.$]+)(,.*)?$")
_ALLOCA = re.compile(r"^alloca ")
_STOP = re.compile(r"^\s*store i32 (-?\d+), ptr %__mneme_resume_at, align 4$")
_CASE = re.compile(r"i32 (-?\d+), label (%[-\w.$]+)")
_FLOAT = re.compile(r"\b(?:half|bfloat|float|double|fp128|x86_fp80|ppc_fp128|undef|poison)\b")
# integer and pointer operations: the same operands give the same bits in every thread
_OPS = frozenset(
    ("add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "icmp")
    + ("select", "zext", "sext", "trunc", "ptrtoint", "inttoptr", "bitcast", "getelementptr", "addrspacecast")
    + ("extractvalue", "insertvalue", "extractelement", "insertelement", "shufflevector")
)
_UNIFORM_CALL = re.compile(
    r"^(?:tail |notail )?call [^@]*@(?:__mneme\.nvvm\.read\.ptx\.sreg\.(?:ntid|nctaid|ctaid)\.[xyz]|__mneme_ctx)\(\)"
)
_INT_CALL = re.compile(
    r"^(?:tail |notail )?call [^@]*@llvm\.(?:smin|smax|umin|umax|abs|ctlz|cttz|ctpop|fshl|fshr|bswap|bitreverse)\.i\d+\("
)
# the thread's own: its index, its frame, its resume point
PER_THREAD = _PER_THREAD = frozenset(
    ("%__mneme_tid_x", "%__mneme_tid_y", "%__mneme_tid_z", "%__mneme_linear", "%__mneme_frame", "%__mneme_resume")
)


def uniform_fields(lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]]) -> set[int]:
    """The frame fields (indices) every thread holds the same value of wherever all threads wait at one barrier.

    `lines[start]` is the step function's header and `lines[end]` its closing brace; `slots` maps a frame slot's
    name to (field index, field type). Empty where nothing is proved (a barrier some threads may skip, a loop
    no path leaves, a construct not understood).
    """
    found = _analyse(lines, start, end, slots)
    if found is None:
        return set()
    return {k for name, (k, _) in slots.items() if name not in found.divergent_slots}


def steady_stops(lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]]) -> dict[int, set[int]]:
    """For each barrier point (and the start, 0): the resume points of the stops its interval reaches in every thread
    alike, proved from the IR.

    In a pass where every thread resumes at barrier point p, a thread runs p's interval to its first stop. A stop
    that no branch on a value not proved uniform decides, within the interval (control dependence over the
    interval's own blocks, every stop an exit), is reached by every thread or by none: where thread 0 stopped at
    such a stop, so did all threads, and the pass needs no fold of the threads' resume points
    (`block_passes.steady_exit`). Empty where `uniform_fields` proves nothing.
    """
    found = _analyse(lines, start, end, slots)
    if found is None:
        return {}
    out: dict[int, set[int]] = {}
    for point, label in found.resume_of.items():
        if point & (steps.PAUSE_BIT | steps.YIELD_BIT | steps.WARP_BIT):
            continue  # only barriers: all threads there have passed the same barriers in the same order
        region, todo = {label}, [label]
        while todo:
            for s in found.inner_succ[todo.pop()]:
                if s not in region:
                    region.add(s)
                    todo.append(s)
        succ = {b: [s for s in found.inner_succ[b] if s in region] for b in region}
        labels = sorted(region)
        ipdom = _post_dominators(labels, succ)
        if ipdom is None:
            continue
        controls = _control_dependence(labels, succ, ipdom)
        divergent: set[str] = set()
        todo = [b for b in labels if b in found.deciding]
        while todo:  # blocks a divergent branch decides, and blocks their branches decide
            for b in controls.get(todo.pop(), ()):
                if b not in divergent:
                    divergent.add(b)
                    if len(succ[b]) > 1:
                        todo.append(b)
        stops = {b: found.stop_of[b] for b in region if b in found.stop_of}
        bad = {v for b, v in stops.items() if b in divergent}
        out[point] = {v for v in stops.values() if v not in bad}
    return out


class _Analysis:
    """What `_analyse` found: the interval graph and the values and blocks not proved uniform."""

    def __init__(
        self,
        resume_of,
        inner_succ,
        stop_of,
        deciding,
        divergent_slots,
        divergent_values=frozenset(),
        divergent_blocks=(),
    ):
        self.resume_of: dict[int, str] = resume_of  # resume point -> its block (0: the start)
        self.inner_succ: dict[str, list[str]] = inner_succ  # successors, a stop's none
        self.stop_of: dict[str, int] = stop_of  # a stop's block -> the resume point it stores
        self.deciding: set[str] = deciding  # blocks whose branch decides on a value not proved uniform
        self.divergent_slots: set[str] = divergent_slots
        self.divergent_values: set[str] = set(divergent_values)  # values not proved the same in every thread
        self.divergent_blocks: set[str] = set(divergent_blocks)  # blocks some threads may run and others not


def analysis(lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]]) -> _Analysis | None:
    """The analysis's findings (the interval graph, the values, slots and blocks not proved uniform); None where it
    proves nothing (`block_guards` reads the values)."""
    return _analyse(lines, start, end, slots)


def _analyse(lines: list[str], start: int, end: int, slots: dict[str, tuple[int, str]]) -> _Analysis | None:
    """The divergence analysis of the step function `lines[start:end + 1]` (see the module's docstring); None where
    it proves nothing."""
    blocks = [(label, [lines[i] for i in idx]) for label, idx in blocks_between(lines, start, end)]
    if len(blocks) < 2 or blocks[0][0] != "%__mneme_dispatch":
        return None
    dispatch, body = blocks[0][1], blocks[1:]
    switch = " ".join(dispatch[next((i for i, ln in enumerate(dispatch) if "switch i32 %__mneme_resume" in ln), 0) :])
    default = re.search(r"switch i32 %__mneme_resume, label (%[-\w.$]+)", switch)
    if default is None:
        return None
    resume_of = {int(k): label for k, label in _CASE.findall(switch)}
    succ: dict[str, list[str]] = {}
    inner: dict[str, list[str]] = {}
    stop_of: dict[str, int] = {}
    barriers: list[str] = []
    for label, code in body:
        stop = next((_STOP.match(ln) for ln in code if _STOP.match(ln)), None)
        if stop is not None and code[-1].strip() == "ret void":
            point = int(stop.group(1))
            stop_of[label] = point
            inner[label] = []
            if point == -1:
                succ[label] = []
            elif point in resume_of:
                succ[label] = [resume_of[point]]
                if not point & (steps.PAUSE_BIT | steps.YIELD_BIT | steps.WARP_BIT):
                    barriers.append(label)
            else:
                return None
        elif _terminator(code)[0].lstrip().startswith(("br ", "switch ")):
            succ[label] = list(dict.fromkeys(LABEL_REF.findall(" ".join(_terminator(code)))))
            inner[label] = succ[label]
        elif code[-1].strip() == "unreachable":
            succ[label] = inner[label] = []
        else:
            return None  # a return without a stop, or a terminator not understood
    labels = [label for label, _ in body]
    if any(s not in succ for targets in succ.values() for s in targets):
        return None
    ipdom = _post_dominators(labels, succ)
    if ipdom is None:
        return None
    controls = _control_dependence(labels, succ, ipdom)

    rhs_of: dict[str, str] = {}
    for _, code in blocks:
        for line in code:
            m = DEF.match(line)
            if m:
                rhs_of[m.group(1)] = m.group(2)
    frame_slots = set(slots)
    private = {
        name for name in (DEF.match(ln).group(1) for ln in dispatch if DEF.match(ln)) if _ALLOCA.match(rhs_of[name])
    }
    slot_names = frame_slots | private
    simple = set(slot_names)
    for _, code in body:
        for line in code:
            for token in set(LOCAL.findall(line)) & simple:
                m = DEF.match(line)
                load = m and _LOAD.match(m.group(2))
                store = _STORE.match(line)
                if load and load.group(2) == token and LOCAL.findall(line).count(token) == 1:
                    continue
                if store and store.group(3) == token and token not in LOCAL.findall(store.group(2)):
                    continue
                simple.discard(token)  # its address escapes: its value is not known
    divergent_values: set[str] = set()
    divergent_slots = slot_names - simple
    divergent_blocks: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rhs in rhs_of.items():
            if name in divergent_values or name in slot_names:
                continue
            if not _uniform_rhs(rhs, divergent_values, divergent_slots, slot_names):
                divergent_values.add(name)
                changed = True
        for label, code in body:
            decides = any(t in divergent_values or t in _PER_THREAD for t in _condition(code))
            if not (label in divergent_blocks or decides or _bad_constant(code)):
                continue
            for b in controls.get(label, ()):
                if b not in divergent_blocks:
                    divergent_blocks.add(b)
                    changed = True
        for label, code in body:
            for line in code:
                s = _STORE.match(line)
                if not s or s.group(3) not in slot_names or s.group(3) in divergent_slots:
                    continue
                value = s.group(2).strip()
                if (
                    label in divergent_blocks
                    or _FLOAT.search(s.group(1) + " " + value)
                    or any(t in divergent_values or t in _PER_THREAD or t in slot_names for t in LOCAL.findall(value))
                ):
                    divergent_slots.add(s.group(3))
                    changed = True
    if any(b in divergent_blocks for b in barriers):
        return None
    deciding = {
        label
        for label, code in body
        if any(t in divergent_values or t in _PER_THREAD for t in _condition(code)) or _bad_constant(code)
    }
    return _Analysis(
        {0: default.group(1), **resume_of},
        inner,
        stop_of,
        deciding,
        divergent_slots,
        divergent_values,
        divergent_blocks,
    )


def _terminator(code: list[str]) -> list[str]:
    """The lines of a block's terminator (a switch may span several)."""
    for i in range(len(code) - 1, -1, -1):
        if code[i].lstrip().startswith(("br ", "switch ")):
            return code[i:]
    return code[-1:]


def _condition(code: list[str]) -> list[str]:
    """The values a block's terminator decides on (none for an unconditional branch)."""
    term = " ".join(_terminator(code)).strip()
    if term.startswith("br i1 "):
        return LOCAL.findall(term.split(",", 1)[0])
    if term.startswith("switch "):
        return LOCAL.findall(term.split(",", 1)[0])
    return []


def _bad_constant(code: list[str]) -> bool:
    term = " ".join(_terminator(code))
    return term.startswith(("br i1 ", "switch ")) and bool(_FLOAT.search(term.split(",", 1)[0]))


def _uniform_rhs(rhs: str, divergent: set[str], divergent_slots: set[str], slots: set[str]) -> bool:
    op = rhs.split(None, 1)[0]
    operands = LOCAL.findall(rhs)
    if any(t in divergent or t in _PER_THREAD for t in operands):
        return False
    if op == "load":
        m = _LOAD.match(rhs)
        if m is None or _FLOAT.search(m.group(1)):
            return False
        if m.group(2) in slots:
            return m.group(2) not in divergent_slots
        return "!invariant.load" in rhs and not _FLOAT.search(rhs.split("!", 1)[0])
    if any(t in slots for t in operands):
        return False  # a slot's address taken for anything but a load or store
    if op in ("call", "tail", "notail"):
        return bool(_UNIFORM_CALL.match(rhs) or _INT_CALL.match(rhs))
    return op in _OPS and not _FLOAT.search(rhs)


def _post_dominators(labels: list[str], succ: dict[str, list[str]]) -> dict[str, str] | None:
    """Each block's immediate post-dominator (``""``: the one exit every return and stop leads to); None where some
    block reaches no exit."""
    exit_ = ""
    nodes = [exit_, *labels]
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    for label in labels:
        for s in succ[label] or [exit_]:
            preds[s].append(label)
    order, seen = [], {exit_}
    stack = [(exit_, iter(preds[exit_]))]
    while stack:  # post-order of the reversed graph from the exit
        node, it = stack[-1]
        nxt = next((p for p in it if p not in seen), None)
        if nxt is None:
            order.append(node)
            stack.pop()
            continue
        seen.add(nxt)
        stack.append((nxt, iter(preds[nxt])))
    if len(seen) != len(nodes):
        return None
    index = {n: i for i, n in enumerate(order)}
    idom: dict[str, str | None] = {n: None for n in nodes}
    idom[exit_] = exit_
    changed = True
    while changed:  # Cooper, Harvey and Kennedy's iteration, on the reversed graph
        changed = False
        for node in reversed(order):
            if node == exit_:
                continue
            done = [s for s in (succ[node] or [exit_]) if idom[s] is not None]
            new = done[0]
            for s in done[1:]:
                a, b = new, s
                while a != b:
                    while index[a] < index[b]:
                        a = idom[a]
                    while index[b] < index[a]:
                        b = idom[b]
                new = a
            if idom[node] != new:
                idom[node] = new
                changed = True
    return {n: d for n, d in idom.items() if n != exit_}


def _control_dependence(labels: list[str], succ: dict[str, list[str]], ipdom: dict[str, str]) -> dict[str, set[str]]:
    """Branch block -> the blocks whose running it decides (Ferrante, Ottenstein and Warren)."""
    out: dict[str, set[str]] = {}
    for x in labels:
        if len(succ[x]) < 2:
            continue
        for s in succ[x]:
            node = s
            while node != ipdom[x] and node != "":
                out.setdefault(x, set()).add(node)
                node = ipdom[node]
    return out
