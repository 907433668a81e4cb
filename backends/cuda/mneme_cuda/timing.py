"""Timing CUDA kernels: CUPTI kernel records or CUDA events, an L2 flush or a primed run before each."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mneme.core import envvars
from mneme.core.backend import LoadedKernel, check_cache_state
from mneme.core.errors import MnemeError, UsageError
from mneme_cuda import compare as cmp
from mneme_cuda import cupti
from mneme_cuda.driver import check, driver
from mneme_cuda.gate import LaunchGate

if TYPE_CHECKING:
    from mneme_cuda.kernel import CudaKernel

log = logging.getLogger(__name__)

BEFORE_FLUSH = ("read", "rewrite")  # what a flushed run may have the SMs do to the recorded ranges first


def before_flush_setting() -> str:
    """$MNEME_CUDA_BEFORE_FLUSH: "" (nothing before the flush), "read" or "rewrite" (`DeviceTiming.touch_mapped`)."""
    how = envvars.get("MNEME_CUDA_BEFORE_FLUSH") or ""
    if how and how not in BEFORE_FLUSH:
        raise UsageError(f"MNEME_CUDA_BEFORE_FLUSH={how!r} is not one of {', '.join(BEFORE_FLUSH)} (or empty: nothing)")
    return how


def extra_streams_setting() -> int:
    """$MNEME_CUDA_EXTRA_STREAMS: how many more streams, each with a finished memset, the device holds while it
    times (0: none). An application's process has streams of its own besides the one of the recorded launch; a probe
    on the H100 timed a flushed 4 us kernel 0.19 us slower once 32 more streams existed
    (docs/design/investigations/replay-timing-2026-12-06.md, tenth session). Off by default: a diagnosis."""
    text = envvars.get("MNEME_CUDA_EXTRA_STREAMS") or "0"
    try:
        count = int(text)
    except ValueError:
        count = -1
    if not 0 <= count <= 1024:
        raise UsageError(f"MNEME_CUDA_EXTRA_STREAMS={text!r}: give a number of streams from 0 to 1024")
    return count


class DeviceTiming:
    """`CudaDevice`'s timed runs (a mixin: it uses the device's stream, launches and resets)."""

    def _timing_events(self, n: int) -> list[Any]:
        cu = driver()
        while len(self._events) < n:
            self._events.append(check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate"))
        return self._events[:n]

    def _open_extra_streams(self) -> None:
        """Create the streams $MNEME_CUDA_EXTRA_STREAMS asks for, each with a memset of 4 bytes run to its end."""
        cu = driver()
        if self._extra_word is None:
            self._extra_word = self.alloc(4)
        while len(self._extra_streams) < self.extra_streams:
            stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            self._extra_streams.append(stream)
            check(cu.cuMemsetD32Async(self._extra_word.addr, 0, 1, stream), "cuMemsetD32Async")
        for stream in self._extra_streams:
            check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def flush_l2(self) -> None:
        """Evict the L2 cache by writing a buffer twice its size (ordered on the stream)."""
        if self._flush is None:
            self._flush = self.alloc(self.flush_bytes)
        self.fill(self._flush.addr, self._flush.size, 0)

    def touch_mapped(self, how: str) -> None:
        """Touch every mapped recorded range through the SMs, ordered on the stream: "read" loads every byte
        (a kernel that stores nothing), "rewrite" copies each range onto itself (a copy kernel). In the application
        the SMs were the last to touch the kernel's memory before the recorder's flush; in a replay it is the copy
        engine of the restore ($MNEME_CUDA_BEFORE_FLUSH; issue 38: on the H100, reading or rewriting every region
        before the flush brought 5 of the 10 instances that replayed 6-14% faster than recorded within 5%)."""
        if how not in BEFORE_FLUSH:
            raise UsageError(f"touch_mapped: {how!r} is not one of {', '.join(BEFORE_FLUSH)}")
        chunks = [chunk for reservation in self._reservations for chunk in reservation.mapped_chunks()]
        if how == "rewrite":
            through = self.copy_through
            self.copy_through = "sm"
            try:
                for start, size in chunks:
                    self.copy(start, start, size)
            finally:
                self.copy_through = through
            return
        if self._read_sink is None:
            self._read_sink = self.alloc(8)
        read = self._compare_kernels()["read"]
        for start, size in chunks:
            grid = cmp.grid_for(-(-size // 16), self.sm_count)
            self._launch_raw(read, grid, cmp.pack_read_args(start, size, self._read_sink.addr), [])

    @property
    def flush_bytes(self) -> int:
        return max(2 * self.l2_bytes, 1 << 20)

    def _allocate_flush_buffer(self) -> None:
        """Allocate the flush's buffer before the recorded state is restored (`write_snapshot_regions` calls
        this, once the recorded regions are mapped), as the recorder allocates its own before the prologue
        capture: a new mapping made right before a short kernel's launch put its time on a level about 20%
        higher (docs/design/recording.md, "The L2 before a recorded launch"). A device too full for it now
        allocates it at the first flush, or fails there."""
        try:
            self._flush = self.alloc(self.flush_bytes)
        except MnemeError as exc:
            log.debug("the L2 flush's buffer is allocated at the first flush: %s", exc)

    @property
    def launch_gate(self) -> LaunchGate:
        """The mapped counter that holds timed launches; `.unavailable` says why timing runs ungated."""
        if self._gate is None:
            self._enter()
            self._gate = LaunchGate()
            if self._gate.unavailable:
                log.warning(
                    "timing launches without the gate (%s): a small kernel's time includes its submission",
                    self._gate.unavailable,
                )
        return self._gate

    def time(
        self,
        kernel: LoadedKernel,
        grid,
        block,
        shared_mem: int,
        args: bytes,
        iterations: int,
        before_each: Callable[[], None] | None = None,
        cache: str = "flushed",
        gate: bool = True,
        timer: str = "auto",
    ) -> list[float]:
        """Seconds per run, after `before_each`: by the kernel's own timestamps, or CUDA events around it.

        `cache` is the L2's state at each timed run (`CACHE_STATES`): "flushed" evicts it and waits for that,
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
            times = self._time_by_records(
                ktimer, kernel, grid, block, shared_mem, args, iterations, before_each, cache, timer
            )
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
        return [
            float(check(cu.cuEventElapsedTime(events[2 * i], events[2 * i + 1]), "cuEventElapsedTime")) / 1e3
            for i in range(iterations)
        ]

    def _before_timed_run(
        self, kernel: CudaKernel, grid, block, shared_mem: int, args: bytes, before_each, cache: str, keep: list
    ) -> None:
        """Restore (`before_each`) and bring the L2 to `cache`'s state for the next timed run."""
        if before_each is not None:
            before_each()
        if self.extra_streams > len(self._extra_streams):
            self._open_extra_streams()
        if cache == "flushed":
            if self.before_flush:
                self.touch_mapped(self.before_flush)
            # As the recorder times its recorded launch: the flush complete and the device idle before the
            # launch is submitted (the recorder synchronizes the context between the two), not the launch
            # queued right behind the flush (docs/design/recording.md, "The L2 before a recorded launch").
            self.flush_l2()
            self._sync("the L2 flush before a timed run")
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
                log.warning(
                    "timing with CUDA events: a CUDA injection library (CUDA_INJECTION64_PATH) may own "
                    "CUPTI's activity buffers; --timer cupti uses them anyway"
                )
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

    def _time_by_records(
        self,
        ktimer: cupti.KernelTimer,
        kernel: LoadedKernel,
        grid,
        block,
        shared_mem: int,
        args: bytes,
        iterations: int,
        before_each,
        cache: str,
        timer: str,
    ) -> list[float] | None:
        """`time` by CUPTI's kernel records; None when a run's record did not come and `timer` is "auto"
        (the caller uses events); with "cupti", that is an error."""
        keep: list = []
        if ktimer.windows:  # $MNEME_CUPTI_MATCH=windows: each run alone, found by name and time, as the recorder
            name = kernel.binary.kernel_name
            times = []
            for _ in range(iterations):
                self._before_timed_run(kernel, grid, block, shared_mem, args, before_each, cache, keep)
                times.append(
                    ktimer.window(
                        name,
                        lambda: self._launch_async(kernel, grid, block, shared_mem, args, keep),
                        lambda: self._sync(f"a timed run of kernel {name!r}", name),
                    )
                )
            return self._all_records(ktimer, times, iterations, timer)
        first = ktimer.ids(iterations)
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
        return self._all_records(ktimer, ktimer.take(first, iterations), iterations, timer)

    def _all_records(
        self, ktimer: cupti.KernelTimer, times: list[float | None], iterations: int, timer: str
    ) -> list[float] | None:
        """`times` when every run has its record; else None to time with events ("auto"), or an error ("cupti")."""
        missing = sum(t is None for t in times)
        if missing:
            kernels, ids = ktimer.seen()
            what = (
                f"CUPTI delivered {iterations - missing} of {iterations} kernel records (so far {kernels} kernel "
                f"and {ids} correlation records, {ktimer.dropped()} dropped for want of buffer space)"
            )
            if timer == "cupti":
                raise MnemeError(f"{what}; use --timer events (or auto, which falls back to events)")
            log.warning("%s; timing these runs with CUDA events", what)
            return None
        return times  # type: ignore[return-value]
