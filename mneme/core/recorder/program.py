"""What a program to record uses: the shared libraries it links and the device-code sections it carries.

`mneme record` asks each backend's recorder whether it records a program (`Recorder.claims`), and
this is what a recorder looks at: the `DT_NEEDED` libraries of the program's ELF files, followed
through the libraries they need in turn (found as the dynamic loader would: RPATH, LD_LIBRARY_PATH,
RUNPATH, the system's folders), and the section names of those files (a program linked with a
vendor's static runtime names no vendor library, but carries its device code in a section). Nothing is run; the
files are only read. A command whose words name no ELF file (a script) yields an empty `Program`.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import struct
from collections.abc import Iterable, Sequence

import attrs

from mneme.core.elf import ElfFile, is_elf
from mneme.core.errors import MnemeError

DT_NULL, DT_NEEDED, DT_RPATH, DT_RUNPATH = 0, 1, 15, 29
# Libraries every program links: never followed (their dependencies are the C library's).
_SYSTEM = (
    "libc.so",
    "libm.so",
    "libdl.so",
    "librt.so",
    "libpthread.so",
    "libgcc_s.so",
    "libstdc++.so",
    "ld-linux",
    "libc++.so",
    "libc++abi.so",
    "libz.so",
)
_MAX_FILES = 256  # a program's library closure; beyond it the answer is what was read so far


@attrs.frozen
class Program:
    """The ELF files of a command (the program and what it links), their libraries and section names."""

    command: tuple[str, ...]
    files: tuple[str, ...] = ()
    libraries: frozenset[str] = frozenset()
    sections: frozenset[str] = frozenset()

    def links(self, prefixes: Iterable[str]) -> bool:
        """Whether a library whose name starts with one of `prefixes` (``libvendorrt.so``) is linked."""
        return any(lib.startswith(tuple(prefixes)) for lib in self.libraries)


def inspect(command: Sequence[str]) -> Program:
    """The `Program` of `command`: its first word found on PATH, and every later word naming an ELF file
    (``mpirun -n 2 ./app``, ``env X=1 ./app``), with the libraries each links."""
    candidates = []
    for i, word in enumerate(command):
        path = shutil.which(word) if i == 0 and "/" not in word else word
        if path and os.path.isfile(path) and is_elf(path):
            candidates.append(os.path.realpath(path))
    files: list[str] = []
    libraries: set[str] = set()
    sections: set[str] = set()
    queue = list(dict.fromkeys(candidates))
    seen = set(queue)
    while queue and len(files) < _MAX_FILES:
        path = queue.pop(0)
        try:
            elf = ElfFile.read(path)
            needed, search = _dynamic(elf)
        except (MnemeError, OSError):
            continue  # unreadable or not an ELF we read: what it links stays unknown
        files.append(path)
        sections.update(s.name for s in elf.sections)
        for name in needed:
            libraries.add(name)
            if name.startswith(_SYSTEM):
                continue
            found = _find(name, search, os.path.dirname(path))
            if found and found not in seen:
                seen.add(found)
                queue.append(found)
    return Program(tuple(command), tuple(files), frozenset(libraries), frozenset(sections))


def _dynamic(elf: ElfFile) -> tuple[list[str], dict[str, list[str]]]:
    """The DT_NEEDED names of `elf`, and its RPATH and RUNPATH lists."""
    dynamic, strings = elf.sections_named(".dynamic"), elf.sections_named(".dynstr")
    if not dynamic or not strings:
        return [], {}
    is64, end = elf.data[4] == 2, "<" if elf.data[5] == 1 else ">"
    fmt = end + ("qQ" if is64 else "iI")
    text = elf.section_data(strings[0])
    data = elf.section_data(dynamic[0])
    data = data[: len(data) - len(data) % struct.calcsize(fmt)]

    def string(offset: int) -> str:
        stop = text.find(b"\0", offset)
        return text[offset : stop if stop >= 0 else None].decode("utf-8", "replace")

    needed: list[str] = []
    search: dict[str, list[str]] = {"rpath": [], "runpath": []}
    for tag, value in struct.iter_unpack(fmt, data):
        if tag == DT_NULL:
            break
        if value >= len(text):
            continue
        if tag == DT_NEEDED:
            needed.append(string(value))
        elif tag in (DT_RPATH, DT_RUNPATH):
            search["rpath" if tag == DT_RPATH else "runpath"] += [p for p in string(value).split(":") if p]
    return needed, search


def _find(name: str, search: dict[str, list[str]], origin: str) -> str | None:
    """Where the dynamic loader would find library `name` (its search order, without its cache)."""
    if "/" in name:
        return os.path.realpath(name) if os.path.isfile(name) else None
    env = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    rpath = search.get("rpath", []) if not search.get("runpath") else []
    for folder in [*rpath, *env, *search.get("runpath", []), *_system_folders()]:
        folder = folder.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return os.path.realpath(path)
    return None


@functools.lru_cache(maxsize=1)
def _system_folders() -> tuple[str, ...]:
    """The folders of /etc/ld.so.conf (and its includes), then the default ones."""
    folders: list[str] = []

    def read(conf: str, depth: int = 0) -> None:
        try:
            with open(conf, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include ") and depth < 4:
                pattern = line.split(None, 1)[1]
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(conf), pattern)
                for included in sorted(glob.glob(pattern)):
                    read(included, depth + 1)
            elif line.startswith("/"):
                folders.append(line)

    read("/etc/ld.so.conf")
    return (*folders, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
