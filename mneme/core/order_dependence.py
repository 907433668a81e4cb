"""Which of a kernel's output buffers depend on the order its threads run in, read from its LLVM IR.

A float `atomicAdd` into one accumulator sums in whatever order the threads arrive: the result's
last bits change from run to run. An `atomicExch` (or a compare-and-swap) keeps whichever thread came
last or first. An index handed out by an atomic (`slot = atomicAdd(&count, 1); out[slot] = v`) puts
each value wherever its thread's turn fell. No replay reproduces such bytes exactly; this module names
the kernel parameters whose memory such instructions write, and why, so that a replay can say it and
verify those buffers by a tolerance instead (`mneme nondeterminism`).

The analysis reads the IR's text: SSA definitions inside the kernel's body, each value traced back
through address arithmetic (getelementptr, casts, phi, select) to a kernel parameter. A pointer loaded
from memory is not followed (its buffer is not known from the IR alone).
"""

from __future__ import annotations

import re
from collections import defaultdict

from mneme.core import ir

_DEF = re.compile(r"^\s*(%[-\w.$]+)\s*=\s*(.*)$")
_VALUE = re.compile(r"%[-\w.$]+")
_ATOMICRMW = re.compile(r"\batomicrmw\s+(?:volatile\s+)?(\w+)\s+ptr(?:\s+addrspace\(\d+\))?\s+(%[-\w.$]+)")
_CMPXCHG = re.compile(r"\bcmpxchg\s+(?:weak\s+)?(?:volatile\s+)?ptr(?:\s+addrspace\(\d+\))?\s+(%[-\w.$]+)")
_NVVM_ATOMIC = re.compile(r"call\s+[^@]*@(llvm\.nvvm\.atomic\.[\w.]+)\((?:ptr(?:\s+addrspace\(\d+\))?\s+)?(%[-\w.$]+)")
_STORE = re.compile(r"\bstore\s+(?:volatile\s+)?[^,]+,\s*ptr(?:\s+addrspace\(\d+\))?\s+(%[-\w.$]+)")
# Instructions through which a pointer keeps pointing into the same buffer (their first pointer operand).
_ADDRESSING = re.compile(r"^(?:getelementptr|bitcast|addrspacecast|ptrtoint|inttoptr)\b")
_FLOAT_OPS = {"fadd", "fsub", "fmax", "fmin", "fmaximum", "fminimum"}
_INT_COMMUTATIVE = {"add", "sub", "and", "or", "xor", "max", "min", "umax", "umin", "uinc_wrap", "udec_wrap"}


def order_dependent_params(module_text: str, kernel: str) -> dict[int, list[str]]:
    """Kernel parameter index -> why the memory it points to depends on the threads' order.

    Reasons: a float read-modify-write atomic into it (fadd...: the sum's rounding follows the order),
    an atomic exchange or compare-and-swap into it (which thread wins), a store at an index an atomic
    returned (where each value lands), or an NVVM atomic intrinsic into it.
    """
    body, params = _kernel_body(module_text, kernel)
    if body is None:
        return {}
    defs: dict[str, str] = {}
    for line in body:
        m = _DEF.match(line)
        if m:
            defs[m.group(1)] = m.group(2)
    index_of = {name: i for i, name in enumerate(params)}
    reasons: dict[int, list[str]] = defaultdict(list)

    def note(pointer: str, why: str) -> None:
        for base in _bases(pointer, defs):
            if base in index_of and why not in reasons[index_of[base]]:
                reasons[index_of[base]].append(why)

    ordered_results = set()  # values an atomic returned: their order is the threads'
    for line in body:
        m = _DEF.match(line)
        rhs = m.group(2) if m else line
        rmw = _ATOMICRMW.search(rhs)
        if rmw:
            op, pointer = rmw.group(1), rmw.group(2)
            if op in _FLOAT_OPS:
                note(pointer, f"a float atomic {op} (atomicrmw) accumulates into it: the rounding follows the order")
            elif op == "xchg":
                note(pointer, "an atomic exchange (atomicrmw xchg) writes it: the last thread wins")
            elif op not in _INT_COMMUTATIVE:
                note(pointer, f"an atomic {op} (atomicrmw) writes it")
            if m:
                ordered_results.add(m.group(1))
        cas = _CMPXCHG.search(rhs)
        if cas:
            note(cas.group(1), "a compare-and-swap (cmpxchg) writes it: which thread wins follows the order")
            if m:
                ordered_results.add(m.group(1))
        nvvm = _NVVM_ATOMIC.search(rhs)
        if nvvm:
            note(nvvm.group(2), f"an NVVM atomic ({nvvm.group(1)}) writes it")
            if m:
                ordered_results.add(m.group(1))
    if ordered_results:
        for line in body:
            store = _STORE.search(line)
            if store and _depends_on(store.group(1), defs, ordered_results):
                note(
                    store.group(1),
                    "a store at an index an atomic returned: each value lands where its thread's turn fell",
                )
    return dict(reasons)


def _kernel_body(text: str, kernel: str) -> tuple[list[str] | None, list[str]]:
    for name, start, body, end in ir.defined_function_spans(text):
        if name != kernel:
            continue
        header = text[start:body]
        inside = header[header.index("(") + 1 : header.rindex(")")] if "(" in header else ""
        params = []
        for piece in _split_params(inside):
            names = _VALUE.findall(piece)
            params.append(names[-1] if names else f"%{len(params)}")  # unnamed parameters are %0, %1, ...
        return text[body:end].split("\n"), params
    return None, []


def _split_params(text: str) -> list[str]:
    """Top-level comma-separated pieces of a parameter list (commas inside () or {} do not split)."""
    pieces, depth, current = [], 0, []
    for ch in text:
        if ch in "({<[":
            depth += 1
        elif ch in ")}>]":
            depth -= 1
        if ch == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        pieces.append("".join(current))
    return pieces


def _bases(value: str, defs: dict[str, str], seen: set | None = None) -> set[str]:
    """The values a pointer derives from through address arithmetic: parameters, loads, calls..."""
    seen = seen if seen is not None else set()
    if value in seen:
        return set()
    seen.add(value)
    rhs = defs.get(value)
    if rhs is None:
        return {value}  # a parameter (or a global)
    operands = _VALUE.findall(rhs)
    if _ADDRESSING.match(rhs) and operands:
        return _bases(operands[0], defs, seen)
    if rhs.startswith(("phi ", "select ")):
        out = set()
        for operand in operands[1:] if rhs.startswith("select ") else operands:
            out |= _bases(operand, defs, seen)
        return out
    return {value}


def _depends_on(value: str, defs: dict[str, str], targets: set[str], seen: set | None = None) -> bool:
    """Whether `value` is computed (through any instructions but loads) from one of `targets`."""
    seen = seen if seen is not None else set()
    if value in targets:
        return True
    if value in seen or value not in defs:
        return False
    seen.add(value)
    rhs = defs[value]
    if rhs.startswith("load "):
        return False
    return any(_depends_on(operand, defs, targets, seen) for operand in _VALUE.findall(rhs))
