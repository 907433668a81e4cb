"""AMD's official Python bindings (`hip-python`, module ``hip.hip``), loaded lazily.

The plugin imports, lists and explains itself on a machine without ROCm: nothing here touches
``hip`` until a device is asked for. hip-python functions return tuples whose first item is a
``hipError_t``; `call` turns that into the remaining value(s) or a `MnemeError` naming the call.
"""

from __future__ import annotations

import functools
from typing import Any

from mneme.core.availability import Availability
from mneme.core.errors import BackendUnavailable, MnemeError

#: The ROCm line the device layer is written for: HIP virtual memory management needs ROCm 6.
MIN_RUNTIME = 60000000  # hipRuntimeGetVersion's encoding: major * 10_000_000 + minor * 100_000 + patch
INSTALL_HINT = "pip install 'mneme-hip[device]' (hip-python of your ROCm 6.x line)"


class HipError(MnemeError):
    """A HIP runtime call failed; the message names the call and HIP's error."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


@functools.lru_cache(maxsize=1)
def _import() -> tuple[Any, str]:
    try:
        from hip import hip  # noqa: PLC0415 - lazy on purpose: ROCm is optional
    except ImportError as exc:
        return None, f"hip-python is not installed ({exc}); {INSTALL_HINT}"
    except OSError as exc:  # the bindings load libamdhip64 when imported on some versions
        return None, f"the HIP runtime library libamdhip64 could not be loaded ({exc}); install ROCm 6.x"
    from mneme_hip import rocprof

    rocprof.kernel_timer()  # a rocprofiler-sdk tool registers before the runtime's first call, or never
    return hip, ""


def bindings() -> Any:
    """The ``hip.hip`` module; `BackendUnavailable` saying why when it cannot be used."""
    hip, reason = _import()
    if hip is None:
        raise BackendUnavailable(f"the hip backend cannot run here: {reason}")
    return hip


def call(what: str, result: Any) -> Any:
    """The value(s) of a hip-python call ``(err, *values)``; raises `HipError` unless hipSuccess."""
    hip = bindings()
    if not isinstance(result, tuple):
        result = (result,)
    err, values = result[0], result[1:]
    if int(err) != int(hip.hipError_t.hipSuccess):
        raise HipError(f"{what} failed: {getattr(err, 'name', err)}", int(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def runtime_version_text(version: int) -> str:
    """``60400000`` -> ``6.4.0`` (hipRuntimeGetVersion's encoding)."""
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


def availability() -> Availability:
    """Usable when hip-python loads, the runtime is ROCm 6 or newer, and an AMD GPU is present."""
    hip, reason = _import()
    if hip is None:
        return Availability(False, reason)
    try:
        err, version = hip.hipRuntimeGetVersion()
    except Exception as exc:  # noqa: BLE001 - the library is missing or not loadable
        return Availability(False, f"the HIP runtime library libamdhip64 is not loadable ({exc}); install ROCm 6.x")
    if int(err) != 0:
        return Availability(
            False,
            f"the HIP runtime library libamdhip64 is not usable (hipRuntimeGetVersion: "
            f"{getattr(err, 'name', err)}); install ROCm 6.x",
        )
    if version < MIN_RUNTIME:
        return Availability(
            False,
            f"the HIP runtime here is ROCm {runtime_version_text(version)}; the device "
            "layer needs ROCm 6.x (HIP virtual memory management)",
        )
    err, count = hip.hipGetDeviceCount()
    if int(err) != 0 or count == 0:
        return Availability(
            False, f"no AMD GPU: hipGetDeviceCount returned {getattr(err, 'name', err)} with {count or 0} devices"
        )
    return Availability(True)
