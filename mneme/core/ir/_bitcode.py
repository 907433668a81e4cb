"""The bitcode wrapper and IDENTIFICATION block: which LLVM wrote a bitcode file, read without parsing it."""

from __future__ import annotations

BITCODE_MAGIC = b"BC\xc0\xde"
BITCODE_WRAPPER_MAGIC = b"\xde\xc0\x17\x0b"


class _Bits:
    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos  # in bits

    def read(self, width: int) -> int:
        value = 0
        for i in range(width):
            byte = self.data[(self.pos + i) >> 3]
            value |= ((byte >> ((self.pos + i) & 7)) & 1) << i
        self.pos += width
        return value

    def vbr(self, width: int) -> int:
        value, shift = 0, 0
        while True:
            chunk = self.read(width)
            value |= (chunk & ((1 << (width - 1)) - 1)) << shift
            shift += width - 1
            if not chunk >> (width - 1):
                return value


_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"


def bitcode_identification(data: bytes) -> dict | None:
    """Read the IDENTIFICATION block at the start of a bitcode file.

    Returns {"producer": str, "producer_bits": bit offset of each character (None where
    not addressable), "epoch": int, "epoch_bit": bit offset of the epoch's VBR value} or None when the file has no such block (or is not readable bitcode).
    """
    try:
        start = 0
        if data[:4] == BITCODE_WRAPPER_MAGIC:
            start = int.from_bytes(data[8:12], "little")
        if data[start : start + 4] != BITCODE_MAGIC:
            return None
        bits = _Bits(data, (start + 4) * 8)
        if bits.read(2) != 1:  # ENTER_SUBBLOCK
            return None
        if bits.vbr(8) != 13:  # IDENTIFICATION_BLOCK_ID
            return None
        width = bits.vbr(4)
        bits.pos = (bits.pos + 31) & ~31
        bits.read(32)  # block length in words
        abbrevs: list[list[tuple]] = []
        result: dict = {}
        while True:
            abbrev_id = bits.read(width)
            if abbrev_id == 0:  # END_BLOCK
                return result or None
            if abbrev_id == 2:  # DEFINE_ABBREV
                ops = []
                count = bits.vbr(5)
                i = 0
                while i < count:
                    literal = bits.read(1)
                    if literal:
                        ops.append(("lit", bits.vbr(8)))
                    else:
                        enc = bits.read(3)
                        ops.append(
                            ("fixed", bits.vbr(5))
                            if enc == 1
                            else ("vbr", bits.vbr(5))
                            if enc == 2
                            else ("array",)
                            if enc == 3
                            else ("char6",)
                            if enc == 4
                            else ("blob",)
                        )
                    i += 1
                abbrevs.append(ops)
                continue
            if abbrev_id == 3:  # UNABBREV_RECORD
                code = bits.vbr(6)
                values = [bits.vbr(6) for _ in range(bits.vbr(6))]
                positions = [None] * len(values)
            else:
                ops = abbrevs[abbrev_id - 4]
                values, positions = [], []

                def scalar(op):
                    pos = bits.pos
                    if op[0] == "lit":
                        return op[1], None
                    if op[0] == "fixed":
                        return bits.read(op[1]), pos
                    if op[0] == "vbr":
                        return bits.vbr(op[1]), pos
                    return _CHAR6.index(_CHAR6[bits.read(6)]), pos

                j = 0
                while j < len(ops):
                    op = ops[j]
                    if op[0] == "array":
                        n = bits.vbr(6)
                        elem = ops[j + 1]
                        for _ in range(n):
                            v, p = scalar(elem)
                            values.append(_CHAR6[v] if elem[0] == "char6" else v)
                            positions.append(p)
                        j += 2
                        continue
                    v, p = scalar(op)
                    values.append(v)
                    positions.append(p)
                    j += 1
                code, values, positions = values[0], values[1:], positions[1:]
            if code == 1:  # IDENTIFICATION_CODE_STRING
                result["producer"] = "".join(v if isinstance(v, str) else chr(v) for v in values)
                result["producer_bits"] = positions
            elif code == 2:  # IDENTIFICATION_CODE_EPOCH
                result["epoch"] = values[0]
                result["epoch_bit"] = positions[0]
    except (IndexError, ValueError):
        return None


def bitcode_producer(data: bytes) -> tuple[str, int] | None:
    """(producer, epoch) of a bitcode file, e.g. ("LLVM22.1.0", 0); None when unknown."""
    ident = bitcode_identification(data)
    if not ident or "producer" not in ident:
        return None
    return ident["producer"], ident.get("epoch", 0)
