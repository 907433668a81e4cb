"""Device memory at fixed virtual addresses (CUDA virtual memory management) and pinned host buffers.

A `Reservation` owns one reserved virtual address range and the physical allocations mapped
into it; a `PinnedBuffer` owns page-locked host memory; a `DeviceBuffer` owns an ordinary
device allocation (expected bytes for compare, pristine copies for resets, the L2 flush).
Each owns one handle, frees it once, and raises when used after close.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
from collections.abc import Iterator
from concurrent.futures import Executor, wait
from typing import Any

import numpy as np

from mneme.core import envvars
from mneme.core.errors import MnemeError, UsageError
from mneme_cuda.driver import check, driver

log = logging.getLogger(__name__)


def align_down(value: int, alignment: int) -> int:
    return value - value % alignment


def align_up(value: int, alignment: int) -> int:
    return align_down(value + alignment - 1, alignment)


def holder_of(addr: int, size: int) -> str:
    """What this process has mapped over [addr, addr + size), from /proc/self/maps, for error messages."""
    try:
        with open("/proc/self/maps") as handle:
            lines = handle.readlines()
    except OSError:
        return "unknown (no /proc/self/maps)"
    holders = []
    for line in lines:
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start < addr + size and addr < end:
            what = fields[5] if len(fields) > 5 else "an anonymous mapping (often the CUDA driver's own)"
            holders.append(f"{start:#x}-{end:#x} {what}")
    return "; ".join(holders[:4]) if holders else "nothing visible in /proc/self/maps (the driver's own VA space)"


class PinnedBuffer:
    """Page-locked host memory of `size` bytes; `array` is a numpy uint8 view of it."""

    def __init__(self, size: int):
        cu = driver()
        self.size = size
        self.ptr = int(check(cu.cuMemHostAlloc(size, 0), f"cuMemHostAlloc of {size} pinned bytes"))
        self.array = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(self.ptr))
        self._closed = False

    def contains(self, ptr: int, size: int) -> bool:
        return not self._closed and self.ptr <= ptr and ptr + size <= self.ptr + self.size

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.array = None
            check(driver().cuMemFreeHost(self.ptr), "cuMemFreeHost")

    def __enter__(self) -> PinnedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DeviceBuffer:
    """An ordinary device allocation (not at a fixed address)."""

    def __init__(self, size: int):
        cu = driver()
        self.size = size
        self.addr = int(check(cu.cuMemAlloc(max(size, 1)), f"cuMemAlloc of {size} bytes"))
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            check(driver().cuMemFree(self.addr), f"cuMemFree of {self.addr:#x}")

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reservation:
    """One reserved VA range at an exact address, backed lazily at allocation granularity."""

    def __init__(self, device_ordinal: int, addr: int, size: int, granularity: int):
        cu = driver()
        self.device_ordinal = device_ordinal
        self.granularity = granularity
        offered = []
        for base, length in reservation_attempts(addr, size, granularity):
            got = int(check(cu.cuMemAddressReserve(length, 0, base, 0), f"cuMemAddressReserve at {base:#x}"))
            if got == base:
                break
            check(cu.cuMemAddressFree(got, length), "cuMemAddressFree")
            offered.append(f"{base:#x}+{length:#x} -> {got:#x}")
        else:
            raise MnemeError(
                f"could not reserve device virtual addresses {addr:#x}-{addr + size:#x} ({size} bytes) at that "
                f"address: the driver offered other addresses ({'; '.join(offered)}); held by: "
                f"{holder_of(addr, size)}. Replay the recording in a fresh process, and reserve every recorded "
                "range before allocating anything else"
            )
        self.addr, self.size = base, length
        # Sorted, disjoint mapped chunks: start -> (size, handle).
        self._starts: list[int] = []
        self._chunks: dict[int, tuple[int, object]] = {}
        self._closed = False

    @property
    def end(self) -> int:
        return self.addr + self.size

    def covers(self, addr: int, size: int) -> bool:
        return self.addr <= addr and addr + size <= self.end

    def mapped_bytes(self) -> int:
        return sum(size for size, _ in self._chunks.values())

    def mapped_chunks(self) -> list[tuple[int, int]]:
        """(start, size) of each mapped chunk, in address order."""
        return [(start, self._chunks[start][0]) for start in self._starts]

    def _gaps(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """Unmapped sub-ranges of [start, end)."""
        cursor = start
        i = bisect.bisect_right(self._starts, start) - 1
        i = max(i, 0)
        while i < len(self._starts) and cursor < end:
            chunk_start = self._starts[i]
            chunk_end = chunk_start + self._chunks[chunk_start][0]
            if chunk_end <= cursor:
                i += 1
                continue
            if chunk_start >= end:
                break
            if chunk_start > cursor:
                yield cursor, chunk_start
            cursor = max(cursor, chunk_end)
            i += 1
        if cursor < end:
            yield cursor, end

    def map(self, addr: int, size: int) -> None:
        """Back [addr, addr + size) with device memory, mapping only what is not mapped yet."""
        if self._closed:
            raise MnemeError(f"reservation at {self.addr:#x} was released")
        cu = driver()
        start = align_down(addr, self.granularity)
        end = align_up(addr + size, self.granularity)
        for gap_start, gap_end in list(self._gaps(start, end)):
            length = gap_end - gap_start
            prop = _allocation_prop(self.device_ordinal)
            handle = check(cu.cuMemCreate(length, prop, 0), f"cuMemCreate of {length} bytes for {gap_start:#x}")
            try:
                check(cu.cuMemMap(gap_start, length, 0, handle, 0), f"cuMemMap at {gap_start:#x}")
            except MnemeError:
                cu.cuMemRelease(handle)
                raise
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = self.device_ordinal
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            try:
                check(cu.cuMemSetAccess(gap_start, length, [access], 1), f"cuMemSetAccess at {gap_start:#x}")
            except MnemeError:
                cu.cuMemUnmap(gap_start, length)
                cu.cuMemRelease(handle)
                raise
            bisect.insort(self._starts, gap_start)
            self._chunks[gap_start] = (length, handle)
            log.debug("mapped %#x-%#x", gap_start, gap_end)

    def release(self) -> None:
        """Unmap and free everything; errors are logged (the context may already be broken)."""
        if self._closed:
            return
        self._closed = True
        cu = driver()
        for start in self._starts:
            length, handle = self._chunks[start]
            for result, what in (
                (cu.cuMemUnmap(start, length), "cuMemUnmap"),
                (cu.cuMemRelease(handle), "cuMemRelease"),
            ):
                if result[0] != cu.CUresult.CUDA_SUCCESS:
                    log.warning("%s at %#x failed: %s", what, start, result[0])
        self._starts.clear()
        self._chunks.clear()
        result = cu.cuMemAddressFree(self.addr, self.size)
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            log.warning("cuMemAddressFree at %#x failed: %s", self.addr, result[0])


GiB = 1 << 30


def reservation_attempts(addr: int, size: int, granularity: int) -> list[tuple[int, int]]:
    """(base, length) spans to try, each covering [addr, addr + size), smallest first.

    The driver honors the address hint of a large reservation but places small ones in its
    own pools (measured on the H200, driver 580, at 0x153940000000, 0x200000000000,
    0x300000000000 and 0x600000000000: 2 MiB moved, 64 MiB to 1 TiB held), so a small range is
    reserved inside a generous 1 GiB-aligned span; address space costs no memory.
    """
    exact = (align_down(addr, granularity), align_up(addr + size, granularity) - align_down(addr, granularity))
    attempts = [exact]
    base = align_down(addr, GiB)
    for minimum in (4 * GiB, 64 * GiB):
        length = max(align_up(addr + size, GiB) - base, minimum)
        if (base, length) not in attempts:
            attempts.append((base, length))
    return attempts


def _allocation_prop(device_ordinal: int):
    cu = driver()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device_ordinal
    return prop


GRANULARITY_ENV = "MNEME_CUDA_MAP_GRANULARITY"
GRANULARITIES = ("minimum", "recommended")


def mapping_granularity() -> str:
    """The granularity the replay maps recorded ranges at ($MNEME_CUDA_MAP_GRANULARITY): "minimum", as the
    CUDA recorder maps the application's allocations (the default), or the driver's "recommended" one."""
    value = (envvars.get(GRANULARITY_ENV) or "minimum").strip().lower()
    if value not in GRANULARITIES:
        raise UsageError(
            f"{GRANULARITY_ENV}={value!r} is not one of {', '.join(GRANULARITIES)}: unset it (minimum, as the "
            "recorder maps the application's allocations) or set it to recommended"
        )
    return value


def allocation_granularity(device_ordinal: int, which: str = "minimum") -> int:
    """The driver's allocation granularity of device memory: its "minimum" or its "recommended" one."""
    cu = driver()
    flags = cu.CUmemAllocationGranularity_flags
    option = (
        flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED if which == "recommended" else flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    )
    return int(
        check(
            cu.cuMemGetAllocationGranularity(_allocation_prop(device_ordinal), option), "cuMemGetAllocationGranularity"
        )
    )


def host_address(data) -> tuple[int, np.ndarray]:
    """Address of a bytes-like object's first byte, and a uint8 array viewing it (keeps it alive)."""
    array = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return int(array.ctypes.data), array


def restore_plan(
    size: int, chunk_size: int, stage_bytes: int, min_piece: int = 1 << 20
) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """How to stream a snapshot region of `size` bytes through staging buffers of `stage_bytes`.

    Returns one (offset, length, pieces) per staging buffer fill, in order; `pieces` are
    (offset in the fill, length) spans that decode independently (on several threads): whole
    stored chunks of `chunk_size`, grouped to at least `min_piece` bytes. A fill holds whole
    pieces, so no chunk is decoded twice, unless a chunk is larger than a staging buffer.
    """
    if size <= 0:
        return []
    if 0 < chunk_size <= stage_bytes:
        piece = min(chunk_size * max(1, -(-min_piece // chunk_size)), stage_bytes // chunk_size * chunk_size)
    else:  # chunks larger than a staging buffer (or unknown): decoded in stage-sized parts
        piece = stage_bytes
    span = stage_bytes // piece * piece
    plan = []
    for start in range(0, size, span):
        length = min(span, size - start)
        plan.append((start, length, [(o, min(piece, length - o)) for o in range(0, length, piece)]))
    return plan


def decode_pieces(
    snapshot: Any, addr: int, offset: int, out: np.ndarray, pieces: list[tuple[int, int]], pool: Executor | None = None
) -> None:
    """Decode `pieces` (see `restore_plan`) of the region at `addr`, from `offset` in it, into `out`.

    With a `pool`, pieces decode on its threads at once (preadv, zstd and numpy drop the GIL).
    Returns only when no thread writes into `out` any more, also on error.
    """
    if pool is None or len(pieces) == 1:
        for start, length in pieces:
            snapshot.read_range_into(addr, offset + start, out[start : start + length])
        return
    futures = [
        pool.submit(snapshot.read_range_into, addr, offset + start, out[start : start + length])
        for start, length in pieces
    ]
    try:
        for future in futures:
            future.result()
    finally:  # never leave a thread writing into a staging buffer that is reused next
        for future in futures:
            future.cancel()
        wait(futures)
