"""The launch gate: holds a stream until a timed launch and its two events are all queued.

On an idle stream a start event fires as soon as it is queued and the kernel only once the host
has submitted it, so CUDA events around a launch would time the host's submission too (Python's
launch path takes longer than a small kernel). The gate makes the stream wait
(`cuStreamWaitValue32`, cyclic greater-or-equal) for a counter in page-locked, device-mapped
host memory, which the host raises with a plain store once start event, launch and stop event
are queued: the GPU then runs the three back to back, as the CUDA recorder does inside the
application (docs/design/recording.md, "Timing inside the application"). The counter only grows
and the store cannot fail, so a release is never missed. A driver call inside the gate that
itself waits for the held stream would wait for good, so a backstop thread releases a ticket
still held after BACKSTOP_S (and after two such releases the gate is off).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

from mneme_cuda.driver import CudaError, check, driver

log = logging.getLogger(__name__)

DEVICEMAP = 0x02  # CU_MEMHOSTALLOC_DEVICEMAP (cuda.h), where the bindings lack the name
BACKSTOP_S = 0.1  # a ticket held this long is released by the backstop thread


class LaunchGate:
    """One mapped counter in the current context. `unavailable` says why the gate cannot be had ("" when it can).

    Use `hold(stream)` before queuing what must run back to back, then `release(ticket)`, in a
    `finally` so that an error in between still lets the stream go on.
    """

    def __init__(self):
        cu = driver()
        self.ptr = 0
        self.unavailable = ""
        self.late = 0  # tickets the backstop released
        self._ticket = 0
        self._held = 0  # the ticket a stream waits for now; 0: none
        self._counter: ctypes.c_uint32 | None = None
        self._cond = threading.Condition()
        self._backstop: threading.Thread | None = None
        if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1":
            self.unavailable = "CUDA_LAUNCH_BLOCKING=1 (each launch would wait for its own held stream)"
            return
        try:
            self.ptr = int(
                check(
                    cu.cuMemHostAlloc(4, getattr(cu, "CU_MEMHOSTALLOC_DEVICEMAP", DEVICEMAP)),
                    "cuMemHostAlloc of the launch gate's mapped counter",
                )
            )
            self.device_ptr = check(cu.cuMemHostGetDevicePointer(self.ptr, 0), "cuMemHostGetDevicePointer")
        except CudaError as exc:
            self.unavailable = str(exc)
            self.close()
            return
        self._counter = ctypes.c_uint32.from_address(self.ptr)
        self._counter.value = 0

    @property
    def usable(self) -> bool:
        return self._counter is not None and not self.unavailable

    def hold(self, stream) -> int:
        """Make `stream` wait for the next ticket; 0 (nothing held) when the wait cannot be queued."""
        if not self.usable:
            return 0
        cu = driver()
        ticket = (self._ticket + 1) & 0xFFFFFFFF or 1  # 0 means "not held"
        geq = int(cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        try:
            check(cu.cuStreamWaitValue32(stream, self.device_ptr, ticket, geq), "cuStreamWaitValue32 (launch gate)")
        except CudaError as exc:  # no stream memory operations here: time ungated from now on (kept until close)
            self.unavailable = str(exc)
            log.warning("timing launches without the gate (%s): a small kernel's time includes its submission", exc)
            return 0
        self._ticket = ticket
        with self._cond:
            self._held = ticket
            if self._backstop is None:
                self._backstop = threading.Thread(target=self._watch, name="mneme-launch-gate", daemon=True)
                self._backstop.start()
            self._cond.notify_all()
        return ticket

    def release(self, ticket: int) -> None:
        """Let the stream held for `ticket` (and every earlier one) run; a plain store that cannot fail."""
        if not ticket:
            return
        with self._cond:
            if self._counter is not None:
                self._counter.value = ticket
            if self._held == ticket:
                self._held = 0
                self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while self._counter is not None:
                if not self._held:
                    self._cond.wait()
                    continue
                ticket = self._held
                if self._cond.wait_for(lambda: self._held != ticket or self._counter is None, BACKSTOP_S):
                    continue
                self._counter.value = ticket
                self._held = 0
                self.late += 1
                if self.late >= 2:  # once may be a first launch's load; twice, the launches wait for their stream
                    self.unavailable = "launches waited for their own held stream (the backstop released them)"
                log.warning(
                    "a timed launch waited for its own held stream; released after %.1f s (%s)",
                    BACKSTOP_S,
                    self.unavailable or "its time includes the wait",
                )

    def close(self) -> None:
        """Free the counter; the caller has synchronized every stream that waited on it."""
        with self._cond:
            ptr, self.ptr, self._counter, self._held = self.ptr, 0, None, 0
            self._cond.notify_all()
        if ptr:
            check(driver().cuMemFreeHost(ptr), "cuMemFreeHost (launch gate)")
