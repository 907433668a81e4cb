"""Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`, and the compressed `CCOB` form): the code
objects a HIP executable or `hipModuleLoadData` image carries, one per target.

The HIP recorder saves each registered or loaded image as it found it (images/*.hipfb); finalize
takes the code object of the recording's arch from it (`kernel_image`).
"""

from __future__ import annotations

import struct
import zlib

from mneme.core.errors import FormatError

__all__ = ["BUNDLE_MAGIC", "COMPRESSED_MAGIC", "code_objects", "kernel_image"]

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
# The compressed header after magic, version and method: (total size, uncompressed size, hash)
# by version; version 1 has no total size.
_COMPRESSED_HEADERS = {1: "<IQ", 2: "<IIQ", 3: "<QQQ"}
_ZLIB, _ZSTD = 0, 1


def _decompress(data: bytes, where: str) -> bytes:
    version, method = struct.unpack_from("<HH", data, 4)
    layout = _COMPRESSED_HEADERS.get(version)
    if layout is None:
        raise FormatError(where, f"compressed offload bundle of unknown version {version}", field="version")
    fields = struct.unpack_from(layout, data, 8)
    start = 8 + struct.calcsize(layout)
    end = fields[0] if version >= 2 else len(data)
    size = fields[-2]
    payload = data[start:end]
    if method == _ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
    if method == _ZLIB:
        return zlib.decompress(payload)
    raise FormatError(where, f"compressed offload bundle with unknown method {method}", field="method")


def code_objects(data: bytes, where: str = "<bundle>") -> dict[str, bytes]:
    """{target: code object} of the amdgcn entries of a bundle (plain or compressed).

    A target is the bundle entry's triple, e.g. ``hipv4-amdgcn-amd-amdhsa--gfx90a``; a bare ELF
    code object is returned as {"": data}.
    """
    data = bytes(data)
    if data.startswith(b"\x7fELF"):
        return {"": data}
    if data.startswith(COMPRESSED_MAGIC):
        data = _decompress(data, where)
    if not data.startswith(BUNDLE_MAGIC):
        raise FormatError(where, "not a clang offload bundle, nor an ELF code object", field="magic")
    (count,) = struct.unpack_from("<Q", data, 24)
    found, pos = {}, 32
    for _ in range(count):
        offset, size, triple_size = struct.unpack_from("<QQQ", data, pos)
        triple = data[pos + 24 : pos + 24 + triple_size].decode(errors="replace")
        pos += 24 + triple_size
        if "amdgcn" in triple and size:
            found[triple] = data[offset : offset + size]
    return found


def _arch_of(target: str) -> str:
    """``gfx90a:xnack+`` of ``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+``."""
    return target.rpartition("--")[2]


def kernel_image(data: bytes, kernel: str, arch: str, where: str) -> tuple[bytes, str] | None:
    """The code object for `arch` (its processor name; features ignored) in a saved image that
    defines `kernel`, as (bytes, "hsaco"); None when there is none (RawFormat.kernel_image)."""
    try:
        objects = code_objects(data, where)
    except (FormatError, struct.error, zlib.error, ValueError):
        return None
    wanted = arch.split(":")[0]
    for target, code in objects.items():
        if target and _arch_of(target).split(":")[0] != wanted:
            continue
        if kernel.encode() + b"\0" in code:  # the symbol table names it
            return code, "hsaco"
    return None
