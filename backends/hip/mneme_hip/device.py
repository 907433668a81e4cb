"""An AMD GPU as a Mneme device, over hip-python: fixed-address memory, code objects, launches, timing.

Written against the ROCm 6.x HIP API; see README "HIP" for what has run on AMD hardware (none
of this module yet). Every call goes through `hipapi.call`, which names the failing call.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import numpy as np

from mneme.core import kernel_clock
from mneme.core.backend import Device, DeviceBinary, DeviceInfo, LoadedKernel, check_cache_state
from mneme.core.errors import ExperimentError, MnemeError, UsageError
from mneme.core.types import dim3
from mneme_hip import compare, launch, rocprof, tolerance, vmm
from mneme_hip.hipapi import HipError, bindings, call

log = logging.getLogger(__name__)

STAGING_BYTES = 16 << 20  # one pinned staging buffer; writes and reads stream through two of them


def device_arch(hip: Any, index: int) -> str:
    """``gfx90a:sramecc+:xnack-`` as the runtime names the device (``hipDeviceProp_t.gcnArchName``)."""
    props = hip.hipDeviceProp_t()
    call(f"hipGetDeviceProperties({index})", hip.hipGetDeviceProperties(props, index))
    return _text(props.gcnArchName)


def _text(value: Any) -> str:
    """A fixed-size char array of a HIP struct as text (up to its first NUL)."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text.split("\0", 1)[0].strip()


def base_arch(arch: str) -> str:
    """``gfx90a:sramecc+:xnack-`` -> ``gfx90a`` (the code generation target; features are the rest)."""
    return arch.split(":", 1)[0]


def attribute(hip: Any, name: str, index: int) -> int:
    attr = getattr(hip.hipDeviceAttribute_t, name)
    return int(call(f"hipDeviceGetAttribute({name})", hip.hipDeviceGetAttribute(attr, index)))


class DeviceBuffer:
    """Device memory from ``hipMalloc`` (pristine and expected copies of regions); freed once."""

    def __init__(self, hip: Any, size: int):
        self._hip = hip
        self.size = size
        self.addr = int(call(f"hipMalloc({size})", hip.hipMalloc(max(size, 1))))
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            result = self._hip.hipFree(self.addr)
            if int(result[0]) != 0:
                log.warning("hipFree(0x%x) failed: %s", self.addr, result[0])


class HipKernel(LoadedKernel):
    """A function of a code object loaded with ``hipModuleLoadData``."""

    def __init__(self, device: HipDevice, binary: DeviceBinary):
        super().__init__(binary)
        hip = device.hip
        self._hip = hip
        self._image = ctypes.create_string_buffer(binary.data, len(binary.data))
        self.module = call(f"hipModuleLoadData (kernel {binary.kernel_name!r})", hip.hipModuleLoadData(self._image))
        try:
            self.function = call(
                f"hipModuleGetFunction({binary.kernel_name!r})",
                hip.hipModuleGetFunction(self.module, binary.kernel_name.encode()),
            )
        except MnemeError:
            hip.hipModuleUnload(self.module)
            raise
        limit = binary.resources.max_threads_per_block
        self.max_threads = limit if limit and limit > 0 else 1024
        self.device = device

    def occupancy(self, block_threads: int, shared_mem: int = 0) -> float:
        """Active wavefronts per compute unit over the maximum, for this block size and dynamic LDS
        (the runtime's occupancy calculator, which reads the code object's register and LDS use)."""
        blocks = call(
            "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
            self._hip.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(self.function, block_threads, shared_mem),
        )
        wave = self.device.wavefront_size
        return blocks * -(-block_threads // wave) / (self.device.max_threads_per_cu // wave)

    def _release(self) -> None:
        result = self._hip.hipModuleUnload(self.module)
        if int(result[0]) != 0:
            log.warning("hipModuleUnload of %s failed: %s", self.binary.kernel_name, result[0])


class HipDevice(Device):
    """One AMD GPU opened in this process; memory lives at the recorded virtual addresses."""

    timers = rocprof.TIMERS

    def __init__(self, index: int = 0):
        hip = bindings()
        self.hip = hip
        call(f"hipSetDevice({index})", hip.hipSetDevice(index))
        arch = device_arch(hip, index)
        props = hip.hipDeviceProp_t()
        call("hipGetDeviceProperties", hip.hipGetDeviceProperties(props, index))
        name = _text(props.name)
        version = call("hipRuntimeGetVersion", hip.hipRuntimeGetVersion())
        super().__init__(
            DeviceInfo(
                backend="hip",
                index=index,
                name=name,
                arch=arch,
                driver=f"HIP {version}",
                memory_bytes=int(props.totalGlobalMem),
            )
        )
        self.index = index
        self.granularity = vmm.allocation_granularity(hip, index)
        self.compute_units = attribute(hip, "hipDeviceAttributeMultiprocessorCount", index)
        self.wavefront_size = attribute(hip, "hipDeviceAttributeWarpSize", index)
        self.max_threads_per_cu = attribute(hip, "hipDeviceAttributeMaxThreadsPerMultiProcessor", index)
        self.l2_bytes = attribute(hip, "hipDeviceAttributeL2CacheSize", index)
        self.stream = call("hipStreamCreate", hip.hipStreamCreate())
        self.reservations: list[vmm.Reservation] = []
        self._staging: list[Any] = []
        self._flush: int | None = None
        self._compare: dict[str, HipKernel] = {}
        self._warned_timer = False

    # -- lifetime ---------------------------------------------------------------------------
    def _release(self) -> None:
        hip = self.hip
        for kernel in self._compare.values():
            kernel.close()
        for buffer in self._staging:
            hip.hipHostFree(buffer)
        if self._flush is not None:
            hip.hipFree(self._flush)
        for reservation in self.reservations:
            reservation.release()
        hip.hipStreamDestroy(self.stream)

    def synchronize(self, what: str = "the device") -> None:
        try:
            call(f"hipStreamSynchronize ({what})", self.hip.hipStreamSynchronize(self.stream))
        except HipError as exc:
            raise ExperimentError(f"{what} failed on the GPU: {exc}", kind="fault") from exc

    # -- memory at fixed addresses -------------------------------------------------------------
    def reserve(self, va_addr: int, va_size: int) -> None:
        self._check_open()
        if any(r.covers(va_addr, va_size) for r in self.reservations):
            return
        self.reservations.append(vmm.Reservation(self.hip, self.index, va_addr, va_size, self.granularity))

    def map(self, addr: int, size: int) -> None:
        self._check_open()
        holder = next((r for r in self.reservations if r.covers(addr, size)), None)
        if holder is None:
            raise MnemeError(f"0x{addr:x}+{size} is outside every reserved range; reserve the recorded VA range first")
        holder.map(addr, size)

    def _stage(self) -> list[Any]:
        if not self._staging:
            for _ in range(2):
                self._staging.append(call("hipHostMalloc", self.hip.hipHostMalloc(STAGING_BYTES, 0)))
        return self._staging

    def write(self, addr: int, data) -> None:
        """Stream host bytes to the device through two pinned staging buffers (copy one while filling the other)."""
        self._check_open()
        view = memoryview(data).cast("B")
        stages = self._stage()
        for k, (offset, length) in enumerate(vmm.staging_chunks(len(view), STAGING_BYTES)):
            stage = stages[k % 2]
            if k >= 2:  # the copy out of this buffer, two chunks ago, must be done before refilling it
                self.synchronize("a host-to-device copy")
            ctypes.memmove(int(stage), bytes(view[offset : offset + length]), length)
            call("hipMemcpyHtoDAsync", self.hip.hipMemcpyHtoDAsync(addr + offset, stage, length, self.stream))
        self.synchronize("a host-to-device copy")

    def read(self, addr: int, size: int) -> bytes:
        self._check_open()
        out = bytearray(size)
        stage = self._stage()[0]
        for offset, length in vmm.staging_chunks(size, STAGING_BYTES):
            call("hipMemcpyDtoHAsync", self.hip.hipMemcpyDtoHAsync(stage, addr + offset, length, self.stream))
            self.synchronize("a device-to-host copy")
            out[offset : offset + length] = ctypes.string_at(int(stage), length)
        return bytes(out)

    def copy(self, dst: int, src: int, size: int) -> None:
        self._check_open()
        call("hipMemcpyDtoDAsync", self.hip.hipMemcpyDtoDAsync(dst, src, size, self.stream))
        self.synchronize("a device-to-device copy")

    def alloc(self, size: int) -> DeviceBuffer:
        self._check_open()
        return DeviceBuffer(self.hip, size)

    def free(self, buffer: DeviceBuffer) -> None:
        buffer.close()

    def write_snapshot_regions(self, snapshot: Any, targets=None) -> int:
        """Stream a snapshot's regions (to their own addresses, or (region, destination) pairs) through staging."""
        self._check_open()
        pairs = list(targets) if targets is not None else [(r.addr, r.addr) for r in snapshot.regions]
        written = 0
        for addr, dst in pairs:
            offset = 0
            for chunk in snapshot.iter_region(addr):
                self.write(dst + offset, chunk)
                offset += len(chunk)
            written += offset
        return written

    # -- code ---------------------------------------------------------------------------------
    def load(self, binary: DeviceBinary) -> HipKernel:
        self._check_open()
        if binary.backend != "hip" or binary.kind != "hsaco":
            raise ExperimentError(
                f"kernel {binary.kernel_name!r}: a {binary.backend} {binary.kind} binary cannot "
                "load on the hip backend; compile it for this gfx architecture",
                kind="load",
            )
        try:
            return HipKernel(self, binary)
        except HipError as exc:
            raise ExperimentError(f"kernel {binary.kernel_name!r}: {exc}", kind="load") from exc

    def _enqueue(
        self, kernel: HipKernel, grid: dim3, block: dim3, shared_mem: int, args: launch.ArgumentBuffer
    ) -> None:
        call(
            f"hipModuleLaunchKernel({kernel.binary.kernel_name!r})",
            self.hip.hipModuleLaunchKernel(
                kernel.function,
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                shared_mem,
                self.stream,
                None,
                args.extra(),
            ),
        )

    def launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> None:
        self._check_open()
        kernel.check_open()
        if not isinstance(kernel, HipKernel):
            raise ExperimentError(
                f"kernel {kernel.binary.kernel_name!r} was not loaded by the hip backend", kind="launch"
            )
        grid, block = dim3.of(grid), dim3.of(block)
        launch.check_geometry(kernel.binary.kernel_name, grid.as_tuple(), block.as_tuple(), kernel.max_threads)
        # a supervisor (kernel_clock) kills this process if the kernel never ends: the GPU cannot stop it
        with kernel_clock.running():
            self._enqueue(kernel, grid, block, shared_mem, launch.ArgumentBuffer(args))
            self.synchronize(f"kernel {kernel.binary.kernel_name!r}")

    def _flush_l2(self) -> None:
        size = vmm.l2_flush_bytes(self.l2_bytes)
        if self._flush is None:
            self._flush = call("hipMalloc", self.hip.hipMalloc(size))
        call("hipMemsetD8Async", self.hip.hipMemsetD8Async(self._flush, 0, size, self.stream))

    def _kernel_timer(self, timer: str) -> rocprof.KernelTimer | None:
        """rocprofiler-sdk's timer for "rocprofiler" (else a UsageError saying why) and "auto" (else None)."""
        if timer not in ("auto", rocprof.TIMER):
            return None
        ktimer, why = rocprof.kernel_timer()
        if ktimer is None and timer == rocprof.TIMER:
            raise UsageError(f"timer rocprofiler: {why}; use --timer hip-event (or auto)")
        if ktimer is None and not self._warned_timer:
            self._warned_timer = True
            log.info("timing with hipEvents: %s", why)
        return ktimer

    def check_timer(self, timer: str) -> None:
        """A known timer, and for "rocprofiler" one that works here (else a UsageError saying why not)."""
        super().check_timer(timer)
        if timer == rocprof.TIMER:
            self._kernel_timer(timer)

    def time(
        self, kernel, grid, block, shared_mem, args, iterations, before_each=None, cache="flushed", timer="auto"
    ) -> list[float]:
        """Seconds per run: rocprofiler-sdk's dispatch timestamps where it is set up, else hipEvent pairs
        around each launch (``host-clock``: the core's). `timer_used` names the one that measured."""
        check_cache_state(cache)
        self.check_timer(timer)
        if timer == "host-clock":
            return super().time(kernel, grid, block, shared_mem, args, iterations, before_each, cache, timer)
        grid, block = dim3.of(grid), dim3.of(block)
        buffer = launch.ArgumentBuffer(args)
        ktimer = self._kernel_timer(timer)
        if ktimer is not None:
            times = self._time_by_records(
                ktimer, kernel, grid, block, shared_mem, buffer, iterations, before_each, cache
            )
            if times is not None:
                self.timer_used = rocprof.TIMER
                return times
            if timer == rocprof.TIMER:
                raise ExperimentError(
                    f"kernel {kernel.binary.kernel_name!r}: rocprofiler-sdk did not report one "
                    f"dispatch record per timed run ({iterations})",
                    kind="timing",
                )
            log.warning("rocprofiler-sdk did not report every timed dispatch; timing with hipEvents")
        return self._time_by_events(kernel, grid, block, shared_mem, buffer, iterations, before_each, cache)

    def _prepare_run(self, kernel, grid, block, shared_mem, buffer, before_each, cache) -> None:
        if before_each is not None:
            before_each()
        if cache == "flushed":
            self._flush_l2()
        elif cache == "primed":
            self._enqueue(kernel, grid, block, shared_mem, buffer)

    def _time_by_records(
        self, ktimer, kernel, grid, block, shared_mem, buffer, iterations, before_each, cache
    ) -> list[float] | None:
        """Each run's own duration from its dispatch record; the context traces only the timed launches."""
        self.synchronize("the work before timing")
        ktimer.take()  # records of earlier work are not this kernel's
        for _ in range(iterations):
            self._prepare_run(kernel, grid, block, shared_mem, buffer, before_each, cache)
            ktimer.start()
            try:
                self._enqueue(kernel, grid, block, shared_mem, buffer)
            finally:
                ktimer.stop()  # the contexts active at enqueue are the ones that report the dispatch
            self.synchronize(f"kernel {kernel.binary.kernel_name!r}")
        return rocprof.runs_of(ktimer.take(), block.as_tuple(), grid.as_tuple(), iterations)

    def _time_by_events(self, kernel, grid, block, shared_mem, buffer, iterations, before_each, cache) -> list[float]:
        hip = self.hip
        start, stop = call("hipEventCreate", hip.hipEventCreate()), call("hipEventCreate", hip.hipEventCreate())
        times = []
        try:
            for _ in range(iterations):
                self._prepare_run(kernel, grid, block, shared_mem, buffer, before_each, cache)
                call("hipEventRecord", hip.hipEventRecord(start, self.stream))
                self._enqueue(kernel, grid, block, shared_mem, buffer)
                call("hipEventRecord", hip.hipEventRecord(stop, self.stream))
                self.synchronize(f"kernel {kernel.binary.kernel_name!r}")
                times.append(float(call("hipEventElapsedTime", hip.hipEventElapsedTime(start, stop))) / 1e3)
        finally:
            hip.hipEventDestroy(start)
            hip.hipEventDestroy(stop)
        self.timer_used = "hip-event"
        return times

    # -- device globals -------------------------------------------------------------------------
    def _global(self, kernel: LoadedKernel, name: str) -> tuple[int, int]:
        self._check_open()
        kernel.check_open()
        try:
            ptr, size = call(f"hipModuleGetGlobal({name!r})", self.hip.hipModuleGetGlobal(kernel.module, name.encode()))
        except HipError as exc:
            raise MnemeError(f"kernel {kernel.binary.kernel_name!r} has no device global {name!r} ({exc})") from exc
        return int(ptr), int(size)

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        addr, size = self._global(kernel, name)
        if len(data) > size:
            raise MnemeError(f"device global {name!r} holds {size} bytes; got {len(data)}")
        self.write(addr, data)

    def read_global(self, kernel: LoadedKernel, name: str, size: int) -> bytes:
        addr, held = self._global(kernel, name)
        if size > held:
            raise MnemeError(f"device global {name!r} holds {held} bytes; asked for {size}")
        return self.read(addr, size)

    # -- verification on the device -------------------------------------------------------------
    def compare_regions(self, requests) -> list[compare.RegionDiff]:
        """Every region compared on the GPU: exactly, or under its policy's tolerance by a typed kernel."""
        diffs = []
        for r in requests:
            key, threshold, relative, norm = compare.plan(r.policy)
            if key == "bytes":
                words = self._run_compare("bytes", compare.pack_args, (r.expected, r.actual, r.size), 2)
                diffs.append(compare.decide(r.actual, r.size, key, 0.0, False, norm, words))
                continue
            elem = tolerance.itemsize(key)
            whole = r.size // elem * elem
            tail = (0, -1)
            if whole < r.size:  # a partial trailing element must match exactly, as on the host
                count, first = self.compare_bytes(r.expected + whole, r.actual + whole, r.size - whole)
                tail = (count, whole + first if count else -1)
            words = compare.initial_words()
            if whole:
                words = self._run_compare(
                    key,
                    lambda e, a, n, out, stride: compare.pack_tolerant_args(e, a, n, threshold, relative, out, stride),
                    (r.expected, r.actual, whole // elem),
                    compare.OUT_WORDS,
                )
            diffs.append(compare.decide(r.actual, r.size, key, threshold, relative, norm, words, tail))
        return diffs

    def compare_bytes(self, expected: int, actual: int, size: int) -> tuple[int, int]:
        """(differing bytes, first differing offset or -1) of two device ranges, counted on the GPU."""
        return compare.result(self._run_compare("bytes", compare.pack_args, (expected, actual, size), 2))

    def _compare_kernel(self, key: str) -> HipKernel:
        """The compare kernel for `key` ("bytes" or a dtype), built by our toolchain and loaded at first use."""
        if key not in self._compare:
            arch = base_arch(self.info.arch)
            name = compare.KERNEL if key == "bytes" else tolerance.kernel_name(key)
            self._compare[key] = self.load(DeviceBinary("hip", arch, "hsaco", name, compare.hsaco(arch, key)))
        return self._compare[key]

    def _run_compare(self, key: str, pack, operands: tuple[int, int, int], n_words: int) -> np.ndarray:
        """Launch one compare over `operands` (expected, actual, elements) and read back its result words."""
        self._check_open()
        kernel = self._compare_kernel(key)
        initial = compare.initial_out() if n_words == 2 else compare.initial_words()
        out = call("hipMalloc", self.hip.hipMalloc(initial.nbytes))
        try:
            self.write(int(out), initial.tobytes())
            grid = compare.grid_for(operands[2], self.compute_units)
            self.launch(kernel, grid, compare.BLOCK, 0, pack(*operands, int(out), grid * compare.BLOCK))
            return np.frombuffer(self.read(int(out), initial.nbytes), dtype=np.uint64).copy()
        finally:
            self.hip.hipFree(out)
