"""A minimal ELF reader: the header fields and the sections Mneme needs, nothing more.

It reads ELF32/ELF64 of either byte order, so it also reads the GPU code images the backends
load (each backend declares their `e_machine` values, `Backend.elf_machines`). Only section
headers are parsed, and symbol values by name (`symbol_values`); program headers are not needed.
"""

from __future__ import annotations

import mmap
import os
import struct

import attrs

from mneme.core.errors import CorruptFileError, FormatError

ELF_MAGIC = b"\x7fELF"
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
SHT_NOBITS = 8
EM_X86_64, EM_AARCH64, EM_PPC64 = 62, 183, 21


@attrs.frozen
class Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int
    align: int


@attrs.frozen
class ElfFile:
    """An ELF file's bytes and its section table."""

    path: str
    data: bytes | mmap.mmap = attrs.field(repr=False)  # mapped, not read: executables can be large
    elf_type: int
    machine: int
    sections: tuple[Section, ...]

    def sections_named(self, name: str) -> list[Section]:
        return [s for s in self.sections if s.name == name]

    def section_data(self, section: Section) -> bytes:
        if section.type == SHT_NOBITS:
            return b""
        return bytes(self.data[section.offset : section.offset + section.size])

    @classmethod
    def read(cls, path: str | os.PathLike) -> ElfFile:
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""
        except OSError as exc:
            raise FormatError(path, f"cannot read the file: {exc.strerror}") from exc
        return cls.parse(data, path)

    @classmethod
    def parse(cls, data: bytes, path: str = "<memory>") -> ElfFile:
        if data[:4] != ELF_MAGIC:
            raise FormatError(path, "not an ELF file (no \\x7fELF magic); give an object, executable or shared library")
        if len(data) < 52 or data[4] not in (1, 2) or data[5] not in (1, 2):
            raise CorruptFileError(path, "truncated or invalid ELF identification bytes")
        is64 = data[4] == 2
        end = "<" if data[5] == 1 else ">"
        try:
            if is64:
                e_type, e_machine = struct.unpack_from(end + "HH", data, 16)
                (e_shoff,) = struct.unpack_from(end + "Q", data, 40)
                e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 58)
                sh_fmt = end + "IIQQQQIIQQ"
            else:
                e_type, e_machine = struct.unpack_from(end + "HH", data, 16)
                (e_shoff,) = struct.unpack_from(end + "I", data, 32)
                e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 46)
                sh_fmt = end + "IIIIIIIIII"
            if e_shoff == 0:
                return cls(path, data, e_type, e_machine, ())
            raw = []
            first = struct.unpack_from(sh_fmt, data, e_shoff)
            if e_shnum == 0:  # more than 0xff00 sections: the count is in section 0's size
                e_shnum = first[5]
            if e_shstrndx == 0xFFFF:
                e_shstrndx = first[7]
            for i in range(e_shnum):
                raw.append(struct.unpack_from(sh_fmt, data, e_shoff + i * e_shentsize))
        except struct.error as exc:
            raise CorruptFileError(path, f"truncated ELF section table ({exc})") from exc
        if not 0 <= e_shstrndx < len(raw):
            raise CorruptFileError(path, f"section-name table index {e_shstrndx} is out of range")
        strtab = raw[e_shstrndx]
        names = bytes(data[strtab[4] : strtab[4] + strtab[5]])
        sections = []
        for name_off, sh_type, flags, _addr, offset, size, _link, _info, align, _entsize in raw:
            stop = names.find(b"\0", name_off)
            name = names[name_off : stop if stop >= 0 else None].decode("utf-8", "replace")
            if sh_type != SHT_NOBITS and offset + size > len(data):
                raise CorruptFileError(path, f"section {name!r} extends past the end of the file (truncated?)")
            sections.append(Section(name, sh_type, flags, offset, size, align))
        return cls(path, data, e_type, e_machine, tuple(sections))


def symbol_values(elf: ElfFile, names: set[str] | frozenset[str]) -> dict[str, int]:
    """The values (addresses) of the named symbols in a 64-bit little-endian file's .symtab and .dynsym.

    Local symbols are included: a library that is not stripped lists them in .symtab.
    """
    found: dict[str, int] = {}
    for table_name, strings_name in ((".symtab", ".strtab"), (".dynsym", ".dynstr")):
        tables, strings = elf.sections_named(table_name), elf.sections_named(strings_name)
        if not tables or not strings:
            continue
        text = elf.section_data(strings[0])
        offsets = {}
        for name in names:  # where each name starts in the string table: the symbols point there
            at = text.find(b"\0" + name.encode() + b"\0")
            if at >= 0:
                offsets[at + 1] = name
        if not offsets:
            continue
        table = elf.section_data(tables[0])
        for st_name, _info, _other, _shndx, value, _size in struct.iter_unpack("<IBBHQQ", table):
            if st_name in offsets and value:
                found.setdefault(offsets[st_name], value)
    return found


def is_elf(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def elf_files_from_maps(maps_text: str, executable: str | None = None) -> list[str]:
    """The ELF files named in a `/proc/PID/maps` listing (a recorder may save it at exit).

    The executable comes first when given; files that no longer exist or are not ELF are left out.
    """
    files: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            path = parts[5].strip()
            if path not in files and not path.endswith(" (deleted)"):
                files.append(path)
    if executable is not None:
        files.sort(key=lambda p: os.path.realpath(p) != os.path.realpath(executable))
    return [p for p in files if is_elf(p)]


def loaded_elf_files(pid: int | str = "self") -> list[str]:
    """The ELF files mapped into a running process (executable first), from /proc/PID/maps."""
    with open(f"/proc/{pid}/maps") as maps:
        return elf_files_from_maps(maps.read(), os.path.realpath(f"/proc/{pid}/exe"))
