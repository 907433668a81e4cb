"""The cubins nvcc embeds in host binaries (`.nv_fatbin`), and the kernel facts they record.

A host object, executable or shared library built by nvcc holds one or more fatbins in its
`.nv_fatbin` section; each fatbin holds entries (cubin ELF images, PTX). A cubin's
`.nv.info.<kernel>` section lists the kernel's parameters (`EIATTR_KPARAM_INFO`): ordinal,
offset and size. This is what the driver will pass, so it checks embedded IR against the binary,
and it describes kernels that have no IR.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator

import attrs

from mneme.core.errors import CorruptFileError
from mneme.instrument.elf import ElfFile

log = logging.getLogger(__name__)

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTION = ".nv_fatbin"
KIND_PTX, KIND_ELF = 1, 2
EIFMT_SVAL = 4  # attribute with a size-prefixed value
EIATTR_KPARAM_INFO = 0x17
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@attrs.frozen
class KernelParam:
    ordinal: int
    offset: int
    size: int


def _payload(body: bytes, where: str) -> bytes | None:
    if body[:4] == ZSTD_MAGIC:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    if body[:4] == b"\x7fELF":
        return body
    log.debug("%s: skipping a compressed fatbin entry in a format other than zstd", where)
    return None


def iter_cubins(binary: str | os.PathLike) -> Iterator[ElfFile]:
    """Every cubin in the `.nv_fatbin` section(s) of a host ELF file (none if it has no device code)."""
    elf = ElfFile.read(binary)
    for section in elf.sections_named(FATBIN_SECTION):
        data = elf.section_data(section)
        pos = 0
        while pos + 16 <= len(data):
            magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
            if magic != FATBIN_MAGIC:
                pos += 8  # alignment padding between two objects' fatbins
                continue
            entry, end = pos + header, pos + header + size
            if end > len(data):
                raise CorruptFileError(elf.path, f"fatbin at {FATBIN_SECTION} offset {pos} runs past the section end")
            while entry + 16 <= end:
                kind, _ver, entry_header, payload_size = struct.unpack_from("<HHIQ", data, entry)
                body = data[entry + entry_header : entry + entry_header + payload_size]
                if kind == KIND_ELF:
                    image = _payload(body, f"{elf.path}: fatbin entry at {entry}")
                    if image is not None:
                        yield ElfFile.parse(image, f"{elf.path}:cubin@{entry}")
                entry += entry_header + payload_size
            pos = (end + 7) & ~7


def kernel_names(cubin: ElfFile) -> list[str]:
    """The kernels (entry functions) a cubin defines."""
    return [s.name[len(".nv.info."):] for s in cubin.sections if s.name.startswith(".nv.info.")]


def kernel_params(cubin: ElfFile, kernel: str) -> list[KernelParam] | None:
    """The parameters of `kernel` by ordinal, or None when this cubin does not define it."""
    info = cubin.sections_named(f".nv.info.{kernel}")
    if not info:
        return None
    data, pos, params = cubin.section_data(info[0]), 0, []
    while pos + 4 <= len(data):
        fmt, attr = data[pos], data[pos + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, pos + 2)
            if attr == EIATTR_KPARAM_INFO and size >= 12:
                _index, ordinal, offset, bits = struct.unpack_from("<IHHI", data, pos + 4)
                params.append(KernelParam(ordinal, offset, (bits >> 18) & 0x3FFF))
            pos += 4 + size
        else:  # EIFMT_NVAL / BVAL / HVAL: the value fits in the 2 bytes after the attribute
            pos += 4
    return sorted(params, key=lambda p: p.ordinal)


def find_kernel_params(binary: str | os.PathLike, kernel: str) -> list[KernelParam] | None:
    """The parameters of `kernel` from the first cubin in `binary` that defines it."""
    for cubin in iter_cubins(binary):
        params = kernel_params(cubin, kernel)
        if params is not None:
            return params
    return None
