"""Accesses past a buffer's end, caught at element granularity on the host backend.

Device memory is mapped by pages, so an access just past the end of a 4000-byte buffer lands
in the same page and faults nowhere. On a kernel's first launch (the one a replay verifies), the
bytes from each buffer's end to the end of its page (or to the next buffer) are:
- the runtime's bounds table (`arm`), which the checks compiled before every access of the kernel
  (`boundscheck`, `accesses`) consult during that launch: an access that overlaps a slack fails
  before it happens, naming the buffer, the bytes and the kind of access;
- filled with a canary before the launch; after it, a changed canary byte is a write the checks
  did not see (a build without them, ``MNEME_HOST_BOUNDS=0``), reported with the buffer, the
  offset past its end and the argument that points to it.
A buffer is an address and a size (`add`); whatever a caller counts as part of the allocation
(padding) it adds to the size. See docs/security.md for what is not caught.
"""

from __future__ import annotations

import ctypes
import re
import struct

from mneme.core.errors import ExperimentError

PAGE = 4096
CANARY = 0xA5


class _Bound(ctypes.Structure):
    """One entry of the runtime's table (runtime_parts/bounds.inc: mn_bound)."""

    _fields_ = [("addr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("limit", ctypes.c_uint64)]


class RedZones:
    """The slack after each mapped buffer, inside its last page."""

    def __init__(self) -> None:
        self._regions: dict[int, int] = {}
        self._armed: list[tuple[int, int, int, int]] = []  # (buffer addr, buffer size, slack start, slack size)
        self._table = None  # the runtime reads it during the armed launch: kept alive here

    def add(self, addr: int, size: int) -> None:
        """A buffer of `size` bytes at `addr` (the largest size given for an address counts)."""
        if size > 0:
            self._regions[addr] = max(size, self._regions.get(addr, 0))

    def slacks(self) -> list[tuple[int, int, int]]:
        """(buffer address, size, slack end) of every buffer with slack in its last page, by address."""
        starts = sorted(self._regions)
        found = []
        for i, addr in enumerate(starts):
            end = addr + self._regions[addr]
            limit = -(-end // PAGE) * PAGE
            if i + 1 < len(starts):
                limit = min(limit, starts[i + 1])
            if limit > end:
                found.append((addr, self._regions[addr], limit))
        return found

    def arm(self, runtime=None) -> None:
        """Fill every buffer's slack with the canary and, given the runtime, arm its read checks."""
        self._armed = []
        slacks = self.slacks()
        for addr, size, limit in slacks:
            ctypes.memset(addr + size, CANARY, limit - addr - size)
            self._armed.append((addr, size, addr + size, limit - addr - size))
        if runtime is not None and slacks:
            self._table = (_Bound * len(slacks))(*(_Bound(a, s, l) for a, s, l in slacks))
            runtime.mneme_set_bounds.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
            runtime.mneme_set_bounds.restype = None
            runtime.mneme_set_bounds(ctypes.addressof(self._table), len(slacks))

    def disarm(self, runtime) -> None:
        """Stop the runtime's read checks (the timed runs do not pay for them)."""
        if self._table is not None:
            runtime.mneme_set_bounds(None, 0)
            self._table = None

    def check(self, kernel_name: str, args: bytes) -> None:
        """Raise an `ExperimentError` naming the first buffer whose slack the launch wrote."""
        for addr, size, start, count in self._armed:
            slack = ctypes.string_at(start, count)
            if slack.count(CANARY) == count:
                continue
            first = next(i for i, b in enumerate(slack) if b != CANARY)
            last = max(i for i, b in enumerate(slack) if b != CANARY)
            raise ExperimentError(
                f"kernel {kernel_name!r} wrote out of bounds: bytes {size + first}..{size + last} of the {size}-byte "
                f"buffer at 0x{addr:x}{_pointer_argument(args, addr, size)}, past its end",
                kind="fault",
            )


def with_argument(message: str, args: bytes) -> str:
    """A runtime's out-of-bounds read message, with the argument that points to the buffer."""
    found = re.search(r"of the (\d+)-byte buffer at 0x([0-9a-f]+)", message)
    if not found:
        return message
    size, addr = int(found.group(1)), int(found.group(2), 16)
    return message[: found.end()] + _pointer_argument(args, addr, size) + message[found.end() :]


def _pointer_argument(args: bytes, addr: int, size: int) -> str:
    """Which argument bytes hold a pointer into the buffer, for the message."""
    for offset in range(0, len(args) - 7, 8):
        (value,) = struct.unpack_from("<Q", args, offset)
        if addr <= value < addr + size:
            return f" (the pointer at byte {offset} of the arguments)"
    return ""
