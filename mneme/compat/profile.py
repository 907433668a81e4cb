"""`mneme.profile` of the original Mneme API: device timings of a kernel's launches between start and stop.

`gpu_profile_start(kernel_name)` opens a session; every launch of that kernel made through
`mneme.device` (`DeviceFunction.launch`, `DeviceFunction.profile`) until
`gpu_profile_stop(id)` is timed by the backend's device layer (`Device.time`: CUPTI's kernel
records or CUDA events on CUDA, the host clock around the host runtime's launch on the host
backend) and reported as one duration in nanoseconds per launch, in launch order.
"""

from __future__ import annotations

import itertools
import threading

_lock = threading.Lock()
_sessions: dict[int, tuple[str, list[int]]] = {}
_ids = itertools.count(1)
_initialized = False


def init_profiler() -> None:
    """Initialize profiling for this process (the original requires it once per process, after fork)."""
    global _initialized
    _initialized = True


def _check_initialized() -> None:
    if not _initialized:
        raise RuntimeError("Profile library is not initialized; call mneme.profile.init_profiler() first")


def gpu_profile_start(kernel_name: str) -> int:
    """Start timing the launches of `kernel_name`; returns the id that `gpu_profile_stop` takes."""
    _check_initialized()
    with _lock:
        correlation = next(_ids)
        _sessions[correlation] = (kernel_name, [])
    return correlation


def gpu_profile_stop(correlation_id: int) -> list[int]:
    """Nanoseconds of each launch of the session's kernel since `gpu_profile_start`; RuntimeError when none ran."""
    _check_initialized()
    with _lock:
        name, records = _sessions.pop(correlation_id, (None, []))
    if name is None:
        raise RuntimeError(f"no profiling session {correlation_id}; use the id gpu_profile_start returned, once")
    if not records:
        raise RuntimeError(
            f"no launch of kernel {name!r} was timed between gpu_profile_start and gpu_profile_stop "
            f"(session {correlation_id}); launch it through mneme.device in between"
        )
    return records


def profiling(kernel_name: str) -> bool:
    """Whether a session is timing `kernel_name` now."""
    with _lock:
        return any(name == kernel_name for name, _ in _sessions.values())


def record(kernel_name: str, durations_ns: list[int]) -> None:
    """Add launch durations of `kernel_name` to every open session of that kernel."""
    with _lock:
        for name, records in _sessions.values():
            if name == kernel_name:
                records.extend(durations_ns)
