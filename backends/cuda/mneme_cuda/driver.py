"""Thin access to the CUDA driver through NVIDIA's `cuda-bindings`: loading, errors, probing.

Nothing here initializes CUDA at import: a machine without a driver, or without
`cuda-bindings`, can import the plugin and ask `probe()` why the backend is unusable.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from typing import Any

import attrs

from mneme.core.errors import BackendUnavailable, ExperimentError, MnemeError
from mneme.core.native_loader import NativeLoader

log = logging.getLogger(__name__)

# Errors after which the context is unusable: every later call in the process fails too.
STICKY_ERRORS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_TRAP",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    }
)


@attrs.frozen
class Probe:
    """What this machine offers the CUDA backend."""

    usable: bool
    reason: str = ""
    device_count: int = 0
    driver_version: int = 0


def driver() -> Any:
    """The `cuda.bindings.driver` module, or BackendUnavailable saying how to get it."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:
        raise BackendUnavailable(
            f"cuda-bindings is not installed ({exc}); install it with: pip install 'cuda-bindings>=13'"
        ) from exc
    return cu


def error_name(err: Any) -> str:
    name = getattr(err, "name", None)
    return name if isinstance(name, str) else str(err)


def error_text(err: Any) -> str:
    cu = driver()
    try:
        _, text = cu.cuGetErrorString(err)
        text = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # the string is a courtesy; never let it hide the error itself
        text = ""
    return f"{error_name(err)}: {text}" if text else error_name(err)


def check(result: tuple, what: str) -> Any:
    """Unpack a cuda-bindings result tuple; raise MnemeError naming `what` on failure."""
    cu = driver()
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(err, what)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


class CudaError(MnemeError):
    """A CUDA driver call failed; `name` is the CUresult name (CUDA_ERROR_...)."""

    def __init__(self, err: Any, what: str):
        self.err = err
        self.name = error_name(err)
        self.sticky = self.name in STICKY_ERRORS
        super().__init__(f"{what} failed: {error_text(err)}")


def fault(exc: CudaError, kernel: str) -> ExperimentError:
    """The ExperimentError for a kernel that faulted (a sticky error)."""
    return ExperimentError(
        f"kernel {kernel!r} faulted ({exc.name}): {exc}. The CUDA context of this process is now unusable "
        "(a sticky error); run the next experiment in a fresh process",
        kind="fault",
    )


_INT_P = ctypes.POINTER(ctypes.c_int)
#: The driver through ctypes, for the probes that must not import cuda-bindings (`mneme plugins`).
LIBCUDA = NativeLoader(
    "the CUDA driver",
    lambda: "libcuda.so.1",
    {
        "cuInit": (ctypes.c_int, [ctypes.c_uint]),
        "cuGetErrorName": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
        "cuDriverGetVersion": (ctypes.c_int, [_INT_P]),
        "cuDeviceGetCount": (ctypes.c_int, [_INT_P]),
    },
    remedy="install the NVIDIA driver",
)  # the version is judged after cuInit (_judge)


def _libcuda_present() -> str:
    """Empty when libcuda.so.1 loads; else the loader's message."""
    return LIBCUDA.try_load()[1]


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """Check, once per process, for a driver, the bindings and a device (initializes CUDA when present).

    Worker pools that fork must start their workers before the parent probes; prefer the
    "spawn" or "forkserver" start methods, which CUDA requires anyway.
    """
    missing = _libcuda_present()
    if missing:
        return Probe(False, missing)
    try:
        cu = driver()
    except BackendUnavailable as exc:
        return Probe(False, str(exc))
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # the bindings' own loader failed (e.g. a driver too old for them)
        return Probe(False, f"cuda-bindings could not load the CUDA driver: {exc}")
    if err != cu.CUresult.CUDA_SUCCESS:
        if error_name(err) == "CUDA_ERROR_NO_DEVICE":
            return Probe(False, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)")
        return Probe(False, f"cuInit failed ({error_text(err)}); check the driver with nvidia-smi")
    err, version = cu.cuDriverGetVersion()
    err2, count = cu.cuDeviceGetCount()
    if err2 != cu.CUresult.CUDA_SUCCESS:
        count = 0
    return _judge(int(count), int(version))


def _judge(count: int, version: int) -> Probe:
    if count == 0:
        return Probe(False, "no CUDA device", 0, version)
    if version < 13000:
        return Probe(
            False,
            f"the CUDA driver supports CUDA {format_version(version)}; mneme-cuda needs a CUDA 13 driver",
            count,
            version,
        )
    return Probe(True, "", count, version)


@functools.lru_cache(maxsize=1)
def probe_without_bindings() -> Probe:
    """`probe` through ctypes alone, importing no cuda-bindings: what `mneme plugins` shows.

    A driver the bindings themselves cannot load is found only by `probe`, when the backend is used.
    """
    lib, why = LIBCUDA.try_load()
    if lib is None:
        return Probe(False, why)
    import importlib.util

    try:
        bindings = importlib.util.find_spec("cuda.bindings")
    except (ImportError, ValueError):
        bindings = None
    if bindings is None:
        return Probe(False, "cuda-bindings is not installed; install it with: pip install 'cuda-bindings>=13'")
    err = lib.cuInit(0)
    if err != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(err, ctypes.byref(name))
        text = (name.value or b"").decode() or f"CUresult {err}"
        if text == "CUDA_ERROR_NO_DEVICE":
            return Probe(False, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)")
        return Probe(False, f"cuInit failed ({text}); check the driver with nvidia-smi")
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        count.value = 0
    return _judge(count.value, version.value)


def listing_availability():
    """The backend's availability for `mneme plugins` (`probe_without_bindings`)."""
    from mneme.core.availability import Availability

    found = probe_without_bindings()
    return Availability(found.usable, found.reason)


def require() -> Probe:
    found = probe()
    if not found.usable:
        raise BackendUnavailable(f"the cuda backend is unusable here: {found.reason}")
    return found


def format_version(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


def kernel_module_version() -> str:
    """The NVIDIA kernel module's version (e.g. 580.159.04), or empty."""
    path = "/proc/driver/nvidia/version"
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        for word in handle.read().split():
            parts = word.split(".")
            if len(parts) >= 2 and all(p.isdigit() for p in parts):
                return word
    return ""
