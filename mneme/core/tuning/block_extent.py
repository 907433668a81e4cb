"""Launch contracts, part two: kernels that need at least (so, with a shared array's bound, exactly) their block.

`contracts` reads the largest block a statically sized shared array allows. Two more shapes make a kernel
need a block *at least* as large as the one it was written for, which together with that bound leaves
exactly the recorded block (docs/design/tuning.md, "Launch contracts"):

- **Coverage.** Every plain store into a shared array is one element per thread (``a[threadIdx.x + k]``),
  so a block of B threads writes elements ``k .. k + B - 1`` and nothing else; a read beyond them reads
  memory no thread wrote. Reads that count: one under a branch ``threadIdx.x < C`` at ``threadIdx.x + r``
  (a tree sum whose strides start at a constant: ``partial[tid + 128]`` for ``tid < 128`` needs 256
  threads), one at a constant element, and one at an index the code does not derive from the thread id
  nor from ``blockDim`` (a data-dependent bin ``bins[values[i]]``, or a stride that starts at a
  constant in a loop): it may read any element, so all must be written. A read whose index depends on
  ``blockDim`` adapts to the block and asks for nothing; so does an array written in a loop.
- **Per-block results.** A store or atomic to global memory at an address derived from ``blockIdx`` but
  not from ``threadIdx`` (``out[blockIdx.x] = partial[0]``) writes one result per block: the block's
  extent decides what each result covers (and the grid, how many there are), so the block is pinned.

Like every rule of the contract, one that the recorded launch breaks is dropped as a misreading.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mneme.core.tuning.launch_rules import AXES, Rule, type_size

_SPECIAL = re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])\(")
_AMD_ITEM = re.compile(r"@llvm\.amdgcn\.(workitem|workgroup)\.id\.([xyz])\(")
_AMD_DIMS = re.compile(r"@llvm\.amdgcn\.(?:implicitarg|dispatch)\.ptr\(")
_OPERAND = re.compile(r"%[-\w.$]+|@\"?[-\w.$]+\"?")


class Sources:
    """What a value is derived from: special registers (``tid``, ``ntid``, ``ctaid``, ``nctaid``), loaded
    data (``load``), shared arrays (``shared``). Loads are not looked through: a loaded value is data."""

    def __init__(self, body: Any, shared_names: set[str]):
        self.body = body
        self.shared_names = shared_names
        self.cache: dict[str, frozenset[str]] = {}

    def of(self, operand: str, depth: int = 0) -> frozenset[str]:
        out: set[str] = set()
        for name in _OPERAND.findall(operand):
            out |= self._name(name, depth)
        return frozenset(out)

    def _name(self, name: str, depth: int) -> frozenset[str]:
        if name.startswith("@"):
            return frozenset({"shared"}) if name.strip('@"') in self.shared_names else frozenset()
        if depth > 64:
            return frozenset()
        if name not in self.cache:
            self.cache[name] = frozenset()  # a cycle (a loop's phi) adds nothing new
            self.cache[name] = self._define(self.body.defs.get(name, ""), depth + 1)
        return self.cache[name]

    def _define(self, rhs: str, depth: int) -> frozenset[str]:
        if m := _SPECIAL.search(rhs):
            return frozenset({m.group(1)})
        if m := _AMD_ITEM.search(rhs):
            return frozenset({"tid" if m.group(1) == "workitem" else "ctaid"})
        if _AMD_DIMS.search(rhs):
            return frozenset({"ntid"})  # the dispatch packet: where such code reads blockDim and gridDim
        if re.match(r"load ", rhs):
            pointer = self.of(rhs.split(",", 1)[1] if "," in rhs else "", depth)
            # blockDim read through a dispatch packet is a load from it; anything else loaded is data
            return frozenset({"ntid"}) if "ntid" in pointer and not pointer - {"ntid"} else frozenset({"load"})
        if re.match(r"(?:tail |musttail |notail )?call ", rhs):
            return frozenset({"load"})  # an opaque call's result: data, as far as this reader knows
        if rhs.startswith("phi "):
            return self.of(re.sub(r"^phi [^[]*", "", rhs), depth) | {"phi"}
        return self.of(rhs, depth)


def _guard_bounds(reader: Any, body: Any) -> dict[str, int]:
    """Blocks reached only on the true side of ``threadIdx.x < C`` (or ``== 0``): block -> the least such C."""
    bounds: dict[str, int] = {}
    preds = {name: pred for name, pred, _, _ in getattr(body, "icmp_preds", [])}
    conds: dict[str, int] = {}
    for name, lhs, rhs in body.icmps:
        pred = preds.get(name, "")
        a, b = reader.value(lhs), reader.value(rhs)
        if not (a.known and a.coeffs == [1, 0, 0] and a.const == 0 and b.constant is not None):
            continue
        c = b.constant
        limit = {"ult": c, "slt": c, "ule": c + 1, "sle": c + 1, "eq": c + 1}.get(pred)
        if limit is not None and limit > 0:
            conds[name] = limit
    for block, cond, labels in body.branches:
        if cond in conds and len(labels) == 2:
            only_true = body.reachable(labels[0], block) - body.reachable(labels[1], block)
            for b in only_true:
                bounds[b] = min(bounds.get(b, conds[cond]), conds[cond])
    return bounds


def coverage_rules(reader: Any, body: Any, names: Mapping[str, str]) -> list[Rule]:
    """At least B threads along x where a shared array's one-element-per-thread writes must cover its reads."""
    sources = Sources(body, set(reader.shared))
    bounds = _guard_bounds(reader, body)
    by_array: dict[str, dict[str, list]] = {}
    for block, operand, accessed, kind in getattr(body, "typed_accesses", []):
        found = reader.pointer(operand)
        if found is None:
            continue
        array, offset = found
        by_array.setdefault(array, {"store": [], "read": []})["store" if kind == "store" else "read"].append(
            (block, operand, offset, type_size(accessed) or 1)
        )
    rules = []
    for array, accesses in by_array.items():
        stores, reads = accesses["store"], accesses["read"]
        forms = {(tuple(o.coeffs), o.const, w) for _, _, o, w in stores if o.known}
        if len(forms) != 1 or len(stores) != sum(1 for _, _, o, _ in stores if o.known):
            continue  # written in a loop, or in several shapes: what a block writes is not read off here
        ((coeffs, start, width),) = forms
        if coeffs != (width, 0, 0) or start % width or all(b in bounds for b, _, _, _ in stores):
            continue  # not one element per thread along x (or every store is under a guard)
        first = start // width
        elements = reader.shared[array] // width
        need, why = 0, ""
        for block, operand, offset, w in reads:
            if offset.known and offset.coeffs == [w, 0, 0] and block in bounds and offset.const % w == 0:
                last = offset.const // w + bounds[block] - 1  # threadIdx.x < C reads up to r + C - 1
                text = f"threadIdx.x + {offset.const // w} for threadIdx.x < {bounds[block]}"
            elif offset.constant is not None and offset.const % w == 0:
                last, text = offset.const // w, f"element {offset.const // w}"
            elif not offset.known and _any_element(sources.of(operand)):
                last, text = elements - 1, "an index not derived from blockDim (any element)"
            else:
                continue
            if last - first + 1 > need:
                need, why = last - first + 1, text
        if need > 1:
            label = names.get(array, array)
            reason = (
                f"shared array {label} is written one element per thread (threadIdx.x"
                f"{f' + {first}' if first else ''}) and read at {why}: a block of fewer than {need} threads "
                "leaves elements it reads unwritten"
            )
            rules.append(Rule("coverage", reason, coeffs=(-1, 0, 0), limit=-(need - 1), subject=array))
    return rules


def _any_element(found: frozenset[str]) -> bool:
    """An index that may reach any element: not adapted to blockDim, and loaded data, a loop-carried value
    (a stride that starts at a constant), or no thread id at all (a bitwise or modular function of the thread
    id alone, ``tid ^ 1``, stays near the thread and asks for nothing)."""
    return "ntid" not in found and bool(found & {"load", "phi"} or "tid" not in found)


def per_block_rules(reader: Any, body: Any, recorded: tuple[int, int, int]) -> list[Rule]:
    """The block pinned where the kernel writes one result per block to global memory."""
    sources = Sources(body, set(reader.shared))
    axes = "".join(a for a in AXES if re.search(rf"sreg\.tid\.{a}\(|workitem\.id\.{a}\(", _all_defs(body)))
    for _block, operand, _accessed, kind in getattr(body, "typed_accesses", []):
        if kind == "load" or reader.pointer(operand) is not None:
            continue
        found = sources.of(operand)
        if "ctaid" in found and not found & {"tid", "shared"} and axes:
            exact = tuple(recorded[i] if a in axes else None for i, a in enumerate(AXES))
            reason = (
                "writes one result per block (at an address derived from blockIdx, not from threadIdx): "
                f"the block's extent ({'x'.join(str(recorded[AXES.index(a)]) for a in axes)}) decides what "
                "each result covers"
            )
            return [Rule("per_block", reason, exact=exact)]  # type: ignore[arg-type]
    return []


def _all_defs(body: Any) -> str:
    return "\n".join(body.defs.values())
