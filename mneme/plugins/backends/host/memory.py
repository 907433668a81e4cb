"""Device memory of the host backend: shared anonymous mappings at exactly the recorded virtual addresses.

A reservation is mapped with no access (``PROT_NONE``); `map` makes pages of it readable and
writable. Whatever a kernel touches outside its mapped pages faults, and the runtime reports
the fault as a failed launch: unmapped pages of a reservation are the guard pages.
The mappings are shared (``MAP_SHARED``), so a sandbox process forked from this one (`sandbox`)
sees the same memory at the same addresses. `generation` counts new reservations (a sandbox
started before one must start again) and `mapped_generation` changes of what is mapped (a
sandbox started before one mirrors it with `mprotect`).
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os

from mneme.core.errors import ExperimentError

PAGE = mmap.PAGESIZE
MAP_FIXED_NOREPLACE = 0x100000
MAP_NORESERVE = 0x4000
PROT_NONE, PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MAP_FAILED = ctypes.c_void_p(-1).value


def _page_range(addr: int, size: int) -> tuple[int, int]:
    start = addr // PAGE * PAGE
    end = (addr + size + PAGE - 1) // PAGE * PAGE
    return start, end


def holders(start: int, end: int) -> list[str]:
    """Lines of /proc/self/maps overlapping [start, end): what already holds those addresses."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo < end and hi > start:
                    found.append(line.strip())
    except OSError:
        pass
    return found


class _Intervals:
    """Disjoint, sorted [start, end) intervals."""

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.ends, start)
        j = bisect.bisect_right(self.starts, end)
        if i < j:
            start = min(start, self.starts[i])
            end = max(end, self.ends[j - 1])
        self.starts[i:j] = [start]
        self.ends[i:j] = [end]

    def covers(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self.starts, start) - 1
        return i >= 0 and self.ends[i] >= end

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.ends, start + 1)
        return i < len(self.starts) and self.starts[i] < end

    def __iter__(self):
        return iter(zip(self.starts, self.ends))


class AddressSpace:
    """The reservations and mappings of one host device. Closing unmaps everything."""

    def __init__(self):
        self._reserved = _Intervals()
        self._mapped = _Intervals()
        self._regions: list[tuple[int, int]] = []  # what to munmap on close
        self._closed = False
        #: new reservations so far (a sandbox process forked before one lacks it)
        self.generation = 0
        #: changes of the mapped pages so far
        self.mapped_generation = 0

    def _mmap_fixed(self, start: int, end: int, prot: int) -> None:
        flags = mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE
        got = _libc.mmap(start, end - start, prot, flags, -1, 0)
        if got in (None, MAP_FAILED) or got != start:
            err = ctypes.get_errno()
            if got not in (None, MAP_FAILED):
                _libc.munmap(got, end - start)  # an old kernel took the address as a hint only
            held = holders(start, end)
            what = ("; already held by: " + " | ".join(held[:4])) if held else ""
            raise ExperimentError(
                f"cannot place device memory at [{start:#x}, {end:#x}) in this process: "
                f"{os.strerror(err) if err else 'address taken'}{what}; replay in a fresh worker process, "
                "or record with a different address range",
                kind="load",
            )
        self._regions.append((start, end))
        self.generation += 1

    def reserve(self, va_addr: int, va_size: int) -> None:
        if va_size <= 0:
            return
        start, end = _page_range(va_addr, va_size)
        if self._reserved.covers(start, end):
            return
        self._mmap_fixed(start, end, PROT_NONE)
        self._reserved.add(start, end)

    def map(self, addr: int, size: int) -> None:
        if size <= 0:
            return
        start, end = _page_range(addr, size)
        if self._reserved.covers(start, end):
            if _libc.mprotect(start, end - start, PROT_RW) != 0:
                err = ctypes.get_errno()
                raise ExperimentError(
                    f"cannot map device memory at {addr:#x} (+{size}): {os.strerror(err)}", kind="load"
                )
        elif self._reserved.overlaps(start, end) or self._mapped.overlaps(start, end):
            # Partly inside: reserve the pages outside, then map the whole range.
            for lo, hi in self._gaps(start, end):
                self._mmap_fixed(lo, hi, PROT_NONE)
                self._reserved.add(lo, hi)
            _libc.mprotect(start, end - start, PROT_RW)
        else:
            self._mmap_fixed(start, end, PROT_RW)
            self._reserved.add(start, end)
        if not self._mapped.covers(start, end):
            self._mapped.add(start, end)
            self.mapped_generation += 1

    def _gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        gaps, cursor = [], start
        for lo, hi in self._reserved:
            if hi <= cursor or lo >= end:
                continue
            if lo > cursor:
                gaps.append((cursor, lo))
            cursor = max(cursor, hi)
        if cursor < end:
            gaps.append((cursor, end))
        return gaps

    def _check(self, addr: int, size: int, what: str) -> None:
        if self._closed:
            raise ExperimentError("the host device's memory was released", kind="load")
        if size and not self._mapped.covers(addr, addr + size):
            raise ExperimentError(
                f"cannot {what} {size} bytes at device address {addr:#x}: not mapped; call Device.map first",
                kind="load",
            )

    def write(self, addr: int, data) -> None:
        view = memoryview(data).cast("B")
        self._check(addr, len(view), "write")
        if len(view):
            ctypes.memmove(
                addr,
                (ctypes.c_char * len(view)).from_buffer_copy(view)
                if view.readonly
                else (ctypes.c_char * len(view)).from_buffer(view),
                len(view),
            )

    def read(self, addr: int, size: int) -> bytes:
        self._check(addr, size, "read")
        return read_bytes(addr, size)

    def copy(self, dst: int, src: int, size: int) -> None:
        self._check(src, size, "read")
        self._check(dst, size, "write")
        ctypes.memmove(dst, src, size)

    def mapped(self) -> list[tuple[int, int]]:
        return list(self._mapped)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for start, end in self._regions:
            _libc.munmap(start, end - start)
        self._regions.clear()


#: ctypes.string_at takes its size as a C int: it fails on 2 GiB and more ("Negative size").
_STRING_AT_MAX = (1 << 31) - 1


def read_bytes(addr: int, size: int) -> bytes | bytearray:
    """`size` bytes of this process's memory at `addr`, for any size (a bytearray from 2 GiB on)."""
    if size <= 0:
        return b""
    if size <= _STRING_AT_MAX:
        return ctypes.string_at(addr, size)
    out = bytearray(size)
    ctypes.memmove((ctypes.c_char * size).from_buffer(out), addr, size)  # memmove's size is a size_t
    return out
