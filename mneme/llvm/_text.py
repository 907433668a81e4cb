"""Reading LLVM's textual IR, for the members of the original Mneme API's `mneme.llvm` that llvmlite lacks.

llvmlite exposes no initializer, alignment, alias or constant-operand queries, and its LLVM
is built with assertions (a wrong cast aborts the process), so these members read the value's
printed IR and, where they must hand back LLVM objects, parse a copy of the module with a
probe function that uses them (`probe`). See docs/original-api.md, "mneme.llvm".
"""

from __future__ import annotations

import itertools
import re

_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_NAME = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[-\w.$]+)')
_WORD = re.compile(r"[\w.]+")
_probe_ids = itertools.count()


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _balanced(text: str, i: int) -> int:
    """Index just past the bracket group that opens at `text[i]` (quotes respected)."""
    stack = []
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) + 1
            continue
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced IR text: {text!r}")


def scan_type(text: str, i: int = 0) -> int:
    """Index just past the one LLVM type that starts at or after `text[i]`."""
    i = _skip_space(text, i)
    if i >= len(text):
        raise ValueError(f"no type in {text!r}")
    if text[i] in "[{<":
        end = _balanced(text, i)
    elif text[i] == "%":
        match = _NAME.match(text, i)
        if match is None:
            raise ValueError(f"bad type name in {text!r}")
        end = match.end()
    else:
        match = _WORD.match(text, i)
        if match is None:
            raise ValueError(f"no type at {text[i:]!r}")
        end = match.end()
        rest = text[end:]
        if match.group() == "ptr" and rest.lstrip().startswith("addrspace("):
            end = _balanced(text, text.index("(", end))
        elif match.group() == "target" and rest.startswith("("):
            end = _balanced(text, end)
    after = _skip_space(text, end)
    if after < len(text) and text[after] == "(" and text[i] not in "%[{<" and text[i:end] != "ptr":
        end = _balanced(text, after)  # a function type: `void (i32)`
    return end


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets and quotes, each part stripped."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) + 1
            continue
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def instruction_body(value) -> tuple[str, str]:
    """An instruction's (opcode, text after the opcode), without `%name =` and trailing metadata."""
    text = str(value).strip()
    if re.match(r'%(?:"[^"]*"|[-\w.$]+)\s*=', text):
        text = text.split("=", 1)[1].strip()
    opcode, _, rest = text.partition(" ")
    parts = [p for p in split_top(rest) if not p.startswith("!")]
    return opcode, ", ".join(parts)


def global_initializer_text(gv) -> str | None:
    """The initializer of a global variable as IR text (`i32 7`, `[2 x i8] c"a\\00"`), None when it has none."""
    line = str(gv).strip().splitlines()[0]
    match = re.search(r"(?:^|\s)(?:global|constant)\s", line.partition("=")[2])
    if match is None:
        return None
    tail = line.partition("=")[2][match.end() :]
    end = scan_type(tail)
    parts = split_top(tail[end:])
    if not parts or parts[0].startswith(("section ", "partition ", "align ", "comdat", "!", "code_model ")):
        return None  # a declaration: `external global i32, align 4`
    return f"{tail[:end].strip()} {parts[0]}"


def aggregate_elements(text: str) -> list[str]:
    """The typed elements (`i32 1`, ...) of a constant aggregate printed as `<type> <value>`."""
    end = scan_type(text)
    body = text[end:].strip()
    if body.startswith('c"'):
        elem_type = re.match(r"\[\d+ x (\S+)\]", text[:end].strip())
        data = _c_string_bytes(body[2:-1])
        return [f"{elem_type.group(1) if elem_type else 'i8'} {b}" for b in data]
    if body.startswith("<{"):
        body = body[2:-2]
    elif body[:1] in "[{<":
        body = body[1:-1]
    else:
        return []
    return split_top(body)


def _c_string_bytes(escaped: str) -> bytes:
    out, i = bytearray(), 0
    while i < len(escaped):
        if escaped[i] == "\\":
            out.append(int(escaped[i + 1 : i + 3], 16))
            i += 3
        else:
            out += escaped[i].encode()
            i += 1
    return bytes(out)


def c_string(text: str) -> str | None:
    """The string of an i8 constant data array printed as `c"..."`, else None."""
    end = scan_type(text)
    body = text[end:].strip()
    return _c_string_bytes(body[2:-1]).decode("utf-8", errors="replace") if body.startswith('c"') else None


def probe(module, values: list[str] = (), types: list[str] = (), instructions: list[str] = ()):
    """Parse a copy of `module` with a probe that uses the typed `values`, `types` and `instructions`.

    Returns (copy, [value refs], [type refs], [instruction refs]); the refs belong to the copy,
    which must stay alive as long as they do. A fresh context keeps struct type names unchanged.
    """
    import llvmlite.binding as llvm

    tag = f"__mneme_probe{next(_probe_ids)}"
    lines = [str(module) if module is not None else ""]
    lines += [f"@{tag}_t{n} = external global {t}" for n, t in enumerate(types)]
    lines.append(f"define void @{tag}(ptr %p) {{")
    lines += [f"  store {v}, ptr %p" for v in values]
    lines += [f"  %i{n} = {inst}" for n, inst in enumerate(instructions)]
    lines += ["  ret void", "}"]
    try:
        copy = llvm.parse_assembly("\n".join(lines), context=llvm.create_context())
    except RuntimeError as exc:
        raise ValueError(f"cannot read this value through llvmlite: {exc}") from exc
    insts = list(next(iter(copy.get_function(tag).blocks)).instructions)
    value_refs = [next(iter(inst.operands)) for inst in insts[: len(values)]]
    inst_refs = insts[len(values) : len(values) + len(instructions)]
    type_refs = [copy.get_global_variable(f"{tag}_t{n}").global_value_type for n in range(len(types))]
    return copy, value_refs, type_refs, inst_refs


def rewrite(module, text: str) -> None:
    """Replace `module`'s contents by the parse of `text`, keeping the caller's handle.

    The previous native module stays alive with the handle (values and iterators taken from
    it stay valid); it is parsed in a fresh context so that struct type names do not change.
    """
    import llvmlite.binding as _llvm

    context = _llvm.create_context()
    try:
        new = _llvm.parse_assembly(text, context=context)
    except RuntimeError as exc:
        raise ValueError(f"module {module.name!r} would not parse after the change: {exc}") from exc
    old = _llvm.ModuleRef.__new__(_llvm.ModuleRef)
    old.__dict__.update(module.__dict__)
    old._owned, old._closed = module._owned, False
    module._ptr, module._as_parameter_, module._context = new._ptr, new._ptr, context
    new._owned = True  # its native module now belongs to `module`; this wrapper must not free it
    retired = module.__dict__.setdefault("_mneme_retired", [])
    retired.append(old)
