"""`mneme.device` of the original Mneme API: the current device, loaded modules and their kernels.

The original's native runtime becomes Mneme's backend plugins: the current backend is the
first usable of cuda, hip and host. `DeviceFunction.profile` restores a recorded prologue
at its recorded addresses and times the kernel there; launches made while a `mneme.profile`
session is open for the kernel are timed by the device and reported to it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from mneme.compat import profile
from mneme.compat.errors import runtime_errors
from mneme.compat.types import NS_PER_SECOND, dim3

_lock = threading.Lock()
_state: dict[str, Any] = {"backend": None, "index": 0, "device": None, "mapped": set(), "modules": 0}


def _backend():
    from mneme.core.backend import default_backend

    with _lock:
        if _state["backend"] is None:
            with runtime_errors():
                _state["backend"] = default_backend()
        return _state["backend"]


def _device():
    backend = _backend()
    with _lock:
        if _state["device"] is None:
            with runtime_errors():
                _state["device"] = backend.open_device(_state["index"])
            _state["mapped"] = set()
        return _state["device"]


def get_device_count() -> int:
    return _backend().device_count()


def get_device_arch() -> str:
    """The current device's architecture string (`sm_90`, `gfx942`; the CPU's on the host backend)."""
    return _backend().arch(_state["index"])


def set_device(dev_id: int) -> None:
    """Make `dev_id` the current device (the previous one is closed)."""
    if not 0 <= dev_id < get_device_count():
        raise RuntimeError(f"device {dev_id} does not exist; this machine has {get_device_count()}")
    with _lock:
        if _state["device"] is not None and dev_id != _state["index"]:
            _state["device"].close()
            _state["device"] = None
        _state["index"] = dev_id


class MemBuffer:
    """A compiled device object (what `proteus.jit.codegen_object` returns)."""

    def __init__(self, binary):
        self.binary = binary

    def __len__(self) -> int:
        return len(self.binary.data)

    def __bytes__(self) -> bytes:
        return bytes(self.binary.data)


class DeviceModule:
    """A device object loaded on the current device; unloading it invalidates its functions."""

    def __init__(self, module_ptr):
        """`module_ptr`: the backend's loaded kernel (Mneme's handle where the original had a native pointer)."""
        self._binary = module_ptr.binary
        self._loaded = module_ptr
        self._functions: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def from_MemBuffer(cls, buffer: MemBuffer) -> DeviceModule:  # noqa: N802 - the original's name
        if not isinstance(buffer, MemBuffer):
            raise TypeError(f"expected a MemBuffer from codegen_object, got {type(buffer).__name__}")
        device = _device()
        with runtime_errors():
            module = cls(device.load(buffer.binary))
        with _lock:
            _state["modules"] += 1
        return module

    def get_function(self, kernel_name: str) -> DeviceFunction:
        self._check()
        if kernel_name != self._binary.kernel_name:
            raise RuntimeError(f"the module holds kernel {self._binary.kernel_name!r}, not {kernel_name!r}")
        function = DeviceFunction(self._loaded, self, kernel_name)
        self._functions.add(function)
        return function

    def _check(self) -> None:
        if self._loaded is None:
            raise RuntimeError("the device module was unloaded")

    def unload(self) -> None:
        """Unload; the last module unloaded closes the device, releasing the recorded state it restored."""
        if self._loaded is not None:
            for function in list(self._functions):
                function.invalidate()
            self._loaded.close()
            self._loaded = None
            with _lock:
                _state["modules"] -= 1
                if _state["modules"] == 0 and _state["device"] is not None:
                    _state["device"].close()
                    _state["device"] = None

    close = unload

    def __enter__(self) -> DeviceModule:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        self.unload()
        return False


class DeviceFunction:
    """A kernel of a loaded `DeviceModule`."""

    def __init__(self, func_ptr, module_ref: DeviceModule, kernel_name: str):
        """`func_ptr`: the backend's loaded kernel; `module_ref`: the owning module (held weakly)."""
        self._func = func_ptr
        self._module = weakref.ref(module_ref)
        self.kernel_name = kernel_name

    def invalidate(self) -> None:
        """Mark the handle unusable (its module was unloaded); using it then raises RuntimeError."""
        self._func = None

    def __del__(self) -> None:
        self._func = None  # the module owns the kernel; nothing to free, and never raise here

    def _kernel(self):
        module = self._module()
        if self._func is None or module is None or module._loaded is None:
            raise RuntimeError(f"kernel {self.kernel_name!r}: its module was unloaded; load it again")
        return self._func

    def launch(self, grid: dim3, block: dim3, args: bytes = b"", shared_mem: int = 0) -> None:
        """Run the kernel once; timed by the device when a `mneme.profile` session is open for it."""
        kernel = self._kernel()
        grid, block = dim3.of(grid).to_core(), dim3.of(block).to_core()
        with runtime_errors():
            if profile.profiling(kernel.binary.kernel_name):
                (seconds,) = _device().time(kernel, grid, block, shared_mem, args, 1, cache="warm")
                profile.record(kernel.binary.kernel_name, [round(seconds * NS_PER_SECOND)])
            else:
                _device().launch(kernel, grid, block, shared_mem, args)

    def profile(
        self,
        grid: dim3,
        block: dim3,
        prologue_state,
        epilogue_state=None,
        shared_mem_size: int = 0,
        iterations: int = 5,
    ) -> list[int]:
        """Run the kernel `iterations` times on the recorded prologue state; nanoseconds per run."""
        kernel = self._kernel()
        device = _device()
        prologue_state.open()
        regions = prologue_state.regions()
        with runtime_errors():
            for addr, data in regions:
                if (addr, len(data)) not in _state["mapped"]:
                    device.map(addr, len(data))
                    _state["mapped"].add((addr, len(data)))
            for name, data in prologue_state.globals().items():
                device.write_global(kernel, name, data)

            def restore() -> None:
                for addr, data in regions:
                    device.write(addr, data)

            times = device.time(
                kernel,
                dim3.of(grid).to_core(),
                dim3.of(block).to_core(),
                shared_mem_size,
                prologue_state.packed_args,
                iterations,
                before_each=restore,
            )
        durations = [round(t * NS_PER_SECOND) for t in times]
        profile.record(kernel.binary.kernel_name, durations)
        return durations

    @property
    def reg_usage(self) -> int:
        return max(self._kernel().resources.registers, 0)  # unknown (-1 in Mneme) is 0, as in the original

    @property
    def local_mem(self) -> int:
        return max(self._kernel().resources.local_mem, 0)  # unknown (-1 in Mneme) is 0, as in the original

    @property
    def const_mem(self) -> int:
        return max(self._kernel().resources.const_mem, 0)  # unknown (-1 in Mneme) is 0, as in the original
