"""Device memory at the recorded addresses through HIP virtual memory management.

A recording's buffers must come back at the same virtual addresses (pointers stored inside
device memory stay valid), so a replay reserves the recorded range with
``hipMemAddressReserve(addr=...)``, backs the pieces it needs with ``hipMemCreate`` +
``hipMemMap`` and grants access with ``hipMemSetAccess``. The arithmetic (rounding to the
allocation granularity, which pieces still need memory, how a write is cut into staging
chunks) is in pure functions, tested on any machine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from mneme.core.errors import MnemeError
from mneme_hip.hipapi import call

log = logging.getLogger(__name__)


def align_down(value: int, alignment: int) -> int:
    return value // alignment * alignment


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def reservation_span(addr: int, size: int, granularity: int) -> tuple[int, int]:
    """(start, length) of the granularity-aligned range that covers [addr, addr + size)."""
    if size <= 0:
        raise MnemeError(f"cannot reserve {size} bytes at 0x{addr:x}; the size must be positive")
    if granularity <= 0 or granularity & (granularity - 1):
        raise MnemeError(f"allocation granularity {granularity} is not a power of two")
    start = align_down(addr, granularity)
    return start, align_up(addr + size, granularity) - start


def unmapped_pieces(mapped: list[tuple[int, int]], addr: int, size: int, granularity: int) -> list[tuple[int, int]]:
    """The granule-aligned (start, length) pieces of [addr, addr + size) not yet in `mapped` ((start, length))."""
    start, length = reservation_span(addr, size, granularity)
    end = start + length
    pieces = []
    cursor = start
    for m_start, m_length in sorted(mapped):
        m_end = m_start + m_length
        if m_end <= cursor or m_start >= end:
            continue
        if m_start > cursor:
            pieces.append((cursor, m_start - cursor))
        cursor = max(cursor, m_end)
    if cursor < end:
        pieces.append((cursor, end - cursor))
    return pieces


def staging_chunks(size: int, chunk: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of the pieces a transfer of `size` bytes takes through `chunk`-byte staging buffers."""
    if chunk <= 0:
        raise MnemeError(f"a staging chunk of {chunk} bytes is not possible")
    for offset in range(0, size, chunk):
        yield offset, min(chunk, size - offset)


def l2_flush_bytes(l2_bytes: int) -> int:
    """Bytes to write so nothing of a kernel's data stays in an L2 of `l2_bytes` (twice its size)."""
    return max(2 * l2_bytes, 4 << 20)


class Reservation:
    """One reserved virtual range at a fixed address on one device, and the memory mapped into it."""

    def __init__(self, hip: Any, device_index: int, addr: int, size: int, granularity: int):
        self._hip = hip
        self.device_index = device_index
        self.granularity = granularity
        self.start, self.length = reservation_span(addr, size, granularity)
        got = int(
            call(
                f"hipMemAddressReserve(0x{self.start:x}, {self.length})",
                hip.hipMemAddressReserve(self.length, granularity, self.start, 0),
            )
        )
        if got != self.start:
            call("hipMemAddressFree", hip.hipMemAddressFree(got, self.length))
            raise MnemeError(
                f"the HIP runtime placed the reservation for 0x{self.start:x}..0x{self.start + self.length:x} at "
                f"0x{got:x}; the range is taken in this process (another allocation or library holds it)"
            )
        self.mappings: list[tuple[int, int, Any]] = []  # (start, length, allocation handle)
        self._closed = False

    @property
    def end(self) -> int:
        return self.start + self.length

    def covers(self, addr: int, size: int) -> bool:
        return self.start <= addr and addr + size <= self.end

    def map(self, addr: int, size: int) -> None:
        """Back [addr, addr + size) with device memory, piece by piece where not mapped yet."""
        if self._closed:
            raise MnemeError(f"the reservation at 0x{self.start:x} was released")
        hip = self._hip
        prop = allocation_prop(hip, self.device_index)
        desc = hip.hipMemAccessDesc()
        _set_device_location(hip, desc.location, self.device_index)
        desc.flags = hip.hipMemAccessFlags.hipMemAccessFlagsProtReadWrite
        for start, length in unmapped_pieces([(s, n) for s, n, _ in self.mappings], addr, size, self.granularity):
            handle = call(f"hipMemCreate({length})", hip.hipMemCreate(length, prop, 0))
            try:
                call(f"hipMemMap(0x{start:x}, {length})", hip.hipMemMap(start, length, 0, handle, 0))
            except MnemeError:
                hip.hipMemRelease(handle)
                raise
            self.mappings.append((start, length, handle))
            call(f"hipMemSetAccess(0x{start:x}, {length})", hip.hipMemSetAccess(start, length, desc, 1))

    def release(self) -> None:
        if self._closed:
            return
        self._closed = True
        hip = self._hip
        for start, length, handle in reversed(self.mappings):
            for what, result in (
                ("hipMemUnmap", hip.hipMemUnmap(start, length)),
                ("hipMemRelease", hip.hipMemRelease(handle)),
            ):
                if int(result[0]) != 0:
                    log.warning("%s at 0x%x failed: %s", what, start, getattr(result[0], "name", result[0]))
        self.mappings.clear()
        result = hip.hipMemAddressFree(self.start, self.length)
        if int(result[0]) != 0:
            log.warning("hipMemAddressFree at 0x%x failed: %s", self.start, getattr(result[0], "name", result[0]))


def _set_device_location(hip: Any, location: Any, device_index: int) -> None:
    # hip-python's nested struct members are views that write through to the parent
    location.type = hip.hipMemLocationType.hipMemLocationTypeDevice
    location.id = device_index


def allocation_prop(hip: Any, device_index: int) -> Any:
    prop = hip.hipMemAllocationProp()
    prop.type = hip.hipMemAllocationType.hipMemAllocationTypePinned
    _set_device_location(hip, prop.location, device_index)
    return prop


def allocation_granularity(hip: Any, device_index: int) -> int:
    """The minimum granularity of HIP VMM allocations on the device (``hipMemAllocationGranularityMinimum``)."""
    flags = hip.hipMemAllocationGranularity_flags.hipMemAllocationGranularityMinimum
    return int(
        call(
            "hipMemGetAllocationGranularity",
            hip.hipMemGetAllocationGranularity(allocation_prop(hip, device_index), flags),
        )
    )
