"""Small helpers over LLVM IR text that the host backend's rewrites share: names and parentheses."""

from __future__ import annotations

import re

from mneme.core.errors import IRError


def symbol_ref(name: str) -> str:
    """`name` as LLVM IR refers to a global: `@name`, quoted (`@"..."`) when it is not a plain identifier.

    Unnamed functions (`@0`, `@1`: ROCm's device libraries have some) are written bare.
    """
    return "@" + name if re.fullmatch(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+", name) else '@"' + name + '"'


def match_paren(text: str, open_index: int) -> int:
    """The index of the parenthesis closing the one at `open_index` (quoted names skipped)."""
    depth = 0
    in_string = False
    for i in range(open_index, len(text)):
        ch = text[i]
        if in_string:
            if ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
    raise IRError(f"unbalanced parentheses in IR line: {text.strip()[:200]}")
