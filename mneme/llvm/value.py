"""The original Mneme API's `mneme.llvm.value`: llvmlite's `ValueRef`, and the original's helpers by name."""

from __future__ import annotations

import re

from llvmlite.binding import ValueRef


def initializer(gv: ValueRef) -> str | None:
    """The initializer of a global variable, as IR text (None for a declaration)."""
    match = re.search(r"=\s.*?(?:global|constant)\s+\S+\s+(.*?)(?:, align \d+)?(?:, !.*)?$", str(gv).strip())
    return match.group(1) if match and not gv.is_declaration else None


def alignment(value: ValueRef) -> int | None:
    """The `align N` of a global variable, alloca, load or store; None when it has none."""
    match = re.search(r"\balign (\d+)", str(value))
    return int(match.group(1)) if match else None


__all__ = ["ValueRef", "alignment", "initializer"]
