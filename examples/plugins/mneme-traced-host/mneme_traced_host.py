"""A third-party Mneme backend: the host backend, with one JSON line per launch (the plugin author's guide's example).

`traced-host` implements the whole Backend/Device/LoadedKernel contract (`mneme.core.backend`)
by delegating to the registry's `host` backend, found through the core's public API
(`get_backend("host")`), and appends ``{"kernel", "grid", "block", "seconds", "timed"}`` per
launch to the file named by ``MNEME_TRACE_FILE`` (default ``mneme-trace.jsonl``). It claims
exactly the architectures the host backend claims and ranks below it (``priority = -1``), so it
runs only when asked for: ``mneme replay --backend traced-host``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import attrs

from mneme.core.backend import (
    HOST_TIMERS,
    Availability,
    Backend,
    Device,
    DeviceBinary,
    LoadedKernel,
    Resources,
    get_backend,
)
from mneme.core.hookspecs import hookimpl

TRACE_ENV = "MNEME_TRACE_FILE"


def _trace(kernel: str, grid: Any, block: Any, seconds: float, timed: bool) -> None:
    """Append one launch; one short write per line, so processes sharing the file do not interleave."""
    line = json.dumps(
        {
            "kernel": kernel,
            "grid": [grid.x, grid.y, grid.z],
            "block": [block.x, block.y, block.z],
            "seconds": seconds,
            "timed": timed,
        }
    )
    with open(os.environ.get(TRACE_ENV, "mneme-trace.jsonl"), "a", encoding="utf-8") as out:
        out.write(line + "\n")


class TracedKernel(LoadedKernel):
    """A host kernel, loaded by the host device; unloading this one unloads it."""

    def __init__(self, inner: LoadedKernel):
        super().__init__(inner.binary)
        self.inner = inner

    def _release(self) -> None:
        self.inner.close()

    @property
    def resources(self) -> Resources:
        return self.inner.resources


class TracedDevice(Device):
    """A host device whose launches (and timed runs) are appended to the trace file."""

    def __init__(self, inner: Device):
        super().__init__(attrs.evolve(inner.info, backend=TracedHostBackend.name))
        self.inner = inner
        self.timers = inner.timers

    def _release(self) -> None:
        self.inner.close()

    def reserve(self, va_addr: int, va_size: int) -> None:
        self._check_open()
        self.inner.reserve(va_addr, va_size)

    def map(self, addr: int, size: int) -> None:
        self._check_open()
        self.inner.map(addr, size)

    def write(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        self._check_open()
        self.inner.write(addr, data)

    def read(self, addr: int, size: int) -> bytes:
        self._check_open()
        return self.inner.read(addr, size)

    def copy(self, dst: int, src: int, size: int) -> None:
        self._check_open()
        self.inner.copy(dst, src, size)

    def load(self, binary: DeviceBinary) -> TracedKernel:
        self._check_open()
        return TracedKernel(self.inner.load(binary))

    def launch(self, kernel: LoadedKernel, grid: Any, block: Any, shared_mem: int, args: bytes) -> None:
        self._check_open()
        kernel.check_open()
        start = time.perf_counter()
        self.inner.launch(kernel.inner, grid, block, shared_mem, args)
        _trace(kernel.binary.kernel_name, grid, block, time.perf_counter() - start, timed=False)

    def time(
        self,
        kernel: LoadedKernel,
        grid: Any,
        block: Any,
        shared_mem: int,
        args: bytes,
        iterations: int,
        before_each: Callable[[], None] | None = None,
        cache: str = "flushed",
        timer: str = "auto",
    ) -> list[float]:
        """The host device's timed runs (its timers, its cache flush), each traced with the seconds it measured."""
        self._check_open()
        kernel.check_open()
        times = self.inner.time(kernel.inner, grid, block, shared_mem, args, iterations, before_each, cache, timer)
        self.timer_used = self.inner.timer_used
        for seconds in times:
            _trace(kernel.binary.kernel_name, grid, block, seconds, timed=True)
        return times

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        self._check_open()
        self.inner.write_global(kernel.inner, name, data)

    def read_global(self, kernel: LoadedKernel, name: str, size: int) -> bytes:
        self._check_open()
        return self.inner.read_global(kernel.inner, name, size)


class TracedHostBackend(Backend):
    """`traced-host`: the host backend, every launch traced. Never the default (lower priority than host)."""

    name = "traced-host"
    priority = -1  # below host's 0: chosen only by name
    timers = HOST_TIMERS

    def __init__(self) -> None:
        self.host = get_backend("host")
        self.emits = self.host.emits
        self.image_kinds = self.host.image_kinds

    def availability(self) -> Availability:
        return self.host.availability()

    def device_count(self) -> int:
        return self.host.device_count()

    def arch(self, index: int = 0) -> str:
        return self.host.arch(index)

    def claims(self, arch: str) -> bool:
        return self.host.claims(arch)

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return self.host.target_machine(arch, opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        return self.host.toolchain(arch)  # the host's builds, so they share its build cache

    def optimize(self, module: Any, config: Any, arch: str) -> float:
        return self.host.optimize(module, config, arch)

    def compile(
        self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None
    ) -> DeviceBinary:
        return self.host.compile(module, kernel_name, config, arch, emit=emit)  # a host binary, for the host device

    def open_device(self, index: int = 0) -> TracedDevice:
        return TracedDevice(self.host.open_device(index))

    def fingerprint(self) -> dict[str, str]:
        return {**self.host.fingerprint(), "backend": self.name}


@hookimpl
def mneme_backends():
    return [TracedHostBackend]
