"""A launch contract's rules: what a block shape must satisfy, and the type sizes its readers need.

Shared by the contract's readers (`contracts`, `block_extent`), so neither imports the other.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs

AXES = "xyz"


@attrs.frozen
class Rule:
    """One thing a block must satisfy: ``sum(coeffs[a] * (block[a] - 1)) <= limit``, an exact extent
    along some axes (`exact`, None where free), or at most `max_threads` threads in all."""

    kind: str  # "pinned", "required", "max_threads", "shared", "coverage" or "per_block" (`block_extent`)
    reason: str
    exact: tuple[int | None, int | None, int | None] = (None, None, None)
    max_threads: int | None = None
    coeffs: tuple[int, int, int] = (0, 0, 0)
    limit: int = 0
    subject: str = ""  # the shared array the rule reads, if any: a misreading of it drops all its rules

    def holds(self, block: tuple[int, int, int]) -> bool:
        if any(e is not None and b != e for b, e in zip(block, self.exact)):
            return False
        if self.max_threads is not None and math.prod(block) > self.max_threads:
            return False
        return sum(c * (b - 1) for c, b in zip(self.coeffs, block)) <= self.limit

    @property
    def axes(self) -> str:
        """The axes this rule reads (a rule of one axis narrows that axis's values on its own)."""
        if self.max_threads is not None:
            return AXES
        return "".join(a for a, e, c in zip(AXES, self.exact, self.coeffs) if e is not None or c)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason}


def type_size(ty: str) -> int | None:
    """Bytes of an IR type (scalars, pointers, arrays, vectors); None for what this reader does not size."""
    ty = ty.strip()
    scalars = {"half": 2, "bfloat": 2, "float": 4, "double": 8, "ptr": 8, "fp128": 16, "x86_fp80": 16}
    if ty in scalars or ty.startswith("ptr "):
        return scalars.get(ty, 8)
    if m := re.fullmatch(r"i(\d+)", ty):
        return max(1, int(m.group(1)) // 8)
    if m := re.fullmatch(r"[\[<](\d+) x (.+)[\]>]", ty):
        inner = type_size(m.group(2))
        return None if inner is None else int(m.group(1)) * inner
    return None
