"""`mneme.profile` of the original Mneme API: start/stop timing around device work.

Mneme's backends time kernels themselves (`DeviceFunction.profile`, the executors); these
calls keep the original's interface and measure the host wall time between start and stop
in nanoseconds, which is what a script that brackets its own launches gets.
"""

from __future__ import annotations

import itertools
import threading
import time

_lock = threading.Lock()
_started: dict[int, tuple[str, int]] = {}
_ids = itertools.count(1)
_initialized = False


def init_profiler() -> None:
    """Initialize once per process (after fork), as the original requires."""
    global _initialized
    _initialized = True


def gpu_profile_start(kernel_name: str) -> int:
    if not _initialized:
        raise RuntimeError("call init_profiler() first")
    with _lock:
        correlation = next(_ids)
        _started[correlation] = (kernel_name, time.perf_counter_ns())
    return correlation


def gpu_profile_stop(correlation_id: int) -> list[int]:
    """Nanoseconds since the matching `gpu_profile_start`, as a one-element list."""
    end = time.perf_counter_ns()
    with _lock:
        if correlation_id not in _started:
            raise RuntimeError(f"no profiling started with id {correlation_id}")
        _name, start = _started.pop(correlation_id)
    return [end - start]
