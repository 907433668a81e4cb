"""`KernelSource` of the original Mneme API: the source text of a recorded kernel's definition.

The current original records where the kernel is defined (`SourceFile`, `SourceLine`,
`SourceEndLine`, `SourceMD5`, and a copy of the file, `SourceCopy`) and reads it back with
`RecordedExecution.kernel_source()`. A database of the original keeps those keys; for Mneme's
recordings the same facts come from the kernel's IR debug info (``-g``): the subprogram's file and
line, the last line of the kernel's own code that generated instructions, and the file's MD5 when
the compiler recorded one. No copy is recorded, so the file is read where the compiler saw it, and
only while its MD5 (when known) still matches: line numbers of another revision would point at
unrelated text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """Source text of a recorded kernel and where it was read from (`line`..`end_line`, 1-based, inclusive)."""

    file: str
    line: int
    end_line: int
    text: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}-{self.end_line}"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """Where a kernel is defined, as a recording knows it (the original's `Source*` keys)."""

    source_file: str | None = None
    source_copy: str | None = None
    source_md5: str | None = None
    source_line: int | None = None
    source_end_line: int | None = None


def read_kernel_source(info: SourceInfo) -> KernelSource | None:
    """The lines `source_line`..`source_end_line` of the recorded copy, else of the source file.

    None without line information, or when no candidate is readable and (with `source_md5`) unchanged.
    """
    if info.source_line is None or info.source_end_line is None:
        return None
    for candidate in (info.source_copy, info.source_file):
        if not candidate:
            continue
        try:
            data = Path(candidate).read_bytes()
        except OSError:
            continue
        if info.source_md5 is not None and hashlib.md5(data).hexdigest() != info.source_md5:
            continue
        lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
        text = "".join(lines[info.source_line - 1 : info.source_end_line])
        return KernelSource(candidate, info.source_line, info.source_end_line, text)
    return None


def _metadata(text: str, ref: str) -> str | None:
    found = re.search(rf"^{re.escape(ref)} = (?:distinct )?(![A-Za-z]+\(.*\))$", text, re.MULTILINE)
    return found.group(1) if found else None


def _field(node: str | None, name: str) -> str | None:
    found = node and re.search(rf'\b{name}: ("(?:[^"\\]|\\.)*"|[^,)\s]+)', node)
    if not found:
        return None
    value = found.group(1)
    return value[1:-1] if value.startswith('"') else value


def debug_source(modules: Iterable[str], kernel_name: str) -> SourceInfo:
    """The kernel's `SourceInfo` from the first module whose debug info describes it (empty when none does)."""
    from mneme.core import ir

    for module in modules:
        try:
            text = str(ir.load(module))
        except Exception as exc:  # noqa: BLE001 - a module that does not load has no location to give
            log.debug("no source location from %s: %s", module, exc)
            continue
        head = re.search(
            rf'^define [^\n]*@"?{re.escape(kernel_name)}"?\([^\n]*!dbg (![0-9]+)[^\n]*\{{$', text, re.MULTILINE
        )
        subprogram = head and _metadata(text, head.group(1))
        line = _field(subprogram, "line")
        source = _metadata(text, _field(subprogram, "file") or "!none")
        name = _field(source, "filename")
        if not (line and name):
            continue
        path = Path(_field(source, "directory") or "") / name
        end = int(line)
        body_end = text.find("\n}", head.end())
        for ref in set(re.findall(r"!dbg (![0-9]+)", text[head.end() : body_end])):
            location = _metadata(text, ref) or ""
            found = _field(location, "line")
            if location.startswith("!DILocation(") and "inlinedAt:" not in location and found:
                end = max(end, int(found))  # the kernel's own code, not what was inlined into it
        md5 = _field(source, "checksum") if _field(source, "checksumkind") == "CSK_MD5" else None
        return SourceInfo(source_file=str(path), source_md5=md5, source_line=int(line), source_end_line=end)
    return SourceInfo()
