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
#: a debug location attached to an instruction (``, !dbg !12``)
DEBUG_REF = re.compile(r",?\s*!dbg ![0-9]+")
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


def function_span(lines: list[str], name: str) -> tuple[int, int] | None:
    """The indices of function `name`'s `define` line and of its closing brace, or None where it is not defined."""
    header = re.compile(r"^define .*" + re.escape(symbol_ref(name)) + r"\(")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    return None if start is None else (start, lines.index("}", start))


def parameter_list(define_line: str, name: str) -> tuple[int, int]:
    """The indices of the parentheses around function `name`'s parameters on its `define` line."""
    open_index = define_line.index(symbol_ref(name) + "(") + len(symbol_ref(name))
    return open_index, match_paren(define_line, open_index)


def branch_taken(line: str, taken: bool) -> str:
    """Conditional branch `line` with its condition the constant `taken`: the edges stay, phis keep their blocks."""
    cond = COND_BR.match(line).group(1)
    return line.replace(f"br i1 {cond},", f"br i1 {'true' if taken else 'false'},", 1)


def min_max(out: str, keep: str, a: str, b: str) -> list[str]:
    """IR lines setting i64 `out` to `a` where ``icmp keep a, b`` holds, else `b` (``slt``: the smaller, ``sgt``: the
    larger)."""
    return [f"  {out}.c = icmp {keep} i64 {a}, {b}", f"  {out} = select i1 {out}.c, i64 {a}, i64 {b}"]


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
