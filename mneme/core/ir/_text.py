"""Module text, read and rewritten as text: function spans, attribute groups, declarations.

llvmlite's binding cannot replace uses or edit instructions; transforms that need to rewrite IR
edit the module's text with these helpers, then re-parse and verify it (`reparse`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mneme.core.errors import IRError

_DEFINE = re.compile(r'^define\s[^@]*@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(', re.MULTILINE)


def unquote(name: str) -> str:
    """An LLVM identifier without its quotes (``"a.b"`` -> ``a.b``)."""
    return name[1:-1] if name.startswith('"') else name


_STRING = re.compile(r'c?"(?:[^"\\]|\\.)*"')


def function_span(text: str, name: str) -> tuple[int, int, int]:
    """(start of the `define` line, start of the body, end of the closing brace line) of `name`."""
    quoted = re.escape(name) if re.fullmatch(r"[-\w.$]+", name) else re.escape('"' + name + '"')
    match = re.search(r"^define\s[^\n]*@" + quoted + r"\(", text, re.MULTILINE)
    if match is None:
        raise IRError(f"function {name!r} is not defined in the module text")
    body = text.index("{\n", match.end()) + 2
    end = text.index("\n}\n", body - 1) + 3
    return match.start(), body, end


def defined_function_spans(text: str) -> list[tuple[str, int, int, int]]:
    """(name, start, body, end) of every function definition in module text."""
    spans = []
    for match in _DEFINE.finditer(text):
        name = unquote(match.group(1))
        body = text.index("{\n", match.end()) + 2
        end = text.index("\n}\n", body - 1) + 3
        spans.append((name, match.start(), body, end))
    return spans


def sub_outside_strings(pattern: re.Pattern, repl, line: str) -> str:
    """`pattern.sub(repl, line)` applied only outside string constants (inline asm, c"..." data)."""
    out, last = [], 0
    for m in _STRING.finditer(line):
        out.append(pattern.sub(repl, line[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(pattern.sub(repl, line[last:]))
    return "".join(out)


def ensure_declaration(text: str, name: str, declaration: str) -> str:
    """Add `declaration` (a full `declare ...` line) unless `@name` is already declared or defined."""
    if re.search(r"^(declare|define)\s[^\n]*@" + re.escape(name) + r"\(", text, re.MULTILINE):
        return text
    return text.rstrip("\n") + "\n\n" + declaration + "\n"


def max_attribute_group(text: str) -> int:
    ids = [int(x) for x in re.findall(r"^attributes #(\d+) = ", text, re.MULTILINE)]
    return max(ids, default=-1)


def function_attribute(text: str, name: str, key: str) -> str | None:
    """The value of string attribute `key` ("key"="value") of function `name`, or None."""
    start, body, _ = function_span(text, name)
    match = re.search(r" #(\d+)(?=[\s{])", text[start:body])
    if match is None:
        return None
    group = re.search(r"^attributes #" + match.group(1) + r" = \{ (.*) \}$", text, re.MULTILINE)
    found = re.search(r'"' + re.escape(key) + r'"="([^"]*)"', group.group(1)) if group else None
    return found.group(1) if found else None


def set_function_attributes(text: str, name: str, add: dict[str, str], remove: Iterable[str] = ()) -> str:
    """Give function `name` a fresh attribute group: its current one, minus keys `remove` and `add`'s
    keys, plus `add` (string attributes "key"="value"). Other functions keep theirs."""
    start, body, _ = function_span(text, name)
    header = text[start:body]
    match = re.search(r" #(\d+)(?=[\s{])", header)
    current = ""
    if match is not None:
        group = re.search(r"^attributes #" + match.group(1) + r" = \{ (.*) \}$", text, re.MULTILINE)
        current = group.group(1) if group else ""
    drop = set(remove) | set(add)
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"(?:="(?:[^"\\]|\\.)*")?|[^\s"]+(?:\([^)]*\))?', current)
    kept = [t for t in tokens if not (t.startswith('"') and t.split("=", 1)[0].strip('"') in drop)]
    kept += [f'"{key}"="{value}"' for key, value in add.items()]
    new_id = max_attribute_group(text) + 1
    if match is not None:
        new_header = header[: match.start()] + f" #{new_id}" + header[match.end() :]
    else:
        new_header = header[: header.rindex("{")].rstrip() + f" #{new_id} {{\n"
    text = text[:start] + new_header + text[body:]
    return text.rstrip("\n") + f"\n\nattributes #{new_id} = {{ {' '.join(kept)} }}\n"


def split_top_level(text: str) -> list[str]:
    """Split at the commas outside parentheses, brackets, braces and angle brackets (IR operand and type
    lists, pass pipelines); each part stripped, an empty last part (a trailing comma, no text) left out."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts
