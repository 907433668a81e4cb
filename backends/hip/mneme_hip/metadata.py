"""The AMDGPU metadata of a code object (.hsaco), read in process, and the kernel's resources from it.

Code object v3 and later carry an ELF note `AMDGPU`/NT_AMDGPU_METADATA whose payload is
MessagePack; the reader here decodes the subset the note uses.
"""

from __future__ import annotations

import struct

from mneme.core.backend import Resources
from mneme.core.errors import IRError

NT_AMDGPU_METADATA = 32


def amdgpu_metadata(hsaco: bytes) -> dict:
    """The AMDGPU metadata note (code object v3+) of a code object, as a dict; {} when absent.

    Read in process: the ELF note `AMDGPU`/NT_AMDGPU_METADATA holds MessagePack.
    """
    try:
        if hsaco[:4] != b"\x7fELF" or hsaco[4] != 2:
            raise ValueError("not a 64-bit ELF file")
        shoff = struct.unpack_from("<Q", hsaco, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", hsaco, 0x3A)
        for i in range(shnum):
            sh_type, _, _, offset, size = struct.unpack_from("<IQQQQ", hsaco, shoff + i * shentsize + 4)
            if sh_type != 7:  # SHT_NOTE
                continue
            pos, end = offset, offset + size
            while pos + 12 <= end:
                namesz, descsz, note_type = struct.unpack_from("<III", hsaco, pos)
                name = hsaco[pos + 12 : pos + 12 + namesz].rstrip(b"\0")
                desc = pos + 12 + (namesz + 3) // 4 * 4
                if name == b"AMDGPU" and note_type == NT_AMDGPU_METADATA:
                    value, _ = _unpack_msgpack(hsaco, desc)
                    return value
                pos = desc + (descsz + 3) // 4 * 4
    except (ValueError, IndexError, struct.error) as exc:
        raise IRError(f"cannot read the AMDGPU metadata of the code object: {exc}") from exc
    return {}


def _unpack_msgpack(data: bytes, pos: int):
    """Decode one MessagePack value at `pos`; returns (value, next position)."""
    tag = data[pos]
    pos += 1
    if tag <= 0x7F:
        return tag, pos
    if tag >= 0xE0:
        return tag - 0x100, pos
    if 0x80 <= tag <= 0x8F or tag in (0xDE, 0xDF):
        count, pos = (tag & 0x0F, pos) if tag <= 0x8F else _length(data, pos, 2 if tag == 0xDE else 4)
        result = {}
        for _ in range(count):
            key, pos = _unpack_msgpack(data, pos)
            result[key], pos = _unpack_msgpack(data, pos)
        return result, pos
    if 0x90 <= tag <= 0x9F or tag in (0xDC, 0xDD):
        count, pos = (tag & 0x0F, pos) if tag <= 0x9F else _length(data, pos, 2 if tag == 0xDC else 4)
        items = []
        for _ in range(count):
            item, pos = _unpack_msgpack(data, pos)
            items.append(item)
        return items, pos
    if 0xA0 <= tag <= 0xBF or tag in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        if tag <= 0xBF:
            size = tag & 0x1F
        else:
            size, pos = _length(data, pos, {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[tag])
        raw = data[pos : pos + size]
        return (raw if tag >= 0xC4 and tag <= 0xC6 else raw.decode("utf-8")), pos + size
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if tag in simple:
        return simple[tag], pos
    fmt = {
        0xCC: ">B",
        0xCD: ">H",
        0xCE: ">I",
        0xCF: ">Q",
        0xD0: ">b",
        0xD1: ">h",
        0xD2: ">i",
        0xD3: ">q",
        0xCA: ">f",
        0xCB: ">d",
    }.get(tag)
    if fmt is None:
        raise ValueError(f"unsupported MessagePack tag 0x{tag:02x}")
    (value,) = struct.unpack_from(fmt, data, pos)
    return value, pos + struct.calcsize(fmt)


def _length(data: bytes, pos: int, size: int) -> tuple[int, int]:
    return int.from_bytes(data[pos : pos + size], "big"), pos + size


def hsaco_resources(hsaco: bytes, kernel_name: str) -> Resources:
    meta = amdgpu_metadata(hsaco)
    for kernel in meta.get("amdhsa.kernels", []):
        if kernel.get(".name") == kernel_name:
            return Resources(
                registers=int(kernel.get(".vgpr_count", -1)),
                local_mem=int(kernel.get(".private_segment_fixed_size", -1)),
                const_mem=-1,
                shared_mem=int(kernel.get(".group_segment_fixed_size", -1)),
                spill_stores=int(kernel.get(".vgpr_spill_count", 0)) + int(kernel.get(".sgpr_spill_count", 0)),
                spill_loads=-1,
                max_threads_per_block=int(kernel.get(".max_flat_workgroup_size", -1)),
            )
    return Resources()
