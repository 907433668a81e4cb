"""One CUDA device opened in this process: its primary context, memory, kernels, timing and verification.

`mneme_cuda.backend.CudaBackend.open_device` imports this module, so that compiling (`mneme ir
compile`, compile-ahead workers) loads none of the device half: numpy, the snapshot reader, CUPTI.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mneme.core.backend import Device, DeviceInfo
from mneme.core.errors import ExperimentError, MnemeError
from mneme_cuda import compare as cmp
from mneme_cuda import cupti
from mneme_cuda.driver import CudaError, check, driver, fault, format_version, probe
from mneme_cuda.gate import LaunchGate
from mneme_cuda.kernel import CudaKernel, DeviceKernels, launch
from mneme_cuda.memory import DeviceBuffer, PinnedBuffer, Reservation, allocation_granularity, mapping_granularity
from mneme_cuda.properties import attribute, compute_capability, device_handle, device_name
from mneme_cuda.restore import DeviceDecode, DeviceMemory
from mneme_cuda.snapio import NativeDecoder
from mneme_cuda.timing import DeviceTiming, before_flush_setting, extra_streams_setting

log = logging.getLogger(__name__)


class CudaDevice(DeviceMemory, DeviceKernels, DeviceTiming, Device):
    """One CUDA device opened in this process (its primary context)."""

    timers = cupti.TIMERS
    launch_attributes_supported = frozenset({"cooperative", "cluster"})

    def __init__(self, index: int = 0):
        cu = driver()
        dev = device_handle(index)
        major, minor = compute_capability(dev)
        self.dev = dev
        self.ordinal = index
        self.context = check(cu.cuDevicePrimaryCtxRetain(dev), f"cuDevicePrimaryCtxRetain({index})")
        try:
            check(cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            total = int(check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
            super().__init__(
                DeviceInfo(
                    "cuda", index, device_name(dev), f"sm_{major}{minor}", format_version(probe().driver_version), total
                )
            )
            # Recorded ranges are mapped at this granularity (MNEME_CUDA_MAP_GRANULARITY), one physical
            # allocation per range, as the recorder placed each of the application's allocations.
            self.granularity = allocation_granularity(index, mapping_granularity())
            self.sm_count = attribute(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
            self.l2_bytes = attribute(dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
            self.max_threads_per_sm = attribute(dev, "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR")
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
        self._read_sink: DeviceBuffer | None = None  # touch_mapped("read")'s never-written word
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
        # flushed runs: what the SMs do to every mapped range before the flush (DeviceTiming.touch_mapped)
        self.before_flush = before_flush_setting()
        # more streams while timing, as an application's process has them ($MNEME_CUDA_EXTRA_STREAMS; a diagnosis)
        self.extra_streams = extra_streams_setting()
        self._extra_streams: list[Any] = []
        self._extra_word: DeviceBuffer | None = None

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
        for stream in self._extra_streams:
            cu.cuStreamDestroy(stream)
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

    # -- verification on the device ----------------------------------------------------------------
    def _compare_kernels(self) -> dict[str, Any]:
        if self._compare is None:
            cu = driver()
            try:
                module = check(cu.cuModuleLoadData(cmp.ptx() + b"\0"), "loading the compare kernels (compare.ptx)")
            except CudaError as exc:
                raise MnemeError(f"{exc}; the driver could not JIT mneme_cuda/kernels/compare.ptx") from exc
            functions = {
                key: check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction {name}")
                for key, name in {**cmp.KERNELS, "copy": cmp.COPY_KERNEL, "read": cmp.READ_KERNEL}.items()
            }
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
