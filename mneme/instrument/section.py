"""The `.mneme_ir` ELF section: self-delimiting entries of device bitcode, one per TU per arch.

The linker concatenates the `.mneme_ir` sections of every object it links, so a section
holds a sequence of entries and a reader walks them one after the other::

    offset  size  field
    0       8     magic b"MNEMEIR\\0"
    8       2     format version (little endian, like every integer here)
    10      2     header size (32)
    12      4     metadata length M (UTF-8 JSON)
    16      8     bitcode length B
    24      8     entry length: 32 + M + B, each part padded to 8 bytes
    32      M     metadata: source, arch, targets, language, clang_version, rdc, kernels, sha256
    ...     B     the LLVM bitcode

Zero bytes between entries (alignment padding a linker may insert) are skipped. The
section is not SHF_ALLOC: the loader never maps it, and linkers keep it even with
``--gc-sections``. GNU ``strip`` keeps it; ``llvm-strip`` removes it unless given
``--keep-section=.mneme_ir``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

import attrs

from mneme.core.errors import CorruptFileError, FormatError, SchemaVersionError
from mneme.core.elf import ElfFile

SECTION_NAME = ".mneme_ir"
MAGIC = b"MNEMEIR\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sHHIQQ")


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@attrs.frozen
class EmbeddedEntry:
    """One translation unit's device bitcode for one architecture, as embedded in a binary."""

    source: str
    arch: str
    bitcode: bytes = attrs.field(repr=False)
    language: str = "cuda"
    clang_version: str = ""
    targets: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # real archs this code ran as
    rdc: bool = False
    kernels: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # mangled kernel names
    producer: str = ""
    binary: str = ""  # the ELF file it was read from (empty while building)
    offset: int = 0  # its offset in that file

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.bitcode).hexdigest()

    def metadata(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "arch": self.arch,
            "targets": list(self.targets),
            "language": self.language,
            "clang_version": self.clang_version,
            "rdc": self.rdc,
            "kernels": list(self.kernels),
            "producer": self.producer,
            "sha256": self.sha256,
        }

    def pack(self) -> bytes:
        meta = json.dumps(self.metadata(), sort_keys=True).encode()
        length = _HEADER.size + _pad8(len(meta)) + _pad8(len(self.bitcode))
        out = bytearray(_HEADER.pack(MAGIC, FORMAT_VERSION, _HEADER.size, len(meta), len(self.bitcode), length))
        out += meta + b"\0" * (_pad8(len(meta)) - len(meta))
        out += self.bitcode + b"\0" * (_pad8(len(self.bitcode)) - len(self.bitcode))
        return bytes(out)


def pack_entries(entries: list[EmbeddedEntry]) -> bytes:
    return b"".join(e.pack() for e in entries)


def iter_entries(data: bytes, path: str = "<memory>", base_offset: int = 0) -> Iterator[EmbeddedEntry]:
    """Walk the entries of one `.mneme_ir` section's bytes; errors name the file and offset."""
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        if data[pos] == 0:  # linker alignment padding between two objects' sections
            pos += 1
            continue
        where = f"{SECTION_NAME} entry at file offset {base_offset + pos}"
        if len(data) - pos < _HEADER.size:
            raise CorruptFileError(path, f"{where}: truncated header ({len(data) - pos} bytes left)")
        magic, version, header_size, meta_len, code_len, length = _HEADER.unpack_from(data, pos)
        if magic != MAGIC:
            raise CorruptFileError(
                path, f"{where}: bad magic {magic!r}; the section was damaged or not written by mneme-cc"
            )
        if version > FORMAT_VERSION:
            raise SchemaVersionError(
                path,
                f"{where} has format version {version}, newer than this Mneme reads ({FORMAT_VERSION}); upgrade Mneme",
            )
        meta_at = pos + header_size
        code_at = meta_at + _pad8(meta_len)
        if length < header_size + meta_len + code_len or pos + length > len(data) or code_at + code_len > len(data):
            raise CorruptFileError(path, f"{where}: entry length {length} runs past the section end (truncated?)")
        try:
            meta = json.loads(bytes(view[meta_at : meta_at + meta_len]))
        except ValueError as exc:
            raise CorruptFileError(path, f"{where}: unreadable metadata ({exc})") from exc
        bitcode = bytes(view[code_at : code_at + code_len])
        if meta.get("sha256") and hashlib.sha256(bitcode).hexdigest() != meta["sha256"]:
            raise CorruptFileError(path, f"{where}: bitcode checksum mismatch for {meta.get('source')!r}")
        yield EmbeddedEntry(
            source=meta.get("source", ""),
            arch=meta.get("arch", ""),
            bitcode=bitcode,
            language=meta.get("language", "cuda"),
            clang_version=meta.get("clang_version", ""),
            targets=meta.get("targets", ()),
            rdc=bool(meta.get("rdc", False)),
            kernels=meta.get("kernels", ()),
            producer=meta.get("producer", ""),
            binary=path,
            offset=base_offset + pos,
        )
        pos += length


AR_MAGIC = b"!<arch>\n"


def _ar_members(data: bytes, path: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each member of a static library (GNU/System V `ar` format)."""
    pos, longnames = len(AR_MAGIC), b""
    while pos + 60 <= len(data):
        header = bytes(data[pos : pos + 60])
        try:
            name, size = header[:16].decode().strip(), int(header[48:58].decode().strip())
        except ValueError as exc:
            raise CorruptFileError(path, f"bad archive member header at offset {pos}") from exc
        body = pos + 60
        if name == "//":
            longnames = bytes(data[body : body + size])
        elif name not in ("/", "/SYM64/"):
            if name.startswith("/") and name[1:].isdigit():
                start = int(name[1:])
                name = longnames[start : longnames.find(b"/\n", start)].decode()
            yield name.rstrip("/"), bytes(data[body : body + size])
        pos = body + size + (size & 1)


def _elf_entries(elf: ElfFile) -> list[EmbeddedEntry]:
    entries: list[EmbeddedEntry] = []
    for section in elf.sections_named(SECTION_NAME):
        entries.extend(iter_entries(elf.section_data(section), elf.path, section.offset))
    return entries


def read_entries(path: str | os.PathLike) -> list[EmbeddedEntry]:
    """Every embedded entry of an object, executable, shared or static library (empty if none)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            is_archive = f.read(len(AR_MAGIC)) == AR_MAGIC
            if is_archive:
                data = f.read()
    except OSError as exc:
        raise FormatError(path, f"cannot read the file: {exc.strerror}") from exc
    if not is_archive:
        return _elf_entries(ElfFile.read(path))
    entries: list[EmbeddedEntry] = []
    for name, member in _ar_members(AR_MAGIC + data, path):
        if member[:4] == b"\x7fELF":
            entries.extend(_elf_entries(ElfFile.parse(member, f"{path}({name})")))
    return entries
