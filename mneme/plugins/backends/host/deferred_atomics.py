"""Atomic updates nothing reads back, to memory the kernel reaches no other way, gathered per worker.

A reduction's blocks each add their part to one address (``atomicAdd(out, s[0])``, the old value unused). On the
host the workers then pass that address's cache line between their cores at every block: some 10 ns a block where
the machine keeps the two CPUs close, and 100 ns or more where it places them apart, which doubled the time of a
sum over 2^22 floats, one element a thread, for seconds at a time (1.1 against 2.3 ms;
benchmarks/results/host-throughput.md). Here such an update becomes a call to the runtime's ``__mneme_defer_*``,
which folds it into the worker's own slot for that address; each worker applies its slots, one atomic each, once it
has run its share of the launch (runtime_parts/deferred.inc). A worker with more addresses than slots applies the
update at once.

Applies to a pointer parameter of the kernel (`mark`) whose every use, directly or through ``getelementptr``, is the
address of an ``atomicrmw`` of one operation and type (`OPS`) whose result nothing reads, in a kernel with no fence:
no load, store, call, comparison or other atomic reaches that memory through the parameter, so no thread of the
launch can read it, and with no fence no thread may count on another block's update being visible before the
launch ends. Exact for the integer operations; a float sum adds the same values in another order, as the blocks'
atomics already do on a GPU and across the host's workers (nothing orders one block's atomics against another's).
The update keeps its place in the step forms (an atomic, `steps`), marked by its synchronization scope, and becomes
the call only in the optimized module (`lowered`), after `boundscheck` has put its check before it: a bad address
still faults in the kernel, at that access. `MNEME_HOST_DEFER_ATOMICS=0` keeps every atomic as it is.
"""

from __future__ import annotations

import re

from mneme.core import envvars
from mneme.plugins.backends.host.accesses import split_operands
from mneme.plugins.backends.host.irtext import LOCAL, function_span, parameter_list

ENV = "MNEME_HOST_DEFER_ATOMICS"
#: a build-cache key: another lowering is another build product
VERSION = "1"
SCOPE = 'syncscope("mneme.defer")'
#: (atomicrmw operation, value type) -> the runtime function that gathers it
OPS = {
    **{
        (op, ty): f"__mneme_defer_{op}_{ty}"
        for op in ("add", "and", "or", "xor", "max", "min", "umax", "umin")
        for ty in ("i32", "i64")
    },
    ("fadd", "float"): "__mneme_defer_fadd_f32",
    ("fadd", "double"): "__mneme_defer_fadd_f64",
}
_NAME = LOCAL.pattern
_RMW = re.compile(
    rf"^(\s*)(?:({_NAME}) = )?atomicrmw (\w+) ptr ({_NAME}), (\w+) ([^,\s]+)((?: syncscope\(\"[^\"]*\"\))?) "
    r"(\w+)(, align \d+)?((?:, ![\w.]+ ![\w.]+)*)\s*$"
)
_GEP = re.compile(
    rf"^\s*({_NAME}) = getelementptr (?:inbounds |nuw |nusw |inrange\(\S+\) )*[^,]+, ptr ({_NAME})(,.*)?$"
)

_DEBUG_RECORD = re.compile(r"^\s*#dbg_\w+\(")
_FENCE = re.compile(r"\bfence\b")


def enabled() -> bool:
    """Whether atomics that qualify are gathered per worker (``MNEME_HOST_DEFER_ATOMICS``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def _names(text: str) -> set[str]:
    """The local values `text` names."""
    return set(LOCAL.findall(text))


def _read(result: str | None, lines: list[str], at: int) -> bool:
    """Whether a line of `lines` other than the one at `at` (which defines `result`) names `result`."""
    return bool(result) and any(result in _names(line) for j, line in enumerate(lines) if j != at)


def _qualifying(body: list[str], param: str) -> list[int] | None:
    """The lines of `body` whose atomic updates through `param` may be gathered, or None where `param`'s memory is
    reached any other way (or by atomics of more than one operation and type)."""
    derived, changed = {param}, True
    while changed:  # the addresses computed from the parameter, through getelementptr only
        changed = False
        for line in body:
            gep = _GEP.match(line)
            if gep and gep.group(2) in derived and gep.group(1) not in derived:
                derived.add(gep.group(1))
                changed = True
    lines, kinds = [], set()
    for i, line in enumerate(body):
        if _DEBUG_RECORD.match(line) or not derived & _names(line):
            continue  # a debug record names the address, it does not reach its memory
        gep = _GEP.match(line)
        if gep and gep.group(2) in derived:
            if not derived & _names(gep.group(3) or ""):
                continue  # an address computed from it, not an index
            return None
        rmw = _RMW.match(line)
        if not rmw or rmw.group(4) not in derived or derived & _names(rmw.group(6)):
            return None
        if (rmw.group(3), rmw.group(5)) not in OPS or _read(rmw.group(2), body, i):
            return None  # another operation, or its old value is read
        kinds.add((rmw.group(3), rmw.group(5)))
        lines.append(i)
    return lines if lines and len(kinds) == 1 else None


def mark(text: str, kernel: str) -> str:
    """`text` (the retargeted host module) with the kernel's qualifying atomics in the scope `SCOPE`."""
    if not enabled():
        return text
    lines = text.split("\n")
    span = function_span(lines, kernel)
    if span is None:
        return text
    start, end = span
    body = lines[start + 1 : end]
    if any(_FENCE.search(line) for line in body):
        return text
    opened, closed = parameter_list(lines[start], kernel)
    parts = split_operands(lines[start][opened + 1 : closed])
    params = [part.split()[-1] for part in parts if part.startswith("ptr ") and part.split()[-1].startswith("%")]
    marked = 0
    for param in params:
        for i in _qualifying(body, param) or ():
            rmw = _RMW.match(body[i])
            indent, result, op, ptr, ty, value, _, order, align, md = rmw.groups()
            body[i] = (
                f"{indent}{result + ' = ' if result else ''}atomicrmw {op} ptr {ptr}, {ty} {value} {SCOPE} {order}"
                f"{align or ''}{md or ''}"
            )
            marked += 1
    if not marked:
        return text
    return "\n".join([*lines[: start + 1], *body, *lines[end:]])


def lowered(text: str) -> str:
    """The optimized module's text with each marked atomic a call of its runtime function. An atomic whose old value
    the optimizer found a use for stays an atomic (in the default scope)."""
    lines = text.split("\n")
    needed: set[tuple[str, str]] = set()
    start = 0
    for i, line in enumerate(lines):
        if line.startswith("define "):
            start = i  # a value's uses are in its function (a checked copy has the same names)
        if SCOPE not in line:
            continue
        rmw = _RMW.match(line)
        if rmw is None:
            lines[i] = line.replace(f" {SCOPE}", "")
            continue
        indent, result, op, ptr, ty, value = rmw.groups()[:6]
        end = lines.index("}", i)
        # the optimizer may have given its old value a use, or made it another operation (`or -1`: an exchange)
        if _read(result, lines[start:end], i - start) or (op, ty) not in OPS:
            lines[i] = line.replace(f" {SCOPE}", "")
            continue
        needed.add((op, ty))
        lines[i] = f"{indent}call void @{OPS[op, ty]}(ptr {ptr}, {ty} {value})"
    declared = {name for name in re.findall(r"^declare [^@]*@([\w.$]+)\(", text, re.MULTILINE)}
    lines += [f"declare void @{OPS[k]}(ptr, {k[1]})" for k in sorted(needed) if OPS[k] not in declared]
    return "\n".join(lines)
