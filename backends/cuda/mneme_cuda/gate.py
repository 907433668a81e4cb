"""The launch gate: holds a stream until a timed launch and its two events are all queued.

On an idle stream a start event fires as soon as it is queued and the kernel only once the host
has submitted it, so CUDA events around a launch would time the host's submission too (Python's
launch path takes longer than a small kernel). The gate makes the stream wait
(`cuStreamWaitValue32`, cyclic greater-or-equal) for a counter in page-locked, device-mapped
host memory, which the host raises with a plain store once start event, launch and stop event
are queued: the GPU then runs the three back to back, as the CUDA recorder does inside the
application (docs/design/recording.md, "Timing inside the application"). The counter only grows
and the store cannot fail, so a release is never missed and the stream never hangs.
"""

from __future__ import annotations

import ctypes
import logging

from mneme_cuda.driver import CudaError, check, driver

log = logging.getLogger(__name__)

DEVICEMAP = 0x02  # CU_MEMHOSTALLOC_DEVICEMAP (cuda.h), where the bindings lack the name


class LaunchGate:
    """One mapped counter in the current context. `unavailable` says why the gate cannot be had ("" when it can).

    Use `hold(stream)` before queuing what must run back to back, then `release(ticket)`, in a
    `finally` so that an error in between still lets the stream go on.
    """

    def __init__(self):
        cu = driver()
        self.ptr = 0
        self.unavailable = ""
        self._ticket = 0
        self._counter: ctypes.c_uint32 | None = None
        try:
            self.ptr = int(check(cu.cuMemHostAlloc(4, getattr(cu, "CU_MEMHOSTALLOC_DEVICEMAP", DEVICEMAP)),
                                 "cuMemHostAlloc of the launch gate's mapped counter"))  # fmt: skip
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
        return ticket

    def release(self, ticket: int) -> None:
        """Let the stream held for `ticket` (and every earlier one) run; a plain store that cannot fail."""
        if ticket and self._counter is not None:
            self._counter.value = ticket

    def close(self) -> None:
        """Free the counter; the caller has synchronized every stream that waited on it."""
        if self.ptr:
            ptr, self.ptr, self._counter = self.ptr, 0, None
            check(driver().cuMemFreeHost(ptr), "cuMemFreeHost (launch gate)")
