"""The CUDA backend: NVIDIA GPUs through the driver API of `cuda-bindings`.

One primary context per device and process; device memory at the recorded virtual addresses
through virtual memory management; copies through pinned staging buffers on one stream;
kernels from cubin (`mneme_cuda.codegen`: NVPTX -> PTX -> nvJitLink or ptxas) or PTX (driver JIT); timing by the
kernel's own CUPTI timestamps (`mneme_cuda.cupti`) or CUDA events, with an L2 flush before each
timed run; verification by a compare kernel on the device.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np

from mneme.core.backend import (
    Availability,
    Backend,
    Device,
    DeviceBinary,
    DeviceInfo,
    LoadedKernel,
    Resources,
    check_cache_state,
)
from mneme.core.errors import (
    BackendUnavailable,
    ExperimentError,
    MnemeError,
    UnsupportedError,
    UsageError,
)
from mneme.core.snapshot import Snapshot
from mneme_cuda import codegen, cupti, devdecode
from mneme_cuda import target as nvptx
from mneme_cuda import compare as cmp
from mneme_cuda.driver import (
    CudaError,
    check,
    driver,
    fault,
    format_version,
    kernel_module_version,
    probe,
    require,
)
from mneme_cuda.gate import LaunchGate
from mneme_cuda.memory import (
    DeviceBuffer,
    PinnedBuffer,
    Reservation,
    align_up,
    allocation_granularity,
    host_address,
    decode_pieces,
    restore_plan,
)
from mneme_cuda.snapio import ENTRY_DTYPE, STORED, NativeDecoder, native_decoder

log = logging.getLogger(__name__)

STAGE_BYTES = 128 << 20  # each of the two pinned staging buffers (large fills keep 16 decoders busy)
RESTORE_FILL = STAGE_BYTES // 2  # native restore: half staging buffers, three decoding while one copies
DECODE_SCRATCH = 128 << 20  # device decode: byte planes of one fill, per device slot
DECODE_SLOTS = 4  # device decode: fills decoding at once (a warp per chunk: more fills, more of the device busy)
PARALLEL_COPY_BYTES = 8 << 20  # host copies into staging above this size use several threads
HOST_THREADS = min(16, os.cpu_count() or 1)  # staging copies and snapshot decoding
JIT_CACHE_MODES = {"": None, "ca": "CU_JIT_CACHE_OPTION_CA", "cg": "CU_JIT_CACHE_OPTION_CG",
                   "cs": "CU_JIT_CACHE_OPTION_NONE", "lu": "CU_JIT_CACHE_OPTION_NONE", "cv": "CU_JIT_CACHE_OPTION_NONE"}


class CudaBackend(Backend):
    """NVIDIA GPUs through the CUDA driver (`cuda-bindings`)."""

    name = "cuda"
    target = "nvptx"
    timers = cupti.TIMERS
    priority = 30
    emits = codegen.EMITS
    image_kinds = ("cubin", "fatbin", "elf", "ptx")

    def availability(self) -> Availability:
        found = probe()
        return Availability(found.usable, found.reason)

    def device_count(self) -> int:
        found = probe()
        return found.device_count if found.usable else 0

    def arch(self, index: int = 0) -> str:
        major, minor = _compute_capability(_device_handle(index))
        return f"sm_{major}{minor}"

    def claims(self, arch: str) -> bool:
        return nvptx.claims(arch)

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return nvptx.target_machine(arch, opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        return {**super().toolchain(arch), "ptxas": codegen.ptxas_version()}

    def compile(self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None) -> DeviceBinary:
        """Optimize in place and generate a cubin or PTX (LLVM's NVPTX back end, then nvJitLink or ptxas)."""
        emit = self.check_emit(emit, arch)
        opt_seconds = self.optimize(module, config, arch)
        binary = codegen.codegen(module, kernel_name, config, arch, emit=emit)
        return attrs.evolve(binary, stage_times={"optimize": opt_seconds, **binary.stage_times})

    def open_device(self, index: int = 0) -> CudaDevice:
        return CudaDevice(index)

    def fingerprint(self) -> dict[str, str]:
        info = {"backend": self.name}
        try:
            from cuda import bindings

            info["cuda-bindings"] = getattr(bindings, "__version__", "")
        except ImportError:
            return info
        found = probe()
        if found.usable:
            info["cuda-driver"] = format_version(found.driver_version)
            info["nvidia-driver"] = kernel_module_version()
            info["device"] = _device_name(_device_handle(0))
        return info


def _device_handle(index: int):
    found = require()
    if not 0 <= index < found.device_count:
        raise BackendUnavailable(f"no CUDA device {index}: this machine has {found.device_count}")
    return check(driver().cuDeviceGet(index), f"cuDeviceGet({index})")


def _attribute(dev, name: str) -> int:
    cu = driver()
    return int(check(cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, name), dev), f"cuDeviceGetAttribute {name}"))


def _compute_capability(dev) -> tuple[int, int]:
    return (_attribute(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            _attribute(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))


def _device_name(dev) -> str:
    raw = check(driver().cuDeviceGetName(256, dev), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode()


class CudaKernel(LoadedKernel):
    """One kernel of a loaded CUDA module."""

    def __init__(self, device: CudaDevice, binary: DeviceBinary, module, function):
        super().__init__(binary)
        self.device = device
        self.module = module
        self.function = function
        self._resources: Resources | None = None
        self._max_dynamic_shared = 48 << 10
        self._param_bytes: int | None = None
        self.launched = False  # a first launch may load the kernel or grow local memory: both may synchronize

    def _release(self) -> None:
        self.device._modules.discard(self)
        if self.device.context_alive and not self.device.broken:
            result = driver().cuModuleUnload(self.module)
            if result[0] != driver().CUresult.CUDA_SUCCESS:
                log.warning("cuModuleUnload of %r failed: %s", self.binary.kernel_name, result[0])

    def attribute(self, name: str) -> int:
        cu = driver()
        attr = getattr(cu.CUfunction_attribute, name)
        return int(check(cu.cuFuncGetAttribute(attr, self.function), f"cuFuncGetAttribute {name}"))

    @property
    def resources(self) -> Resources:
        """Registers, local, constant and static shared memory, max threads per block (from the driver)."""
        self.check_open()
        if self._resources is None:
            base = self.binary.resources
            self._resources = Resources(
                registers=self.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                local_mem=self.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
                const_mem=self.attribute("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
                shared_mem=self.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                spill_stores=base.spill_stores,
                spill_loads=base.spill_loads,
                max_threads_per_block=self.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            )
        return self._resources

    def occupancy(self, block_threads: int, shared_mem: int = 0) -> float:
        """Active warps per multiprocessor over the maximum, for this block size and dynamic shared memory."""
        cu = driver()
        blocks = check(
            cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, block_threads, shared_mem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
        warps = blocks * -(-block_threads // 32)
        return warps / (self.device.max_threads_per_sm // 32)

    def param_layout(self) -> list[tuple[int, int]]:
        """(offset, size) of each kernel parameter, from the driver."""
        cu = driver()
        layout = []
        while True:
            result = cu.cuFuncGetParamInfo(self.function, len(layout))
            if result[0] != cu.CUresult.CUDA_SUCCESS:
                return layout
            layout.append((int(result[1]), int(result[2])))

    @property
    def param_bytes(self) -> int:
        """Size of the kernel's parameter buffer (the end of its last parameter); -1 when unknown."""
        if self._param_bytes is None:
            layout = self.param_layout()
            self._param_bytes = max((o + s for o, s in layout), default=0) if layout else -1
        return self._param_bytes

    def packed_args(self, args: bytes) -> bytes:
        """`args` fitted to the parameter buffer: trailing padding dropped (the driver rejects a longer buffer)."""
        size = self.param_bytes
        if size < 0 or len(args) == size:
            return args
        if len(args) > size and not any(args[size:]):
            return args[:size]
        if size == 0 and len(args) > 0:
            return b""
        raise ExperimentError(
            f"kernel {self.binary.kernel_name!r} takes {size} bytes of parameters, the argument buffer has "
            f"{len(args)}; the recording's argument layout does not match this binary",
            kind="launch",
        )


class CudaDevice(Device):
    """One CUDA device opened in this process (its primary context)."""

    def __init__(self, index: int = 0):
        cu = driver()
        dev = _device_handle(index)
        major, minor = _compute_capability(dev)
        self.dev = dev
        self.ordinal = index
        self.context = check(cu.cuDevicePrimaryCtxRetain(dev), f"cuDevicePrimaryCtxRetain({index})")
        try:
            check(cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            total = int(check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
            super().__init__(DeviceInfo("cuda", index, _device_name(dev), f"sm_{major}{minor}",
                                        format_version(probe().driver_version), total))
            self.granularity = allocation_granularity(index)
            self.sm_count = _attribute(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
            self.l2_bytes = _attribute(dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
            self.max_threads_per_sm = _attribute(dev, "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR")
            flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
            self.stream = check(cu.cuStreamCreate(flags), "cuStreamCreate")
        except Exception:
            cu.cuDevicePrimaryCtxRelease(dev)
            raise
        self.broken: str = ""  # the sticky error, once one happened
        self.context_alive = True  # until this device releases its hold on the primary context
        self._reservations: list[Reservation] = []
        self._buffers: set[DeviceBuffer] = set()
        self._modules: set[CudaKernel] = set()
        self._stages: list[PinnedBuffer] = []
        self._stage_events: list[Any] = []
        self._pinned: list[PinnedBuffer] = []
        self._flush: DeviceBuffer | None = None
        self._compare: tuple[Any, dict[str, Any]] | None = None
        self._compare_out: DeviceBuffer | None = None
        self._copier: ThreadPoolExecutor | None = None
        self._decoder: NativeDecoder | None | bool = False  # False: not looked up yet; None: not available
        self._restore_events: list[Any] = []  # one per restore slot (half a staging buffer)
        self._device_decode: DeviceDecode | None = None
        self._region_plans: dict[int, tuple[Any, Any]] = {}  # id(region) -> (region, its device decode plan)
        self.restore_decode: str | None = None  # LZ4 regions: "auto"/"device" (decode on the device) or "host"
        self.last_restore = ""  # how the last restore ran: "device-decode", "native" (or both, "+"), "python"
        self._events: list[Any] = []
        self._gate: LaunchGate | None = None
        self._warned_timer = False
        self.copy_through = "engine"  # how `copy` moves bytes: "engine" (cuMemcpyDtoDAsync) or "sm" (a kernel)

    # -- lifetime -------------------------------------------------------------------------------
    def _release(self) -> None:
        cu = driver()
        cu.cuCtxSetCurrent(self.context)
        if not self.broken:
            cu.cuStreamSynchronize(self.stream)
        for kernel in list(self._modules):
            kernel.close()
        if self._compare is not None and not self.broken:
            cu.cuModuleUnload(self._compare[0])
        if self._device_decode is not None:
            self._device_decode.release(unload=not self.broken)
        for buffer in list(self._buffers):
            self._free_quietly(buffer)
        for reservation in self._reservations:
            reservation.release()
        for pinned in self._stages + self._pinned:
            try:
                pinned.close()
            except MnemeError as exc:
                log.warning("freeing pinned memory failed: %s", exc)
        for event in self._events + self._stage_events + self._restore_events:
            cu.cuEventDestroy(event)
        if self._gate is not None:  # after the stream's synchronize: nothing waits on it any more
            try:
                self._gate.close()
            except MnemeError as exc:
                log.warning("freeing the launch gate failed: %s", exc)
        if self._copier is not None:
            self._copier.shutdown(wait=False)
        if self._decoder:
            self._decoder.close()
        cu.cuStreamDestroy(self.stream)
        self.context_alive = False
        cu.cuDevicePrimaryCtxRelease(self.dev)

    def _free_quietly(self, buffer: DeviceBuffer) -> None:
        try:
            buffer.close()
        except MnemeError as exc:
            log.warning("freeing device memory at %#x failed: %s", buffer.addr, exc)
        self._buffers.discard(buffer)

    def _enter(self) -> Any:
        """Check the device is usable, make its context current on this thread, return the driver."""
        self._check_open()
        if self.broken:
            raise ExperimentError(
                f"CUDA device {self.info.index} is unusable after an earlier fault ({self.broken}); "
                "run the next experiment in a fresh process",
                kind="fault",
            )
        cu = driver()
        check(cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        return cu

    def _sync(self, what: str, kernel: str | None = None) -> None:
        try:
            check(driver().cuStreamSynchronize(self.stream), what)
        except CudaError as exc:
            if exc.sticky:
                self.broken = exc.name
                raise fault(exc, kernel or "(unknown: an earlier asynchronous operation)") from exc
            raise

    def synchronize(self) -> None:
        self._enter()
        self._sync("cuStreamSynchronize")

    # -- memory at fixed addresses ------------------------------------------------------------------
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
        futures = [pool.submit(np.copyto, dst[o:o + step], src[o:o + step]) for o in range(0, n, step)]
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
                piece = array[start:start + STAGE_BYTES]
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
            check(cu.cuMemcpyHtoDAsync(dst + offset, stages[turn].ptr, length, self.stream), f"copy to {dst + offset:#x}")
            check(cu.cuEventRecord(events[turn], self.stream), "cuEventRecord")
            turn ^= 1
        self._sync(f"restoring region {addr:#x} of {getattr(snapshot, 'path', 'a snapshot')}")
        return info.size

    @staticmethod
    def _native_fills(info, addr: int, dst: int) -> list[tuple[int, int, int, int]]:
        """The native restore's fills (region address, destination, offset, length) of one region."""
        return [(addr, dst, offset, length) for offset, length, _ in restore_plan(info.size, info.chunk_size, RESTORE_FILL)]

    def _restore_native(self, decoder: NativeDecoder, snapshot: Snapshot, items: list[tuple[int, int, int, int]]) -> int:
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
        if chosen == "auto" and (region.info.chunk_size > devdecode.AUTO_MAX_CHUNK
                                 or region.info.size < devdecode.AUTO_MIN_REGION):  # fmt: skip
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

    def _restore_on_device(self, decoder: NativeDecoder, snapshot: Snapshot, addr: int, dst: int, region,
                           plan: devdecode.RegionPlan) -> str:
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
            return decoder.submit_stored(snapshot, region, region.chunks[fill.start:fill.stop], rows), slot, k, fill

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
        log.error("the device LZ4 decoder failed on %d chunk(s) of region %#x of %s (first: %s), which the host "
                  "reader decodes; restoring the region on the host. Please report this with the snapshot",
                  failed, addr, snapshot.path, chunk.block)  # fmt: skip
        self._restore_native(self._native(), snapshot, self._native_fills(region.info, addr, dst))

    def _restore_slots(self) -> list[int]:
        """The four restore slots: the halves of the two pinned staging buffers."""
        stages, _ = self._staging()
        return [stage.ptr + half for stage in stages for half in range(0, STAGE_BYTES - RESTORE_FILL + 1, RESTORE_FILL)]

    def _decode_into(self, snapshot: Any, addr: int, offset: int, stage: np.ndarray,
                     pieces: list[tuple[int, int]]) -> None:
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
        target = np.frombuffer(out, dtype=np.uint8) if not isinstance(out, np.ndarray) else out.reshape(-1).view(np.uint8)
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
            self._host_copy(target[off:off + length], stages[turn_].array[:length])

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

    # -- code -------------------------------------------------------------------------------------
    def load(self, binary: DeviceBinary, config: Any = None) -> CudaKernel:
        """Load a cubin, or JIT a PTX with options from `config` (ptxas_opt, max_registers, cache_mode)."""
        cu = self._enter()
        if binary.backend not in ("cuda", "") or binary.kind not in ("cubin", "ptx", "fatbin"):
            raise UnsupportedError(
                f"the cuda backend loads cubin, fatbin or PTX, not a {binary.backend} {binary.kind!r} "
                f"binary of kernel {binary.kernel_name!r}"
            )
        data = binary.data
        if binary.kind == "ptx" and not data.endswith(b"\0"):
            data = data + b"\0"
        options, values = self._jit_options(binary, config)
        try:
            if options:
                module = check(cu.cuModuleLoadDataEx(data, len(options), options, values),
                               f"loading {binary.kind} of kernel {binary.kernel_name!r}")
            else:
                module = check(cu.cuModuleLoadData(data), f"loading {binary.kind} of kernel {binary.kernel_name!r}")
        except CudaError as exc:
            raise ExperimentError(str(exc), kind="load") from exc
        try:
            function = check(cu.cuModuleGetFunction(module, binary.kernel_name.encode()),
                             f"finding kernel {binary.kernel_name!r} in its module")
        except CudaError as exc:
            cu.cuModuleUnload(module)
            raise ExperimentError(str(exc), kind="load") from exc
        kernel = CudaKernel(self, binary, module, function)
        self._modules.add(kernel)
        return kernel

    def _jit_options(self, binary: DeviceBinary, config: Any) -> tuple[list, list]:
        if binary.kind != "ptx" or config is None:
            return [], []
        cu = driver()
        options, values = [], []
        options.append(cu.CUjit_option.CU_JIT_OPTIMIZATION_LEVEL)
        values.append(int(getattr(config, "ptxas_opt", 3)))
        if getattr(config, "max_registers", 0):
            options.append(cu.CUjit_option.CU_JIT_MAX_REGISTERS)
            values.append(int(config.max_registers))
        mode = JIT_CACHE_MODES.get(getattr(config, "cache_mode", ""))
        if mode:
            options.append(cu.CUjit_option.CU_JIT_CACHE_MODE)
            values.append(getattr(cu.CUjit_cacheMode, mode))
        return options, values

    def _global(self, kernel: CudaKernel, name: str) -> tuple[int, int]:
        kernel.check_open()
        cu = self._enter()
        try:
            addr, size = check(cu.cuModuleGetGlobal(kernel.module, name.encode()), f"cuModuleGetGlobal({name!r})")
        except CudaError as exc:
            raise MnemeError(
                f"device global {name!r} is not in the module of kernel {kernel.binary.kernel_name!r} "
                f"({exc.name}); was it pruned or renamed?"
            ) from exc
        return int(addr), int(size)

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        addr, size = self._global(kernel, name)
        if memoryview(data).nbytes != size:
            raise MnemeError(
                f"device global {name!r} of kernel {kernel.binary.kernel_name!r} has {size} bytes, "
                f"the recorded value has {memoryview(data).nbytes}"
            )
        self.write(addr, data)

    def read_global(self, kernel: LoadedKernel, name: str, size: int | None = None) -> bytes:
        addr, actual = self._global(kernel, name)
        return self.read(addr, actual if size is None else min(size, actual))

    def global_address(self, kernel: LoadedKernel, name: str) -> tuple[int, int]:
        """(device address, size) of a module global, for device-side compare of globals."""
        return self._global(kernel, name)

    def _launch_async(self, kernel: CudaKernel, grid, block, shared_mem: int, args: bytes, keep: list) -> None:
        cu = driver()
        if shared_mem > kernel._max_dynamic_shared:
            check(cu.cuFuncSetAttribute(kernel.function,
                                        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        shared_mem), "allowing more dynamic shared memory")
            kernel._max_dynamic_shared = shared_mem
        extra = 0
        args = kernel.packed_args(bytes(args))
        if args:
            # Pass the packed parameter buffer as-is (CU_LAUNCH_PARAM_BUFFER_POINTER).
            buffer = ctypes.create_string_buffer(bytes(args), len(args))
            size = ctypes.c_size_t(len(args))
            table = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
            keep.extend((buffer, size, table))
            extra = ctypes.addressof(table)
        try:
            check(cu.cuLaunchKernel(kernel.function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                    shared_mem, self.stream, None, extra),
                  f"launching kernel {kernel.binary.kernel_name!r} with grid {grid} block {block}")
            kernel.launched = True
        except CudaError as exc:
            if exc.sticky:
                self.broken = exc.name
                raise fault(exc, kernel.binary.kernel_name) from exc
            raise ExperimentError(str(exc), kind="launch") from exc

    def launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> None:
        kernel.check_open()
        self._enter()
        keep: list = []
        self._launch_async(kernel, grid, block, shared_mem, args, keep)
        self._sync(f"kernel {kernel.binary.kernel_name!r}", kernel.binary.kernel_name)

    def _timing_events(self, n: int) -> list[Any]:
        cu = driver()
        while len(self._events) < n:
            self._events.append(check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate"))
        return self._events[:n]

    def flush_l2(self) -> None:
        """Evict the L2 cache by writing a buffer twice its size (ordered on the stream)."""
        if self._flush is None:
            self._flush = self.alloc(max(2 * self.l2_bytes, 1 << 20))
        self.fill(self._flush.addr, self._flush.size, 0)

    @property
    def launch_gate(self) -> LaunchGate:
        """The mapped counter that holds timed launches; `.unavailable` says why timing runs ungated."""
        if self._gate is None:
            self._enter()
            self._gate = LaunchGate()
            if self._gate.unavailable:
                log.warning("timing launches without the gate (%s): a small kernel's time includes its submission",
                            self._gate.unavailable)  # fmt: skip
        return self._gate

    timers = cupti.TIMERS

    def time(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes, iterations: int,
             before_each: Callable[[], None] | None = None, cache: str = "flushed", gate: bool = True,
             timer: str = "auto") -> list[float]:  # fmt: skip
        """Seconds per run, after `before_each`: by the kernel's own timestamps, or CUDA events around it.

        `cache` is the L2's state at each timed run (`CACHE_STATES`): "flushed" evicts it,
        "warm" leaves it as `before_each` did, "primed" runs the kernel once more, untimed.
        `timer`: "cupti" takes each run's start and end from CUPTI's kernel records (`cupti`),
        "events" records CUDA events around each launch, "auto" is cupti where it can be had and
        events otherwise; `self.timer_used` says which measured. With events and `gate` the stream
        waits until both events and the launch are queued (`LaunchGate`), so the events time the
        kernel, not Python's submission of it, as the recorder does in the application. A kernel's
        first launch is never held: it may synchronize, which would wait for the held stream.
        """
        check_cache_state(cache)
        super().check_timer(timer)  # the name; whether cupti works here, _kernel_timer says
        kernel.check_open()
        cu = self._enter()
        ktimer = self._kernel_timer(timer)
        if ktimer is not None:
            times = self._time_by_records(ktimer, kernel, grid, block, shared_mem, args, iterations, before_each,
                                          cache, timer)  # fmt: skip
            if times is not None:
                self.timer_used = "cupti"
                return times
        self.timer_used = "events"
        events = self._timing_events(2 * iterations)
        held = self.launch_gate if gate else None
        keep: list = []
        for i in range(iterations):
            self._before_timed_run(kernel, grid, block, shared_mem, args, before_each, cache, keep)
            ticket = held.hold(self.stream) if held is not None and kernel.launched else 0
            try:
                check(cu.cuEventRecord(events[2 * i], self.stream), "cuEventRecord")
                self._launch_async(kernel, grid, block, shared_mem, args, keep)
                check(cu.cuEventRecord(events[2 * i + 1], self.stream), "cuEventRecord")
            finally:  # on every path, or the stream would wait for good
                if held is not None:
                    held.release(ticket)
        self._sync(f"timed runs of kernel {kernel.binary.kernel_name!r}", kernel.binary.kernel_name)
        return [float(check(cu.cuEventElapsedTime(events[2 * i], events[2 * i + 1]), "cuEventElapsedTime")) / 1e3
                for i in range(iterations)]

    def _before_timed_run(self, kernel: CudaKernel, grid, block, shared_mem: int, args: bytes, before_each,
                          cache: str, keep: list) -> None:  # fmt: skip
        """Restore (`before_each`) and bring the L2 to `cache`'s state for the next timed run."""
        if before_each is not None:
            before_each()
        if cache == "flushed":
            self.flush_l2()
        elif cache == "primed":
            self._launch_async(kernel, grid, block, shared_mem, args, keep)

    def check_timer(self, timer: str) -> None:
        """A known timer, and for "cupti" one that works here (else a UsageError saying why not)."""
        super().check_timer(timer)
        if timer == "cupti":
            self._kernel_timer(timer)

    def _kernel_timer(self, timer: str) -> cupti.KernelTimer | None:
        """The kernel timer for `timer`, enabled; None: time with events ("cupti" asked: an error saying why not)."""
        if timer == "events":
            return None
        if timer == "auto" and os.environ.get("CUDA_INJECTION64_PATH"):  # as the recorder: a tool may own CUPTI
            if not self._warned_timer:
                self._warned_timer = True
                log.warning("timing with CUDA events: a CUDA injection library (CUDA_INJECTION64_PATH) may own "
                            "CUPTI's activity buffers; --timer cupti uses them anyway")  # fmt: skip
            return None
        ktimer, why = cupti.kernel_timer()
        if ktimer is not None:
            try:
                ktimer.enable()
            except MnemeError as exc:
                ktimer, why = None, str(exc)
        if ktimer is None:
            if timer == "cupti":
                raise UsageError(f"timer cupti: {why}; use --timer events (or auto)")
            if not self._warned_timer:
                self._warned_timer = True
                log.warning("timing with CUDA events, not kernel timestamps: %s", why)
        return ktimer

    def _time_by_records(self, ktimer: cupti.KernelTimer, kernel: LoadedKernel, grid, block, shared_mem: int,
                         args: bytes, iterations: int, before_each, cache: str,
                         timer: str) -> list[float] | None:  # fmt: skip
        """`time` by CUPTI's kernel records; None when a run's record did not come and `timer` is "auto"
        (the caller uses events); with "cupti", that is an error."""
        first = ktimer.ids(iterations)
        keep: list = []
        try:
            for i in range(iterations):
                self._before_timed_run(kernel, grid, block, shared_mem, args, before_each, cache, keep)
                ktimer.push(first + i)
                try:
                    self._launch_async(kernel, grid, block, shared_mem, args, keep)
                finally:
                    ktimer.pop()
            self._sync(f"timed runs of kernel {kernel.binary.kernel_name!r}", kernel.binary.kernel_name)
        except BaseException:
            ktimer.forget()  # the records of runs that did not all run belong to no one
            raise
        times = ktimer.take(first, iterations)
        missing = sum(t is None for t in times)
        if missing:
            kernels, ids = ktimer.seen()
            what = (f"CUPTI delivered {iterations - missing} of {iterations} kernel records (so far {kernels} kernel "
                    f"and {ids} correlation records, {ktimer.dropped()} dropped for want of buffer space)")
            if timer == "cupti":
                raise MnemeError(f"{what}; use --timer events (or auto, which falls back to events)")
            log.warning("%s; timing these runs with CUDA events", what)
            return None
        return times  # type: ignore[return-value]

    # -- verification on the device ----------------------------------------------------------------
    def _compare_kernels(self) -> dict[str, Any]:
        if self._compare is None:
            cu = driver()
            try:
                module = check(cu.cuModuleLoadData(cmp.ptx() + b"\0"), "loading the compare kernels (compare.ptx)")
            except CudaError as exc:
                raise MnemeError(f"{exc}; the driver could not JIT mneme_cuda/kernels/compare.ptx") from exc
            functions = {key: check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction {name}")
                         for key, name in {**cmp.KERNELS, "copy": cmp.COPY_KERNEL}.items()}
            self._compare = (module, functions)
        return self._compare[1]

    def compare_regions(self, requests: Sequence[cmp.CompareRequest]) -> list[cmp.RegionDiff]:
        """Compare device regions against expected bytes on the device; one synchronization for all.

        Each request names the expected bytes' address (e.g. from `upload`), the actual region's
        address, its size and a policy (None: exact bytes). Float regions whose size is not a
        multiple of the element size compare their last bytes exactly.
        """
        cu = self._enter()
        if not requests:
            return []
        functions = self._compare_kernels()
        plans = [cmp.plan(r.policy) for r in requests]
        need = len(requests) * cmp.OUT_WORDS * 8
        if self._compare_out is None or self._compare_out.size < need:
            if self._compare_out is not None:
                self._free_quietly(self._compare_out)
            self._compare_out = self.alloc(max(need, 4096))
        out_base = self._compare_out.addr
        host = cmp.initial_out(len(requests))
        check(cu.cuMemcpyHtoDAsync(out_base, host.ctypes.data, host.nbytes, self.stream), "clearing compare counters")
        keep: list = []
        tails: list[tuple[int, int]] = []
        for i, (request, (key, threshold, relative, _norm)) in enumerate(zip(requests, plans)):
            elem = cmp.FLOAT_SIZES.get(key, 1)
            count = request.size // elem
            tails.append((count * elem, request.size - count * elem))
            out = out_base + i * cmp.OUT_WORDS * 8
            args = cmp.pack_args(key, request.expected, request.actual, count, threshold, relative, out)
            vector = 16 if key == "bytes" else 4
            grid = cmp.grid_for(-(-count // vector), self.sm_count)
            self._launch_raw(functions[key], grid, args, keep)
        check(cu.cuMemcpyDtoHAsync(host.ctypes.data, out_base, host.nbytes, self.stream), "reading compare counters")
        self._sync("device-side compare", "mneme_compare")
        diffs = []
        for i, (request, (key, threshold, relative, norm)) in enumerate(zip(requests, plans)):
            start, length = tails[i]
            tail_differs, tail_first = 0, -1
            if length:
                expected = self.read(request.expected + start, length)
                actual = self.read(request.actual + start, length)
                where = [j for j in range(length) if expected[j] != actual[j]]
                tail_differs, tail_first = len(where), (start + where[0] if where else -1)
            diffs.append(cmp.decide(request, key, threshold, relative, norm, host[i], tail_differs, tail_first))
        return diffs

    def compare(self, expected: int, actual: int, size: int, policy: Any = None) -> cmp.RegionDiff:
        """Compare one region (see `compare_regions`)."""
        return self.compare_regions([cmp.CompareRequest(expected, actual, size, policy)])[0]

    def _launch_raw(self, function, grid: int, args: bytes, keep: list) -> None:
        launch(function, (grid, 1, 1), (cmp.BLOCK, 1, 1), args, self.stream, keep)

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
            self.decode_fn = check(cu.cuModuleGetFunction(self.module, devdecode.DECODE_KERNEL.encode()),
                                   "cuModuleGetFunction")  # fmt: skip
            self.unshuffle_fn = check(cu.cuModuleGetFunction(self.module, devdecode.UNSHUFFLE_KERNEL.encode()),
                                      "cuModuleGetFunction")  # fmt: skip
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
        launch(self.decode_fn, (blocks, 1, 1), (32 * devdecode.WARPS_PER_BLOCK, 1, 1),
               devdecode.pack_decode_args(table, count, self.counters.addr), stream, keep)  # fmt: skip
        per_row, rows = devdecode.unshuffle_grid(plan, fill)
        if rows:
            launch(self.unshuffle_fn, (per_row, rows, 1), (devdecode.UNSHUFFLE_BLOCK, 1, 1),
                   devdecode.pack_unshuffle_args(table), stream, keep)  # fmt: skip

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


def launch(function, grid: tuple[int, int, int], block: tuple[int, int, int], args: bytes, stream, keep: list) -> None:
    """Launch with the arguments packed in one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER); `keep` holds it alive."""
    buffer = ctypes.create_string_buffer(args, len(args))
    size = ctypes.c_size_t(len(args))
    table = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    keep.extend((buffer, size, table))
    check(driver().cuLaunchKernel(function, *grid, *block, 0, stream, None, ctypes.addressof(table)),
          f"launching {function}")
