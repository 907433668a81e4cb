"""Accesses past a buffer's end, caught at element granularity on the host backend, for every access kind.

Device memory is mapped by pages, so an access just past the end of a 4000-byte buffer lands in
the slack of its last page and faults nowhere. After optimization, the module gets a second copy
of every function it defines (``NAME.__mneme_checked``; the entry becomes ``CHECKED_ENTRY``) in
which every access to memory that is not a local variable (`accesses`: loads, stores, atomics,
compare-and-swap, vector and constant-address accesses, memcpy/memmove/memset, the masked vector
intrinsics lane by lane) is preceded by a call to the runtime's ``__mneme_check_access(ptr,
bytes, kind)``, which compares it with the table of buffers and slacks
(`redzones.RedZones.slacks`) and fails the launch before the access, naming the buffer and the
offset. The launch a replay verifies runs the checked copy; the timed runs run the original code,
unchanged (a call per access costs saxpy about 10x; docs/security.md). ``MNEME_HOST_BOUNDS=0``
compiles without the copy (writes past an end are then still caught by the canary, redzones.py).
"""

from __future__ import annotations

import re

from mneme.core import envvars
from mneme.plugins.backends.host import accesses

CHECK = "__mneme_check_access"
#: what the checked copy checks; a build cache key (a build with older checks is another product)
VERSION = "2"
ENV = "MNEME_HOST_BOUNDS"
SUFFIX = ".__mneme_checked"
CHECKED_ENTRY = "__mneme_entry" + SUFFIX
_DEFINE = re.compile(r"^define [^@]*@([-\w.$]+|\"[^\"]+\")\(")
_DEBUG = re.compile(r"(?:,\s*!dbg ![0-9]+| !dbg ![0-9]+)")


def enabled() -> bool:
    """Whether kernels are compiled with a checked copy (``MNEME_HOST_BOUNDS``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def _ref(name: str) -> str:
    return "@" + name if re.fullmatch(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*", name) else '@"' + name + '"'


def with_checked_copy(text: str) -> tuple[str, int]:
    """Host IR text plus a checked copy of every function it defines; returns it and the number of checks."""
    lines = text.split("\n")
    names = [m.group(1).strip('"') for m in map(_DEFINE.match, lines) if m]
    if not names:
        return text, 0
    refs = re.compile("|".join(re.escape(_ref(n)) + r"(?=[(\s,)])" for n in sorted(names, key=len, reverse=True)))
    copies: list[str] = []
    inside = False
    for line in lines:
        if _DEFINE.match(line):
            inside = True
            line = re.sub(r" comdat(\(\$[^)]*\))?", "", _DEBUG.sub("", line))
        if inside:
            if re.match(r"\s*(#dbg_|call void @llvm\.dbg\.)", line):
                continue  # debug records name the original function's variables
            copies.append(refs.sub(lambda m: _ref(m.group(0)[1:].strip('"') + SUFFIX), _DEBUG.sub("", line)))
        if line == "}":
            inside = False
    checked, count = instrument("\n".join(copies))
    if not count:
        return text, 0
    if not re.search(rf"^declare [^@]*@{CHECK}\(", text, re.MULTILINE):  # unless the kernel declared it itself
        checked += f"\ndeclare void @{CHECK}(ptr, i64, i32) nounwind"
    return text + "\n" + checked + "\n", count


def instrument(text: str) -> tuple[str, int]:
    """Function bodies' IR text with a check before each access; returns the text and how many checks it has.

    The caller declares ``CHECK``.
    """
    out: list[str] = []
    locals_: set[str] = set()
    count = 0
    in_body = False

    def fresh() -> str:
        fresh.n += 1
        return f"%__mneme_bc.{fresh.n}"

    fresh.n = 0
    for line in text.split("\n"):
        if line.startswith("define "):
            in_body, locals_ = True, set()
        elif line == "}":
            in_body = False
        elif in_body:
            local = accesses.is_local(line)
            if local:
                locals_.add(local)
            else:
                setup, found = accesses.accesses(line, fresh)
                found = [a for a in found if accesses.checked_pointer(a.pointer, locals_)]
                if found:
                    indent = line[: len(line) - len(line.lstrip())] or "  "
                    out += [indent + s for s in setup]
                    out += [f"{indent}call void @{CHECK}(ptr {a.pointer}, i64 {a.size}, i32 {a.kind})" for a in found]
                    count += len(found)
        out.append(line)
    return "\n".join(out), count
