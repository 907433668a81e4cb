"""Launch contracts: which block shapes a kernel's code supports, read from its IR.

Many kernels assume their block shape: a shared tile sized at compile time and indexed by
thread ids, indices computed from a constant tile instead of ``blockDim``, or launch bounds
(``__launch_bounds__``, ``reqntid``, the thread ranges the backends declare). A space that tries other
shapes spends its budget on launches that fault or compute the wrong thing. `infer` reads the
kernel's IR (after a standard -O2 clean-up, so thread ids are SSA values, not allocas) and returns
a `LaunchContract`: rules, each with the reason a user reads, that a block must satisfy.

The inference is conservative: an access is used only where its shared-memory offset is affine
in the thread ids (constants aside); an access under a branch on a thread id compared with a
constant (``if (threadIdx.x < 32)``) is left out, as is any rule the recorded launch breaks
(the kernel ran that way, so such a rule would be a misreading). A kernel that loops over its
data with a stride of ``blockDim * gridDim`` is noted as grid-stride: any grid covers it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mneme.core.tuning.launch_rules import AXES, Rule, type_size

log = logging.getLogger(__name__)


@attrs.frozen
class LaunchContract:
    """The rules a kernel's block must satisfy, the axes it loops over grid-stride, and notes."""

    rules: tuple[Rule, ...] = ()
    grid_stride_axes: str = ""
    notes: tuple[str, ...] = ()

    def violated(self, block: Iterable[int]) -> Rule | None:
        """The first rule `block` breaks, or None when the code supports it."""
        shape = tuple(block)
        return next((r for r in self.rules if not r.holds(shape)), None)  # type: ignore[arg-type]

    def allows(self, block: Iterable[int]) -> bool:
        return self.violated(block) is None

    def axis_violation(self, axis: str, value: int, recorded: tuple[int, int, int]) -> Rule | None:
        """The rule of `axis` alone that refuses `value` along it (other axes at their recorded extent)."""
        i = AXES.index(axis)
        block = tuple(value if j == i else b for j, b in enumerate(recorded))
        for rule in self.rules:
            if (rule.axes == axis or rule.kind == "max_threads") and not rule.holds(block):  # type: ignore[arg-type]
                if rule.kind == "max_threads" and value <= (rule.max_threads or 0):
                    continue  # the total depends on the other axes too: the space's constraint decides
                return rule
        return None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rules": [r.to_dict() for r in self.rules]}
        if self.grid_stride_axes:
            out["grid_stride"] = self.grid_stride_axes
        return out


EMPTY = LaunchContract()


# -- reading the IR --------------------------------------------------------------------------------

_SREG = re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])\(")
_AMD_ID = re.compile(r"@llvm\.amdgcn\.(workitem|workgroup)\.id\.([xyz])\(")
_AMD_DIMS = re.compile(r"@llvm\.amdgcn\.(implicitarg|dispatch)\.ptr\(")
_INSTR = re.compile(r"^\s*(%[-\w.$]+) = (.*)$")
_LABEL = re.compile(r"^([-\w.$]+):")
_SHARED = re.compile(
    r"^@([-\w.$]+) = [^\n]*?addrspace\(3\) (?:global|constant) (.+?)(?: (?:undef|poison|zeroinitializer)|,|$)",
    re.MULTILINE,
)
_NVVM_ANNOTATION = re.compile(r'^!\d+ = !\{ptr @"?([-\w.$]+)"?, !"(maxntid|reqntid)([xyz])", i32 (\d+)\}', re.MULTILINE)
_STORE = re.compile(r"store (?:volatile )?(.+?) (\S+|\(.*\)), ptr(?: addrspace\(\d+\))? (.+?), align")
_CAST = re.compile(r"addrspacecast \((?:ptr addrspace\(\d+\)|ptr) (.+) to ptr(?: addrspace\(\d+\))?\)")


def _element(ty: str) -> str | None:
    m = re.fullmatch(r"[\[<]\d+ x (.+)[\]>]", ty.strip())
    return m.group(1) if m else None


def _split(text: str) -> list[str]:
    from mneme.core.ir import split_top_level  # the IR toolkit loads LLVM: only when a kernel is read

    return split_top_level(text)


@attrs.define
class Affine:
    """``const + sum(coeffs[a] * tid[a])``; `known` is False when another term (a load, a phi) enters."""

    coeffs: list[int] = attrs.field(factory=lambda: [0, 0, 0])
    const: int = 0
    known: bool = True

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        return Affine(
            [a + sign * b for a, b in zip(self.coeffs, other.coeffs)],
            self.const + sign * other.const,
            self.known and other.known,
        )

    def scaled(self, k: int) -> Affine:
        return Affine([c * k for c in self.coeffs], self.const * k, self.known)

    @property
    def constant(self) -> int | None:
        return self.const if self.known and not any(self.coeffs) else None


UNKNOWN = Affine(known=False)


class _Body:
    """The kernel's instructions by name, its blocks and control flow, read from -O2 module text."""

    def __init__(self, text: str):
        self.defs: dict[str, str] = {}
        self.block_of: dict[str, str] = {}
        self.succ: dict[str, list[str]] = {}
        self.accesses: list[tuple[str, str, str]] = []  # (block, pointer operand, accessed type)
        self.typed_accesses: list[tuple[str, str, str, str]] = []  # the same with "store", "load" or "atomic"
        self.icmps: list[tuple[str, str, str]] = []  # (name, lhs, rhs)
        self.icmp_preds: list[tuple[str, str, str, str]] = []  # (name, predicate, lhs, rhs)
        self.branches: list[tuple[str, str, list[str]]] = []  # (block, condition, successors)
        self.entry = ""
        block = "%entry"
        for line in text.splitlines():
            if m := _LABEL.match(line):
                block = "%" + m.group(1)
                continue
            if not line.startswith("  "):
                continue
            self.entry = self.entry or block
            self.succ.setdefault(block, [])
            stripped = line.strip()
            if stripped.startswith("br ") or stripped.startswith("switch "):
                labels = re.findall(r"label (%[-\w.$]+)", stripped)
                self.succ[block].extend(labels)
                if m := re.match(r"br i1 (%[-\w.$]+),", stripped):
                    self.branches.append((block, m.group(1), labels))
                continue
            if m := _STORE.match(stripped):
                self.accesses.append((block, m.group(3), m.group(1)))
                self.typed_accesses.append((block, m.group(3), m.group(1), "store"))
            m = _INSTR.match(line)
            if not m:
                continue
            name, rhs = m.groups()
            self.defs[name] = rhs
            self.block_of[name] = block
            if a := re.match(r"load (?:volatile )?(.+?), ptr(?: addrspace\(\d+\))? (.+?)(?:, align.*|, !.*)?$", rhs):
                self.accesses.append((block, a.group(2), a.group(1)))
                self.typed_accesses.append((block, a.group(2), a.group(1), "load"))
            elif a := re.match(r"atomicrmw (?:volatile )?\w+ ptr(?: addrspace\(\d+\))? (.+?), (\S+) ", rhs):
                self.accesses.append((block, a.group(1), a.group(2)))
                self.typed_accesses.append((block, a.group(1), a.group(2), "atomic"))
            elif a := re.match(r"cmpxchg (?:weak )?(?:volatile )?ptr(?: addrspace\(\d+\))? (.+?), (\S+) ", rhs):
                self.accesses.append((block, a.group(1), a.group(2)))
                self.typed_accesses.append((block, a.group(1), a.group(2), "atomic"))
            elif a := re.match(r"icmp (?:samesign )?(\w+) \S+ (.+)$", rhs):
                ops = _split(a.group(2))
                if len(ops) == 2:
                    self.icmps.append((name, ops[0], ops[1]))
                    self.icmp_preds.append((name, a.group(1), ops[0], ops[1]))

    def reachable(self, start: str, avoid: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            b = todo.pop()
            if b in seen or b == avoid:
                continue
            seen.add(b)
            todo.extend(self.succ.get(b, ()))
        return seen


class _Reader:
    """Affine forms of values and shared-memory offsets of pointers in one kernel body."""

    def __init__(self, body: _Body, shared: Mapping[str, int]):
        self.body = body
        self.shared = shared
        self.cache: dict[str, Affine] = {}

    def value(self, operand: str, depth: int = 0) -> Affine:
        operand = operand.strip()
        if re.fullmatch(r"-?\d+", operand):
            return Affine(const=int(operand))
        if operand in ("true", "false"):
            return Affine(const=int(operand == "true"))
        if not operand.startswith("%") or depth > 64:
            return UNKNOWN
        if operand not in self.cache:
            self.cache[operand] = UNKNOWN  # cycles (phis) stay unknown
            self.cache[operand] = self._define(self.body.defs.get(operand, ""), depth + 1)
        return self.cache[operand]

    def _define(self, rhs: str, depth: int) -> Affine:
        if m := _SREG.search(rhs):
            return Affine([int(a == m.group(2)) for a in AXES]) if m.group(1) == "tid" else UNKNOWN
        if (m := _AMD_ID.search(rhs)) and m.group(1) == "workitem":
            return Affine([int(a == m.group(2)) for a in AXES])
        if m := re.match(r"(?:zext|sext|trunc)(?: nneg)? \S+ (\S+) to ", rhs):
            return self.value(m.group(1), depth)
        m = re.match(r"(add|sub|mul|shl|or)((?: \w+)*?) i\d+ (\S+), (\S+)$", rhs)
        if not m:
            return UNKNOWN
        op, flags, a, b = m.groups()
        if op == "or" and "disjoint" not in flags:
            return UNKNOWN
        left, right = self.value(a, depth), self.value(b, depth)
        if op in ("add", "or"):
            return left.plus(right)
        if op == "sub":
            return left.plus(right, -1)
        if op == "shl" and right.constant is not None and 0 <= right.constant < 31:
            return left.scaled(1 << right.constant)
        if op == "mul":
            if right.constant is not None:
                return left.scaled(right.constant)
            if left.constant is not None:
                return right.scaled(left.constant)
        return UNKNOWN

    def pointer(self, operand: str, depth: int = 0) -> tuple[str, Affine] | None:
        """(shared array, byte offset) of a pointer into a statically sized shared array, else None."""
        operand = operand.strip()
        if depth > 64:
            return None
        if m := re.fullmatch(r"@\"?([-\w.$]+)\"?", operand):
            return (m.group(1), Affine()) if m.group(1) in self.shared else None
        if m := _CAST.fullmatch(operand):
            return self.pointer(m.group(1), depth + 1)
        if m := re.fullmatch(r"getelementptr (?:inbounds |nuw |nusw |inrange\(\S+\) )*\((.*)\)", operand):
            return self._gep(m.group(1), depth)
        if operand.startswith("%"):
            rhs = self.body.defs.get(operand, "")
            if m := re.match(r"getelementptr (?:inbounds |nuw |nusw )*(.*)$", rhs):
                return self._gep(m.group(1), depth)
            if m := re.match(r"addrspacecast ptr(?: addrspace\(\d+\))? (\S+) to ", rhs):
                return self.pointer(m.group(1), depth + 1)
        return None

    def _gep(self, args: str, depth: int) -> tuple[str, Affine] | None:
        parts = _split(args)
        if len(parts) < 2:
            return None
        ty = parts[0]
        base_m = re.fullmatch(r"ptr(?: addrspace\(\d+\))? (.+)", parts[1])
        if base_m is None:
            return None
        base = self.pointer(base_m.group(1), depth + 1)
        if base is None:
            return None
        name, offset = base
        current: str | None = ty
        for i, index in enumerate(parts[2:]):
            idx_m = re.fullmatch(r"i\d+ (.+)", index)
            if idx_m is None or current is None:
                return name, UNKNOWN
            if i > 0:
                current = _element(current)
                if current is None:
                    return name, UNKNOWN  # a struct field or a scalar: not read further
            size = type_size(current)
            if size is None:
                return name, UNKNOWN
            offset = offset.plus(self.value(idx_m.group(1)).scaled(size))
        return name, offset


def _annotations(text: str, kernel: str) -> dict[str, list[int | None]]:
    """maxntid / reqntid of `kernel` from nvvm.annotations and function attributes."""
    found: dict[str, list[int | None]] = {}
    for name, key, axis, value in _NVVM_ANNOTATION.findall(text):
        if name == kernel:
            found.setdefault(key, [None, None, None])[AXES.index(axis)] = int(value)
    from mneme.core.ir import function_attribute

    for key in ("maxntid", "reqntid"):
        value = function_attribute(text, kernel, f"nvvm.{key}")
        if value:
            numbers = [int(v) for v in value.split(",") if v.strip()]
            found[key] = [*numbers, *[None] * (3 - len(numbers))][:3]
    from mneme.core import targets

    for attribute in targets.thread_range_attributes():  # "min,max" of a block's threads
        bounds = function_attribute(text, kernel, attribute)
        if bounds and "," in bounds:
            found[attribute] = [int(bounds.split(",")[1]), None, None]
    return found


def _metadata_rules(text: str, kernel: str, recorded: tuple[int, int, int]) -> list[Rule]:
    rules = []
    found = _annotations(text, kernel)
    if "reqntid" in found:
        shape = tuple(v if v is not None else 1 for v in found["reqntid"])
        rules.append(
            Rule(
                "required",
                f"the kernel requires a block of exactly {'x'.join(map(str, shape))} threads (reqntid)",
                exact=shape,
            )
        )  # type: ignore[arg-type]
    ranges = [(key, key) for key in found if key not in ("maxntid", "reqntid")]
    for key, words in (("maxntid", "maxntid / __launch_bounds__"), *ranges):
        if key in found:
            total = math.prod(v for v in found[key] if v is not None)
            rules.append(
                Rule(
                    "max_threads",
                    f"the kernel is compiled for at most {total} threads per block ({words})",
                    max_threads=total,
                )
            )
    return rules


def _shared_rules(reader: _Reader, body: _Body, guarded: set[str], names: Mapping[str, str]) -> list[Rule]:
    """Rules from accesses whose offset into a static shared array is affine in the thread ids."""
    tightest: dict[tuple[str, tuple[int, ...], int], tuple[int, str]] = {}
    for block, operand, accessed in body.accesses:
        found = reader.pointer(operand)
        if found is None:
            continue
        array, offset = found
        width = type_size(accessed) or 1
        if not offset.known or not any(offset.coeffs) or block in guarded:
            continue
        extent = reader.shared[array]
        positive = tuple(max(c, 0) for c in offset.coeffs)
        negative = tuple(max(-c, 0) for c in offset.coeffs)
        if any(positive):  # the last thread's access must end inside the array
            key = (array, positive, 1)
            limit = extent - width - offset.const
            if key not in tightest or limit < tightest[key][0]:
                tightest[key] = (limit, _index_text(offset, width))
        if any(negative):  # and the first's start at or after its beginning
            key = (array, negative, -1)
            if key not in tightest or offset.const < tightest[key][0]:
                tightest[key] = (offset.const, _index_text(offset, width))
    rules = []
    for (array, coeffs, sign), (limit, index) in tightest.items():
        label = names.get(array, array)
        if sign > 0:
            reason = (
                f"shared array {label} ({reader.shared[array]} bytes) is indexed by {index}: a larger block "
                "overflows it"
            )
        else:
            reason = f"shared array {label} is indexed by {index}: a larger block reads before its start"
        rules.append(Rule("shared", reason, coeffs=coeffs, limit=limit, subject=array))  # type: ignore[arg-type]
    return rules


def _index_text(offset: Affine, width: int) -> str:
    terms = [f"{'' if c == width else f'{c / width:g}*'}threadIdx.{a}" for a, c in zip(AXES, offset.coeffs) if c]
    if offset.const:
        terms.append(f"{offset.const / width:g}")
    return " + ".join(terms) + f" ({width}-byte elements)"


def _guarded_blocks(reader: _Reader, body: _Body) -> set[str]:
    """Blocks reached on one side only of a branch on a thread id compared with a constant."""
    guards = set()
    for name, lhs, rhs in body.icmps:
        a, b = reader.value(lhs), reader.value(rhs)
        if any(x.known and any(x.coeffs) and y.constant is not None for x, y in ((a, b), (b, a))):
            guards.add(name)
    combined = set(guards)
    for _ in range(4):  # and/or/select of guard conditions guard too
        for name, rhs in body.defs.items():
            if re.match(r"(?:and|or|select) ", rhs) and any(g in re.findall(r"%[-\w.$]+", rhs) for g in combined):
                combined.add(name)
    out: set[str] = set()
    for block, cond, labels in body.branches:
        if cond in combined and len(labels) == 2:
            first, second = body.reachable(labels[0], block), body.reachable(labels[1], block)
            out |= first ^ second
    return out


def _dimension_rules(text: str, recorded: tuple[int, int, int]) -> tuple[list[Rule], str]:
    """Axes whose extent the code compiles in (reads threadIdx but never blockDim), and grid-stride axes."""
    reads = {(kind, axis) for kind, axis in _SREG.findall(text)}
    for kind, axis in _AMD_ID.findall(text):
        reads.add(("tid" if kind == "workitem" else "ctaid", axis))
    amd_dims = bool(_AMD_DIMS.search(text))  # blockDim read from the dispatch packet, not a special register
    rules = []
    for i, axis in enumerate(AXES):
        if ("tid", axis) not in reads or ("ntid", axis) in reads or amd_dims:
            continue
        stride = _ctaid_stride(text, axis)
        how = (
            f"indexes blockIdx.{axis} * {stride}"
            if stride
            else f"reads blockIdx.{axis}"
            if ("ctaid", axis) in reads
            else "runs one block"
        )
        exact = tuple(recorded[i] if j == i else None for j in range(3))
        reason = (
            f"the code reads threadIdx.{axis} but never blockDim.{axis} and {how}: the block's extent along "
            f"{axis} ({recorded[i]}) is compiled in"
        )
        rules.append(Rule("pinned", reason, exact=exact))  # type: ignore[arg-type]
    stride_axes = "".join(a for a in AXES if ("ntid", a) in reads and ("nctaid", a) in reads)
    return rules, stride_axes


def _ctaid_stride(text: str, axis: str) -> int | None:
    m = re.search(r"(%[-\w.$]+) = (?:tail )?call[^\n]*@llvm\.nvvm\.read\.ptx\.sreg\.ctaid\." + axis + r"\(", text)
    if not m:
        return None
    name = re.escape(m.group(1))
    if s := re.search(r"= shl (?:nuw |nsw )*i\d+ " + name + r", (\d+)\b", text):
        return 1 << int(s.group(1))
    if s := re.search(r"= mul (?:nuw |nsw )*i\d+ (?:" + name + r", (\d+)\b|(\d+), " + name + r"\b)", text):
        return int(s.group(1) or s.group(2))
    return None


def infer_from_text(text: str, kernel: str, recorded: tuple[int, int, int]) -> LaunchContract:
    """The contract of `kernel` from module text already optimized (-O2); see `infer`."""
    from mneme.core.ir import function_span

    start, body_start, end = function_span(text, kernel)
    body_text = text[body_start:end]
    shared = {}
    names = {}
    for name, ty in _SHARED.findall(text):
        size = type_size(ty)
        if size:  # extern [0 x T] arrays are sized at launch: not a compile-time contract
            shared[name] = size
            names[name] = _short_name(name)
    body = _Body(body_text)
    reader = _Reader(body, shared)
    candidates = _metadata_rules(text, kernel, recorded)
    pinned, stride_axes = _dimension_rules(body_text, recorded)
    candidates += pinned
    candidates += _shared_rules(reader, body, _guarded_blocks(reader, body), names)
    from mneme.core.tuning import block_extent  # it reads with this module's classes

    candidates += block_extent.coverage_rules(reader, body, names)
    candidates += block_extent.per_block_rules(reader, body, recorded)
    rules, notes = [], []
    misread = {r.subject for r in candidates if r.subject and not r.holds(recorded)}
    for rule in candidates:
        if rule.holds(recorded) and rule.subject not in misread:
            rules.append(rule)
        elif rule.holds(recorded):
            notes.append(f"ignored (another rule on {rule.subject} is broken by the recorded block): {rule.reason}")
        else:  # the recorded launch ran this way: the reading must be wrong, so the rule goes
            notes.append(f"ignored (the recorded block breaks it): {rule.reason}")
    if stride_axes:
        notes.append(f"grid-stride along {stride_axes}: any grid covers the data (-o grid_stride=true tunes it)")
    return LaunchContract(tuple(rules), stride_axes, tuple(notes))


def _short_name(mangled: str) -> str:
    """`tile` for clang's local static ``_ZZ15transpose_tiledE4tile``; other names unchanged."""
    m = re.fullmatch(r"_ZZ\d*\w*?E(\d+)(\w+)", mangled)
    if m and len(m.group(2)) >= int(m.group(1)):
        return m.group(2)[: int(m.group(1))]
    return mangled


def infer(module: Any, kernel: str, recorded: Iterable[int]) -> LaunchContract:
    """The launch contract of `kernel` in `module` (a llvmlite ModuleRef, left unchanged).

    `recorded` is the recorded block (x, y, z); a rule it would break is dropped as a misreading.
    """
    import llvmlite.binding as llvm

    from mneme.core import ir

    shape = tuple(int(v) for v in recorded)
    mod = ir.clone(module)
    machine = ir.target_machine(mod.triple) if mod.triple else None
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(2)) if machine else None
    if builder is not None:
        builder.getModulePassManager().run(mod, builder)
    return infer_from_text(str(mod), kernel, shape)  # type: ignore[arg-type]


def for_recording(recording: Any, instance: Any) -> LaunchContract:
    """The contract of a recording's kernel; EMPTY (with a note) when it has no IR or cannot be read."""
    if recording is None or instance is None or not getattr(recording, "has_ir", False):
        return EMPTY
    recorded = instance.block_dim.as_tuple()
    key = (str(getattr(recording, "path", "")), recording.static_hash, recording.kernel_name, recorded)
    if key in _CACHE:  # a space and the base it extends, or a sweep's simulations, read it once
        return _CACHE[key]
    try:
        contract = infer(recording.link_llvm_modules(), recording.kernel_name, recorded)
    except Exception as exc:  # the contract narrows a space; failing to read it must not stop tuning
        log.warning(
            "launch contract of %s not inferred (%s); the space keeps every block shape", recording.kernel_name, exc
        )
        contract = LaunchContract(notes=(f"not inferred: {exc}",))
    _CACHE[key] = contract
    return contract


_CACHE: dict[tuple, LaunchContract] = {}
