"""Out-of-bounds writes past a buffer's end, caught at element granularity on the host backend.

Device memory is mapped by pages, so a write just past the end of a 4000-byte buffer lands
in the same page and faults nowhere. Before a kernel's first launch (the one a replay
verifies), the bytes from each buffer's end to the end of its page (or to the next buffer)
are filled with a canary; after the launch, a changed canary byte is an out-of-bounds write,
reported with the buffer, the offset past its end and the argument that points to it.
Reads past the end are not caught (docs/security.md).
"""

from __future__ import annotations

import ctypes
import struct

from mneme.core.errors import ExperimentError

PAGE = 4096
CANARY = 0xA5


class RedZones:
    """The slack after each mapped buffer, inside its last page."""

    def __init__(self) -> None:
        self._regions: dict[int, int] = {}
        self._armed: list[tuple[int, int, int, int]] = []  # (buffer addr, buffer size, slack start, slack size)

    def add(self, addr: int, size: int) -> None:
        if size > 0:
            self._regions[addr] = max(size, self._regions.get(addr, 0))

    def arm(self) -> None:
        """Fill every buffer's slack with the canary."""
        starts = sorted(self._regions)
        self._armed = []
        for i, addr in enumerate(starts):
            end = addr + self._regions[addr]
            limit = -(-end // PAGE) * PAGE
            if i + 1 < len(starts):
                limit = min(limit, starts[i + 1])
            if limit > end:
                ctypes.memset(end, CANARY, limit - end)
                self._armed.append((addr, self._regions[addr], end, limit - end))

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
                f"buffer at 0x{addr:x}{_pointer_argument(args, addr, size)}, past its end", kind="fault")


def _pointer_argument(args: bytes, addr: int, size: int) -> str:
    """Which argument bytes hold a pointer into the buffer, for the message."""
    for offset in range(0, len(args) - 7, 8):
        (value,) = struct.unpack_from("<Q", args, offset)
        if addr <= value < addr + size:
            return f" (the pointer at byte {offset} of the arguments)"
    return ""
