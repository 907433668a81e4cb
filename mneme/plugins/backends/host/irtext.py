"""Small helpers over LLVM IR text that the host backend's rewrites share: names, parentheses, the patterns of
labels, definitions and branches, and the scan of a function's blocks."""

from __future__ import annotations

import re

from mneme.core.errors import IRError

#: a block's label line (group 1: the name, quoted or not)
LABEL = re.compile(r'^([-\w.$]+|"(?:[^"\\]|\\.)*"):')
#: a branch target (quoted or not)
LABEL_REF = re.compile(r'label (%[-\w.$]+|%"[^"]+")')
#: a conditional branch: (condition, true label, false label)
COND_BR = re.compile(r"^\s*br i1 (%[-\w.$]+), label (%[-\w.$]+), label (%[-\w.$]+)(?:,.*)?$")
#: a local value's name
LOCAL = re.compile(r"%[-\w.$]+")
#: a definition: (name, right-hand side)
DEF = re.compile(r"^\s*(%[-\w.$]+) = (.*)$")
#: what keeps a loop over threads from running them as parallel lanes: volatile and atomic accesses, fences and the
#: memory intrinsics (LLVM's vectorizer asserts on some of them)
UNMARKED = re.compile(r"\b(?:volatile|atomic|atomicrmw|cmpxchg|fence|llvm\.mem\w*)\b")


def successors(terminator: str) -> list[str]:
    """The labels a terminator line branches to, in order."""
    return LABEL_REF.findall(terminator)


def blocks_between(lines: list[str], start: int, end: int) -> list[tuple[str, list[int]]]:
    """The function's blocks between `start` and `end`: (label with %, indices of its instruction lines), blank lines,
    comments and lines before the first label left out."""
    blocks: list[tuple[str, list[int]]] = []
    for i in range(start + 1, end):
        m = LABEL.match(lines[i])
        if m:
            blocks.append(("%" + m.group(1), []))
        elif lines[i].strip() and not lines[i].lstrip().startswith(";") and blocks:
            blocks[-1][1].append(i)
    return blocks


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
