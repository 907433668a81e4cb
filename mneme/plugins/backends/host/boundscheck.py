"""Reads past a buffer's end, caught at element granularity on the host backend.

Device memory is mapped by pages, so a load just past the end of a 4000-byte buffer reads the
slack of its last page and faults nowhere. After optimization, the module gets a second copy of
every function it defines (``NAME.__mneme_checked``; the entry becomes ``CHECKED_ENTRY``) in which
every load from memory that is not a local variable, and the source of every
``memcpy``/``memmove``, is preceded by a call to the runtime's ``__mneme_check_read(ptr, bytes)``,
which compares it with the table of buffers and slacks (`redzones.RedZones.slacks`). The launch a
replay verifies runs the checked copy; the timed runs run the original code, unchanged (a call per
load costs saxpy 9x; docs/security.md). ``MNEME_HOST_BOUNDS=0`` compiles without the copy. Masked
and gathered vector loads (``llvm.masked.*``) are not checked.
"""

from __future__ import annotations

import re

from mneme.core import envvars

CHECK = "__mneme_check_read"
ENV = "MNEME_HOST_BOUNDS"
SUFFIX = ".__mneme_checked"
CHECKED_ENTRY = "__mneme_entry" + SUFFIX
_DEFINE = re.compile(r"^define [^@]*@([-\w.$]+|\"[^\"]+\")\(")
_DEBUG = re.compile(r"(?:,\s*!dbg ![0-9]+| !dbg ![0-9]+)")

_VALUE = r'(%[-\w.$]+|%"[^"]+")'
_LOAD = re.compile(r"^(\s*)(?:%[-\w.$]+|%\"[^\"]+\") = load (?:atomic )?(?:volatile )?(.+?), ptr " + _VALUE
                   + r"(?=[,\s]|$)")
_ALLOCA = re.compile(r"^\s*(%[-\w.$]+|%\"[^\"]+\") = alloca ")
_MEMCPY = re.compile(r"^(\s*)(?:tail |musttail |notail )?call void @llvm\.mem(?:cpy|move)(?:\.inline)?\.p0\.p0\.i(32|64)"
                     r"\(ptr [^,]*?" + _VALUE + r", ptr [^,]*?" + _VALUE + r", i(?:32|64) ([^,]+),")


def enabled() -> bool:
    """Whether kernels are compiled with read checks (``MNEME_HOST_BOUNDS``, default on)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def _size_of(type_text: str) -> str:
    return f"ptrtoint (ptr getelementptr ({type_text}, ptr null, i32 1) to i64)"


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
    if re.search(rf"^declare [^@]*@{CHECK}\(", text, re.MULTILINE):  # the kernel declared it itself
        checked = re.sub(rf"(?m)^declare void @{CHECK}\(ptr, i64\) nounwind$", "", checked)
    return text + "\n" + checked + "\n", count


def instrument(text: str) -> tuple[str, int]:
    """Host IR text with a read check before each load; returns the text and how many checks it has."""
    out: list[str] = []
    locals_: set[str] = set()
    count = 0
    in_body = False
    for line in text.split("\n"):
        if line.startswith("define "):
            in_body, locals_ = True, set()
        elif line == "}":
            in_body = False
        elif in_body:
            alloca = _ALLOCA.match(line)
            if alloca:
                locals_.add(alloca.group(1))
            load = _LOAD.match(line)
            if load and load.group(3) not in locals_:
                out.append(f"{load.group(1)}call void @{CHECK}(ptr {load.group(3)}, i64 {_size_of(load.group(2))})")
                count += 1
            else:
                copy = _MEMCPY.match(line)
                if copy and copy.group(4) not in locals_:
                    size = copy.group(5).strip()
                    if copy.group(2) == "32":
                        out.append(f"{copy.group(1)}%__mneme_bc.{count} = zext i32 {size} to i64")
                        size = f"%__mneme_bc.{count}"
                    out.append(f"{copy.group(1)}call void @{CHECK}(ptr {copy.group(4)}, i64 {size})")
                    count += 1
        out.append(line)
    if count and not re.search(rf"^declare [^@]*@{CHECK}\(", text, re.MULTILINE):
        out.append(f"declare void @{CHECK}(ptr, i64) nounwind")
    return "\n".join(out), count
