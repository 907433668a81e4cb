"""CUDA device memory at fixed addresses and the restore of snapshot regions into it.

Copies go through two pinned staging buffers on the device's stream; LZ4 regions decode on the
host (the native reader, several threads) or, large enough, on the device (`DeviceDecode`)."""

from __future__ import annotations

import ctypes
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from mneme.core.errors import MnemeError, UsageError
from mneme.core.snapshot import Snapshot
from mneme_cuda import devdecode
from mneme_cuda import compare as cmp
from mneme_cuda.driver import CudaError, check, driver, fault
from mneme_cuda.memory import (
    DeviceBuffer,
    PinnedBuffer,
    Reservation,
    align_up,
    host_address,
    decode_pieces,
    restore_plan,
)
from mneme_cuda.kernel import launch
from mneme_cuda.snapio import ENTRY_DTYPE, STORED, NativeDecoder, native_decoder

if TYPE_CHECKING:
    from mneme_cuda.device import CudaDevice

log = logging.getLogger(__name__)

STAGE_BYTES = 128 << 20  # each of the two pinned staging buffers (large fills keep 16 decoders busy)
RESTORE_FILL = STAGE_BYTES // 2  # native restore: half staging buffers, three decoding while one copies
DECODE_SCRATCH = 128 << 20  # device decode: byte planes of one fill, per device slot
DECODE_SLOTS = 4  # device decode: fills decoding at once (a warp per chunk: more fills, more of the device busy)
PARALLEL_COPY_BYTES = 8 << 20  # host copies into staging above this size use several threads
HOST_THREADS = min(16, os.cpu_count() or 1)  # staging copies and snapshot decoding


class DeviceMemory:
    """`CudaDevice`'s memory: reservations, mappings, copies, and restoring snapshot regions (a mixin)."""

    def reserve(self, va_addr: int, va_size: int) -> None:
        self._enter()
        if va_size <= 0:
            raise MnemeError(f"cannot reserve {va_size} bytes at {va_addr:#x}: the size must be positive")
        for existing in self._reservations:
            if existing.addr < va_addr + va_size and va_addr < existing.end:
                if existing.covers(va_addr, va_size):
                    return
                raise MnemeError(
                    f"the range {va_addr:#x}+{va_size:#x} overlaps the reservation {existing.addr:#x}-{existing.end:#x} "
                    "without fitting in it; reserve the recorded ranges as recorded"
                )
        self._reservations.append(Reservation(self.ordinal, va_addr, va_size, self.granularity))
        log.debug("reserved %#x+%#x on device %d", va_addr, va_size, self.ordinal)

    def map(self, addr: int, size: int) -> None:
        self._enter()
        for reservation in self._reservations:
            if reservation.covers(addr, size):
                reservation.map(addr, size)
                return
        # Outside every reservation: place exactly this range (rounded to the granularity).
        self.reserve(addr, size)
        self._reservations[-1].map(addr, size)

    def mapped(self, addr: int, size: int) -> bool:
        return any(r.covers(addr, size) and not list(r._gaps(addr, addr + size)) for r in self._reservations)

    def alloc(self, size: int) -> DeviceBuffer:
        """An ordinary device allocation owned by this device (expected bytes, pristine copies)."""
        self._enter()
        buffer = DeviceBuffer(size)
        self._buffers.add(buffer)
        return buffer

    def free(self, buffer: DeviceBuffer) -> None:
        self._enter()
        self._free_quietly(buffer)

    def upload(self, data: bytes | bytearray | memoryview | np.ndarray) -> DeviceBuffer:
        """A new device allocation holding `data` (e.g. an epilogue region to compare against)."""
        size = memoryview(data).nbytes
        buffer = self.alloc(size)
        self.write(buffer.addr, data)
        return buffer

    def pinned(self, size: int) -> PinnedBuffer:
        """Page-locked host memory owned by this device; `write` from it copies with no staging."""
        self._enter()
        buffer = PinnedBuffer(size)
        self._pinned.append(buffer)
        return buffer

    def _staging(self) -> tuple[list[PinnedBuffer], list[Any]]:
        if not self._stages:
            cu = driver()
            self._stages = [PinnedBuffer(STAGE_BYTES), PinnedBuffer(STAGE_BYTES)]
            flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            self._stage_events = [check(cu.cuEventCreate(flags), "cuEventCreate") for _ in self._stages]
            for event in self._stage_events:
                check(cu.cuEventRecord(event, self.stream), "cuEventRecord")
        return self._stages, self._stage_events

    def _host_copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy into a staging buffer, with several threads for large copies (numpy drops the GIL)."""
        n = src.nbytes
        dst = dst[:n]
        if n < PARALLEL_COPY_BYTES:
            np.copyto(dst, src)
            return
        pool = self._threads()
        parts = HOST_THREADS
        step = align_up(-(-n // parts), 4096)
        futures = [pool.submit(np.copyto, dst[o : o + step], src[o : o + step]) for o in range(0, n, step)]
        for future in futures:
            future.result()

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Copy host bytes to `addr`: straight from pinned memory, else through two pinned staging buffers."""
        self.write_stream(addr, (data,))

    def write_stream(self, addr: int, chunks: Iterable[bytes | bytearray | memoryview | np.ndarray]) -> int:
        """Copy consecutive chunks (e.g. `Snapshot.iter_region`) to `addr` onwards; returns the bytes written.

        Host copies into one staging buffer overlap the transfer from the other.
        """
        cu = self._enter()
        offset = 0
        turn = 0
        for chunk in chunks:
            ptr, array = host_address(chunk)
            size = array.nbytes
            if size == 0:
                continue
            if any(p.contains(ptr, size) for p in self._pinned):
                check(cu.cuMemcpyHtoDAsync(addr + offset, ptr, size, self.stream), f"copy to {addr + offset:#x}")
                offset += size
                continue
            stages, events = self._staging()
            for start in range(0, size, STAGE_BYTES):
                piece = array[start : start + STAGE_BYTES]
                stage, event = stages[turn], events[turn]
                check(cu.cuEventSynchronize(event), "waiting for a staging buffer")
                self._host_copy(stage.array, piece)
                dst = addr + offset + start
                check(cu.cuMemcpyHtoDAsync(dst, stage.ptr, piece.nbytes, self.stream), f"copy to {dst:#x}")
                check(cu.cuEventRecord(event, self.stream), "cuEventRecord")
                turn ^= 1
            offset += size
        self._sync(f"host-to-device copy to {addr:#x}")
        return offset

    def write_snapshot_region(self, snapshot: Any, addr: int, dst: int | None = None) -> int:
        """Restore one region of a snapshot (`Snapshot`) to `dst` (default: its recorded address); returns its size.

        See `write_snapshot_regions`, which restores several regions in one pass.
        """
        return self.write_snapshot_regions(snapshot, [(addr, addr if dst is None else dst)])

    def write_snapshot_regions(self, snapshot: Any, targets: Iterable[tuple[int, int]] | None = None) -> int:
        """Restore regions of a snapshot: `targets` are (region address, destination) pairs, by default every
        region at its recorded address. Returns the bytes restored.

        The snapshot decodes straight into pinned staging while earlier fills' transfers run on
        the stream: no host copy in between, and decoding overlaps the copy. LZ4 regions decode
        on the device instead (`devdecode`, unless `restore_decode` or $MNEME_CUDA_RESTORE_DECODE
        says "host"): the host reads and checks the stored bytes, which cross at their stored size.
        With the native reader (`mneme_cuda.snapio`: C threads read and hash each piece while it is in cache,
        zstd into place, GIL released) the staging buffers' halves take turns, three decoding
        (the C threads move on to the next fill without waiting for the slowest chunk) while
        one copies, and the fills of every region decoded on the host form one pipeline, so small
        regions overlap each other; without it, the snapshot's own `read_range_into` on the host
        threads fills the two buffers in turn, region by region.
        """
        self._enter()
        if self._flush is None:  # the recorded regions are mapped by now: it cannot take their addresses
            self._allocate_flush_buffer()
        if targets is None:
            targets = [(region.addr, region.addr) for region in snapshot.regions]
        targets = list(targets)
        decoder = self._native() if isinstance(snapshot, Snapshot) else None
        if decoder is None:
            self.last_restore = "python"
            return sum(self._restore_python(snapshot, addr, dst) for addr, dst in targets)
        paths, items, total = [], [], 0
        for addr, dst in targets:
            planned = self._device_plan(snapshot, addr)
            if planned is not None:
                paths.append(self._restore_on_device(decoder, snapshot, addr, dst, *planned))
                total += planned[0].info.size
                continue
            items += self._native_fills(snapshot.region(addr), addr, dst)
            paths.append("native")
        total += self._restore_native(decoder, snapshot, items)
        self.last_restore = "+".join(sorted(set(paths)))  # "device-decode", "native", or both
        return total

    def _restore_python(self, snapshot: Any, addr: int, dst: int) -> int:
        cu = driver()
        info = snapshot.region(addr)
        plan = restore_plan(info.size, int(getattr(info, "chunk_size", 0) or 0), STAGE_BYTES)
        if not plan:
            return 0
        stages, events = self._staging()
        turn = 0
        for offset, length, pieces in plan:
            check(cu.cuEventSynchronize(events[turn]), "waiting for a staging buffer")
            self._decode_into(snapshot, addr, offset, stages[turn].array, pieces)
            check(
                cu.cuMemcpyHtoDAsync(dst + offset, stages[turn].ptr, length, self.stream), f"copy to {dst + offset:#x}"
            )
            check(cu.cuEventRecord(events[turn], self.stream), "cuEventRecord")
            turn ^= 1
        self._sync(f"restoring region {addr:#x} of {getattr(snapshot, 'path', 'a snapshot')}")
        return info.size

    @staticmethod
    def _native_fills(info, addr: int, dst: int) -> list[tuple[int, int, int, int]]:
        """The native restore's fills (region address, destination, offset, length) of one region."""
        return [
            (addr, dst, offset, length) for offset, length, _ in restore_plan(info.size, info.chunk_size, RESTORE_FILL)
        ]

    def _restore_native(
        self, decoder: NativeDecoder, snapshot: Snapshot, items: list[tuple[int, int, int, int]]
    ) -> int:
        """Restore fills (region address, destination, offset, length) through the native reader, in one pipeline."""
        if not items:
            return 0
        cu = driver()
        slots = self._restore_slots()
        if not self._restore_events:
            flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            self._restore_events = [check(cu.cuEventCreate(flags), "cuEventCreate") for _ in slots]
            for event in self._restore_events:
                check(cu.cuEventRecord(event, self.stream), "cuEventRecord")
        events = self._restore_events

        def start(k: int, item) -> tuple:
            addr, dst, offset, length = item
            slot = k % len(slots)
            check(cu.cuEventSynchronize(events[slot]), "waiting for a staging buffer")  # its copy of fill k - 4
            return decoder.submit(snapshot, addr, offset, slots[slot], length), slot, dst + offset, length

        def copy(started: tuple) -> None:
            decode, slot, to, length = started
            decode.wait()
            check(cu.cuMemcpyHtoDAsync(to, slots[slot], length, self.stream), f"copy to {to:#x}")
            check(cu.cuEventRecord(events[slot], self.stream), "cuEventRecord")

        overlapped(items, len(slots) - 1, start, copy)
        regions = {addr for addr, *_ in items}
        where = f"region {items[0][0]:#x}" if len(regions) == 1 else f"{len(regions)} regions"
        self._sync(f"restoring {where} of {snapshot.path}")
        return sum(length for *_, length in items)

    def _device_plan(self, snapshot: Snapshot, addr: int) -> tuple[Any, devdecode.RegionPlan] | None:
        """(region, its plan) when region `addr` restores through the device decoder, else None."""
        chosen = devdecode.mode(self.restore_decode)
        if chosen == "host":
            return None
        region = snapshot.chunk_index(addr)
        if chosen == "auto" and (
            region.info.chunk_size > devdecode.AUTO_MAX_CHUNK or region.info.size < devdecode.AUTO_MIN_REGION
        ):
            return None
        cached = self._region_plans.get(id(region))
        if cached is None or cached[0] is not region:
            plan = devdecode.RegionPlan.of(region.chunks)
            plan = devdecode.plan(plan, RESTORE_FILL, DECODE_SCRATCH) if plan.eligible() else None
            self._region_plans = {id(region): (region, plan)}  # the last region's: one restore after another
        else:
            plan = cached[1]
        if plan is None:
            return None
        if self._device_decode is None:
            try:
                self._device_decode = DeviceDecode(self)
            except MnemeError as exc:
                log.warning("%s; LZ4 snapshots restore through the host reader", exc)  # e.g. no device memory left
                self.restore_decode = "host"
                return None
        return region, plan

    def _restore_on_device(
        self, decoder: NativeDecoder, snapshot: Snapshot, addr: int, dst: int, region, plan: devdecode.RegionPlan
    ) -> str:
        """Restore an LZ4 region by decoding on the device: C threads read and check the stored payloads into
        the four staging slots, a copy stream moves each fill to one of two device slots (and raw chunks to their
        place), and a kernel stream per device slot decodes it, so reading, copying and decoding overlap, and
        several fills decode at once. Returns how it was restored: "device-decode", or "native" where a chunk
        failed on the device and the host reader restored the region."""
        cu = driver()
        dd = self._device_decode
        slots = self._restore_slots()
        dd.reset_status()
        keep: list = []

        def start(k: int, fill: devdecode.Fill) -> tuple:
            slot = k % len(slots)
            check(cu.cuEventSynchronize(dd.copied[slot]), "waiting for a staging buffer")
            rows = devdecode.reader_table(plan, fill, slots[slot], ENTRY_DTYPE, STORED)
            return decoder.submit_stored(snapshot, region, region.chunks[fill.start : fill.stop], rows), slot, k, fill

        def send(started: tuple) -> None:
            read, slot, k, fill = started
            read.wait()
            d = k % len(dd.slots)
            device_slot = dd.slots[d].addr
            rows = devdecode.table(plan, fill, device_slot, device_slot + RESTORE_FILL, dst)
            ctypes.memmove(slots[slot] + fill.table_at, rows.ctypes.data, rows.nbytes)
            check(cu.cuStreamWaitEvent(dd.copy, dd.decoded[d], 0), "cuStreamWaitEvent")
            check(cu.cuMemcpyHtoDAsync(device_slot, slots[slot], fill.size, dd.copy), f"copy to {device_slot:#x}")
            for to, source, length in devdecode.raw_copies(plan, fill, slots[slot], dst):
                check(cu.cuMemcpyHtoDAsync(to, source, length, dd.copy), f"copy to {to:#x}")
            check(cu.cuEventRecord(dd.copied[slot], dd.copy), "cuEventRecord")
            if len(fill.lz4):
                stream = dd.streams[d]
                check(cu.cuStreamWaitEvent(stream, dd.copied[slot], 0), "cuStreamWaitEvent")
                dd.decode(stream, device_slot + fill.table_at, plan, fill, keep)
                check(cu.cuEventRecord(dd.decoded[d], stream), "cuEventRecord")

        try:
            overlapped(plan.fills, len(slots) - 1, start, send)
        finally:
            dd.synchronize(f"restoring region {addr:#x} of {snapshot.path}")
        failed, first = dd.status()
        if failed:
            self._device_decode_failed(snapshot, region, addr, dst, failed, first)
            return "native"
        return "device-decode"

    def _device_decode_failed(self, snapshot: Snapshot, region, addr: int, dst: int, failed: int, first: int) -> None:
        """A chunk did not decode on the device: the host reader decodes it to say why (a corrupt chunk raises
        its error); if it decodes there, the device decoder is wrong, and the region restores on the host."""
        chunk = region.chunks[first]
        snapshot.decode_chunk(region, chunk, memoryview(bytearray(chunk.length)))
        log.error(
            "the device LZ4 decoder failed on %d chunk(s) of region %#x of %s (first: %s), which the host "
            "reader decodes; restoring the region on the host. Please report this with the snapshot",
            failed,
            addr,
            snapshot.path,
            chunk.block,
        )
        self._restore_native(self._native(), snapshot, self._native_fills(region.info, addr, dst))

    def _restore_slots(self) -> list[int]:
        """The four restore slots: the halves of the two pinned staging buffers."""
        stages, _ = self._staging()
        return [stage.ptr + half for stage in stages for half in range(0, STAGE_BYTES - RESTORE_FILL + 1, RESTORE_FILL)]

    def _decode_into(
        self, snapshot: Any, addr: int, offset: int, stage: np.ndarray, pieces: list[tuple[int, int]]
    ) -> None:
        decoder = self._native() if isinstance(snapshot, Snapshot) else None  # the native reader needs its chunk index
        if decoder is not None:
            decoder.decode_to(snapshot, addr, offset, int(stage.ctypes.data), sum(n for _, n in pieces))
            return
        decode_pieces(snapshot, addr, offset, stage, pieces, self._threads() if len(pieces) > 1 else None)

    def _native(self) -> NativeDecoder | None:
        if self._decoder is False:
            self._decoder = native_decoder(HOST_THREADS)
            log.debug("snapshot restore decodes with %s", "the native reader" if self._decoder else "the Python reader")
        return self._decoder

    def _threads(self) -> ThreadPoolExecutor:
        """Host threads for staging copies and snapshot decoding (numpy, preadv and zstd drop the GIL)."""
        if self._copier is None:
            self._copier = ThreadPoolExecutor(max_workers=HOST_THREADS, thread_name_prefix="mneme-stage")
        return self._copier

    def read_into(self, addr: int, out: bytearray | memoryview | np.ndarray) -> None:
        """Copy device bytes at `addr` into a writable host buffer of the size to read."""
        cu = self._enter()
        target = (
            np.frombuffer(out, dtype=np.uint8) if not isinstance(out, np.ndarray) else out.reshape(-1).view(np.uint8)
        )
        size = target.nbytes
        ptr = int(target.ctypes.data)
        if any(p.contains(ptr, size) for p in self._pinned):
            check(cu.cuMemcpyDtoHAsync(ptr, addr, size, self.stream), f"copy from {addr:#x}")
            self._sync(f"device-to-host copy from {addr:#x}")
            return
        stages, events = self._staging()
        pending: list[tuple[int, int, int]] = []  # (turn, offset, length) issued but not copied out

        def drain(entry: tuple[int, int, int]) -> None:
            turn_, off, length = entry
            check(cu.cuEventSynchronize(events[turn_]), f"device-to-host copy from {addr + off:#x}")
            self._host_copy(target[off : off + length], stages[turn_].array[:length])

        turn = 0
        for off in range(0, size, STAGE_BYTES):
            length = min(STAGE_BYTES, size - off)
            if len(pending) == 2:
                drain(pending.pop(0))
            check(cu.cuMemcpyDtoHAsync(stages[turn].ptr, addr + off, length, self.stream), f"copy from {addr + off:#x}")
            check(cu.cuEventRecord(events[turn], self.stream), "cuEventRecord")
            pending.append((turn, off, length))
            turn ^= 1
        try:
            for entry in pending:
                drain(entry)
        except CudaError as exc:
            if exc.sticky:
                self.broken = exc.name
                raise fault(exc, "(an earlier asynchronous operation)") from exc
            raise

    def read(self, addr: int, size: int) -> bytes:
        out = bytearray(size)
        self.read_into(addr, out)
        return bytes(out)

    def copy(self, dst: int, src: int, size: int) -> None:
        """Device-to-device copy, ordered on the device's stream (not waited for: launches and reads follow it).

        `copy_through`: "engine" (the default) copies with the copy engine (cuMemcpyDtoDAsync); "sm" with a copy
        kernel. A kernel runs as slowly after a reset by either as after the other (H200, 2026-12-03:
        benchmarks/gpu/probes/fidelity_probe.py); `time(cache="primed")` is what gives back the application's state.
        """
        cu = self._enter()
        if size <= 0:
            return
        if self.copy_through not in ("engine", "sm"):
            raise UsageError(f"copy_through must be 'engine' or 'sm', not {self.copy_through!r}")
        if self.copy_through == "sm":
            grid = cmp.grid_for(-(-size // 16), self.sm_count)
            self._launch_raw(self._compare_kernels()["copy"], grid, cmp.pack_copy_args(dst, src, size), [])
            return
        check(cu.cuMemcpyDtoDAsync(dst, src, size, self.stream), f"device copy {src:#x} -> {dst:#x} ({size} bytes)")

    def fill(self, addr: int, size: int, value: int = 0) -> None:
        """Set `size` bytes at `addr` to `value`, ordered on the device's stream."""
        cu = self._enter()
        check(cu.cuMemsetD8Async(addr, value, size, self.stream), f"memset of {size} bytes at {addr:#x}")


def overlapped(items, ahead: int, start: Callable, finish: Callable) -> None:
    """start(k, item) each item in order, finish(what start returned) for the oldest whenever `ahead` are started and
    unfinished, then for the rest. The first element of what start returns is a native read (`Decode`): on error,
    each unfinished one is waited for unchecked, so no C thread still writes into staging when this returns."""
    pending: deque = deque()
    try:
        for k, item in enumerate(items):
            pending.append(start(k, item))
            if len(pending) == ahead:
                finish(pending.popleft())
        while pending:
            finish(pending.popleft())
    finally:
        for started in pending:
            started[0].wait(check=False)


class DeviceDecode:
    """What decoding LZ4 snapshots on the device needs, made on first use and kept: the kernels of
    `kernels/lz4.ptx`, a copy stream and a kernel stream per device slot, DECODE_SLOTS device slots (a
    fill's payloads and table, then scratch for byte planes: 768 MiB in all), events, and the failure
    counters. Where that memory cannot be had, LZ4 regions restore through the host reader."""

    def __init__(self, device: CudaDevice):
        cu = driver()
        self.device = device
        self.module = None
        self.streams: list[Any] = []
        self.events: list[Any] = []
        self.slots: list[DeviceBuffer] = []
        try:
            try:
                self.module = check(cu.cuModuleLoadData(devdecode.ptx() + b"\0"), "loading kernels/lz4.ptx")
            except CudaError as exc:
                raise MnemeError(f"{exc}; the driver could not JIT mneme_cuda/kernels/lz4.ptx") from exc
            self.decode_fn = check(
                cu.cuModuleGetFunction(self.module, devdecode.DECODE_KERNEL.encode()), "cuModuleGetFunction"
            )
            self.unshuffle_fn = check(
                cu.cuModuleGetFunction(self.module, devdecode.UNSHUFFLE_KERNEL.encode()), "cuModuleGetFunction"
            )
            flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
            self.streams = [check(cu.cuStreamCreate(flags), "cuStreamCreate") for _ in range(DECODE_SLOTS + 1)]
            self.copy = self.streams.pop()
            timing = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
            self.copied = [check(cu.cuEventCreate(timing), "cuEventCreate") for _ in range(4)]  # per host slot
            self.decoded = [check(cu.cuEventCreate(timing), "cuEventCreate") for _ in range(DECODE_SLOTS)]
            self.events = self.copied + self.decoded
            self.slots = [device.alloc(RESTORE_FILL + DECODE_SCRATCH) for _ in range(DECODE_SLOTS)]
            self.counters = device.alloc(8)
            self.host_counters = np.zeros(2, np.uint32)
        except BaseException:
            self.release(unload=True)
            raise

    def reset_status(self) -> None:
        cu = driver()
        check(cu.cuMemsetD32Async(self.counters.addr, 0, 1, self.copy), "clearing the decode counters")
        check(cu.cuMemsetD32Async(self.counters.addr + 4, 0xFFFFFFFF, 1, self.copy), "clearing the decode counters")

    def decode(self, stream, table: int, plan: devdecode.RegionPlan, fill: devdecode.Fill, keep: list) -> None:
        """Decode the fill's LZ4 chunks (table at device address `table`), then unshuffle its byte planes."""
        count = len(fill.lz4)
        blocks = -(-count // devdecode.WARPS_PER_BLOCK)
        launch(
            self.decode_fn,
            (blocks, 1, 1),
            (32 * devdecode.WARPS_PER_BLOCK, 1, 1),
            devdecode.pack_decode_args(table, count, self.counters.addr),
            stream,
            keep,
        )
        per_row, rows = devdecode.unshuffle_grid(plan, fill)
        if rows:
            launch(
                self.unshuffle_fn,
                (per_row, rows, 1),
                (devdecode.UNSHUFFLE_BLOCK, 1, 1),
                devdecode.pack_unshuffle_args(table),
                stream,
                keep,
            )

    def synchronize(self, what: str) -> None:
        device = self.device
        for stream in (self.copy, *self.streams):
            try:
                check(driver().cuStreamSynchronize(stream), what)
            except CudaError as exc:
                if exc.sticky:
                    device.broken = exc.name
                    raise fault(exc, devdecode.DECODE_KERNEL) from exc
                raise

    def status(self) -> tuple[int, int]:
        """(chunks that failed to decode, the lowest failing chunk index) since `reset_status`."""
        cu = driver()
        check(cu.cuMemcpyDtoH(self.host_counters.ctypes.data, self.counters.addr, 8), "reading the decode counters")
        return int(self.host_counters[0]), int(self.host_counters[1])

    def release(self, unload: bool) -> None:
        cu = driver()
        for buffer in [*self.slots, getattr(self, "counters", None)]:
            if buffer is not None:
                self.device._free_quietly(buffer)
        self.slots = []
        for event in self.events:
            cu.cuEventDestroy(event)
        self.events = []
        for stream in [*self.streams, getattr(self, "copy", None)]:
            if stream is not None:
                cu.cuStreamDestroy(stream)
        self.streams, self.copy = [], None
        if self.module is not None and unload:
            cu.cuModuleUnload(self.module)
        self.module = None
