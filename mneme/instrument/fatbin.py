"""The cubins nvcc embeds in host binaries (`.nv_fatbin`), and the kernel facts they record.

A host object, executable or shared library built by nvcc holds one or more fatbins in its
`.nv_fatbin` section; each fatbin holds entries (cubin ELF images, PTX). A cubin's
`.nv.info.<kernel>` section lists the kernel's parameters (`EIATTR_KPARAM_INFO`): ordinal,
offset and size. This is what the driver will pass, so it checks embedded IR against the binary,
and it describes kernels that have no IR. A module load may be given a fatbin, a cubin or PTX:
`kernel_image` picks what the driver would run on a device of a given architecture.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterator

import attrs

from mneme.core.errors import CorruptFileError, MnemeError
from mneme.core.elf import ElfFile

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


FLAG_LZ4 = 0x2000  # entry flag: the payload is one LZ4 block (nvcc's -compress-mode default/speed/balance)


@attrs.frozen
class FatbinEntry:
    """One entry of a fatbin: a cubin or PTX (decompressed) for one architecture number (90: sm_90)."""

    kind: str  # "cubin" or "ptx"
    arch: int
    image: bytes = attrs.field(repr=False)


def _lz4_block(src: bytes, size: int) -> bytes:
    """Decode one raw LZ4 block (no frame) of `size` decoded bytes; the entry may be padded after it."""
    from mneme.core.snapshot import codec

    try:
        return codec.lz4_decode_python(src, size, stop_at_size=True)
    except ValueError as exc:
        raise CorruptFileError("<lz4>", str(exc)) from None


def _zstd(body: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(body)


def entries(data: bytes, where: str = "<fatbin>") -> list[FatbinEntry]:
    """The entries of one raw fatbin (it starts at `data[0]`), cubins and PTX, decompressed.

    Compressed entries are decompressed: zstd (`-compress-mode=size`) and LZ4 (nvcc's other
    modes); entries nothing here can read are left out with a debug message.
    """
    magic, _version, header, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise CorruptFileError(where, "not a fatbin (magic 0xBA55ED50 missing)")
    found = []
    pos, end = header, min(len(data), header + size)
    while pos + 32 <= end:
        kind, _ver, entry_header, payload_size = struct.unpack_from("<HHIQ", data, pos)
        (arch,) = struct.unpack_from("<I", data, pos + 28)
        flags = struct.unpack_from("<Q", data, pos + 40)[0] if pos + 48 <= len(data) else 0
        decoded_size = struct.unpack_from("<Q", data, pos + 56)[0] if entry_header >= 64 else 0
        body = bytes(data[pos + entry_header : pos + entry_header + payload_size])
        if flags & FLAG_LZ4 and decoded_size and body[:4] not in (b"\x7fELF", ZSTD_MAGIC):
            try:
                body = _lz4_block(body, decoded_size)
            except (CorruptFileError, IndexError) as exc:
                log.debug("%s@%d: skipping an LZ4 entry that does not decode: %s", where, pos, exc)
                body = b""
        if kind == KIND_ELF:
            if body[:4] == ZSTD_MAGIC:
                body = _zstd(body)
            if body[:4] == b"\x7fELF":
                found.append(FatbinEntry("cubin", arch, body))
            else:
                log.debug("%s@%d: skipping a compressed fatbin entry in a format other than zstd or LZ4", where, pos)
        elif kind == KIND_PTX:
            if body[:4] == ZSTD_MAGIC:
                body = _zstd(body)
            text = body.split(b"\0", 1)[0]
            if text.lstrip().startswith((b"//", b".version")):
                found.append(FatbinEntry("ptx", arch, text + b"\0"))
            else:
                log.debug("%s@%d: skipping a PTX entry in an unknown compressed form", where, pos)
        if entry_header == 0:
            break
        pos += entry_header + payload_size
    return found


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
            end = pos + header + size
            if end > len(data):
                raise CorruptFileError(elf.path, f"fatbin at {FATBIN_SECTION} offset {pos} runs past the section end")
            for entry in entries(data[pos:end], f"{elf.path}: fatbin at {pos}"):
                if entry.kind == "cubin":
                    yield ElfFile.parse(entry.image, f"{elf.path}:cubin@{pos}")
            pos = (end + 7) & ~7


def kernel_names(cubin: ElfFile) -> list[str]:
    """The kernels (entry functions) a cubin defines."""
    return [s.name[len(".nv.info.") :] for s in cubin.sections if s.name.startswith(".nv.info.")]


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


def _arch_number(arch: str) -> int:
    match = re.match(r"^(?:sm|compute)_(\d+)", arch or "")
    return int(match.group(1)) if match else 0


def _ptx_defines(text: str, kernel: str) -> bool:
    return re.search(rf"\.entry\s+{re.escape(kernel)}\s*\(", text) is not None


def kernel_image(data: bytes, kernel: str, arch: str, where: str = "<image>") -> tuple[bytes, str] | None:
    """The loadable image of `kernel` for a device of `arch`, from what a module load was given.

    A cubin or PTX is taken as it is when it defines the kernel; from a fatbin, the cubin for
    the device's architecture, else a compatible older one of the same major version, else PTX
    the driver can JIT. None when the image does not define the kernel.
    """

    def cubin_defines(image: bytes) -> bool:
        try:
            return kernel in kernel_names(ElfFile.parse(image, where))
        except MnemeError:
            return False

    if data[:4] == b"\x7fELF":
        return (data, "cubin") if cubin_defines(data) else None
    if len(data) >= 16 and struct.unpack_from("<I", data, 0)[0] == FATBIN_MAGIC:
        want = _arch_number(arch) or 90
        best, best_rank = None, 0
        for entry in entries(data, where):
            if entry.kind == "cubin" and cubin_defines(entry.image):
                rank = 3 if entry.arch == want else (2 if entry.arch // 10 == want // 10 and entry.arch < want else 0)
            elif entry.kind == "ptx" and _ptx_defines(entry.image.decode(errors="replace"), kernel):
                rank = 1 if entry.arch <= want else 0
            else:
                rank = 0
            if rank > best_rank:
                best, best_rank = (entry.image, entry.kind), rank
        return best
    text = data.split(b"\0", 1)[0]
    if _ptx_defines(text.decode(errors="replace"), kernel):
        return text + b"\0", "ptx"
    return None
