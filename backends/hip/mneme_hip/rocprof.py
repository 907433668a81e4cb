"""The kernel timer of the HIP device: each timed dispatch's own start and end from rocprofiler-sdk.

hipEvent pairs around a launch also time the front end's work between the events; the kernel
dispatch records of rocprofiler-sdk's buffer tracing hold the kernel alone (as CUPTI's kernel
records do on CUDA). librocprofiler-sdk is opened at first use by the core's loader
(`mneme.core.native_loader`: version 0.4 or newer, every function declared; $MNEME_ROCPROFILER_SDK_LIB,
else $ROCM_PATH/lib, /opt/rocm/lib, the loader's search) and registered as a tool with
``rocprofiler_force_configure``, which only works before the HIP runtime initializes: the device
asks for the timer before its first HIP call. Where any step fails, timing uses hipEvents and
`why` says which step. Written against rocprofiler-sdk's documented C API (ROCm 6.2 and later:
fwd.h, registration.h, buffer.h, buffer_tracing.h); it has not run on an AMD GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import threading
from pathlib import Path

import attrs

from mneme.core import envvars
from mneme.core.errors import MnemeError
from mneme.core.native_loader import NativeLibraryError, NativeLoader

TIMER = "rocprofiler"
TIMERS = ("auto", TIMER, "hip-event", "host-clock")
CATEGORY_TRACING = 1  # rocprofiler_buffer_category_t
KIND_KERNEL_DISPATCH = 11  # rocprofiler_buffer_tracing_kind_t: ROCPROFILER_BUFFER_TRACING_KERNEL_DISPATCH
POLICY_LOSSLESS = 2  # rocprofiler_buffer_policy_t
STATUS_CONFIGURATION_LOCKED = 4  # ROCPROFILER_STATUS_ERROR_CONFIGURATION_LOCKED
BUFFER_BYTES, WATERMARK_BYTES = 1 << 20, 7 << 17

# rocprofiler_buffer_tracing_kernel_dispatch_record_t: size u64, kind i32, operation i32, correlation
# id (internal u64, external u64), thread id u64, start and end timestamps (ns) u64, then the
# dispatch info: size, agent, queue, kernel id, dispatch id (u64 each), private and group segment
# sizes (u32), workgroup size and grid size (3 x u32 each), 56 reserved bytes.
RECORD = struct.Struct("<QiiQQQQQQQQQQIIIIIIII")
RECORD_BYTES = 184


@attrs.frozen
class Dispatch:
    """One kernel dispatch as rocprofiler-sdk reported it; times in nanoseconds of its clock."""

    dispatch_id: int
    kernel_id: int
    start_ns: int
    end_ns: int
    workgroup: tuple[int, int, int]
    grid: tuple[int, int, int]  # in work-items, as the AQL packet holds it

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def header_is_dispatch(hash_value: int) -> bool:
    """Whether a record header's (category | kind << 32) names a kernel dispatch tracing record."""
    return hash_value == CATEGORY_TRACING | (KIND_KERNEL_DISPATCH << 32)


def parse_dispatch(payload: bytes) -> Dispatch:
    """A kernel dispatch record from its bytes (the layout above); ValueError when it is not one."""
    if len(payload) < RECORD.size:
        raise ValueError(f"a kernel dispatch record has at least {RECORD.size} bytes; got {len(payload)}")
    (
        size,
        kind,
        _op,
        _corr,
        _ext,
        _thread,
        start,
        end,
        _info_size,
        _agent,
        _queue,
        kernel_id,
        dispatch_id,
        _private,
        _group,
        wx,
        wy,
        wz,
        gx,
        gy,
        gz,
    ) = RECORD.unpack_from(payload)
    if kind != KIND_KERNEL_DISPATCH or size < RECORD.size:
        raise ValueError(f"not a kernel dispatch record (kind {kind}, size {size})")
    return Dispatch(dispatch_id, kernel_id, start, end, (wx, wy, wz), (gx, gy, gz))


def runs_of(
    dispatches: list[Dispatch], block: tuple[int, int, int], grid: tuple[int, int, int], iterations: int
) -> list[float] | None:
    """Seconds of each timed run: the dispatches of this geometry in dispatch order; None unless exactly `iterations`."""
    work_items = tuple(g * b for g, b in zip(grid, block, strict=True))
    mine = sorted((d for d in dispatches if d.workgroup == block and d.grid == work_items), key=lambda d: d.dispatch_id)
    if len(mine) != iterations or any(d.end_ns < d.start_ns for d in mine):
        return None
    return [d.seconds for d in mine]


def library_path() -> str | None:
    """librocprofiler-sdk to open: $MNEME_ROCPROFILER_SDK_LIB as given, else ROCm's, else the loader's; None: none."""
    explicit = envvars.get("MNEME_ROCPROFILER_SDK_LIB")
    if explicit:
        return explicit
    roots = [os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    for root in filter(None, roots):
        for name in ("librocprofiler-sdk.so.1", "librocprofiler-sdk.so"):
            if (Path(root) / "lib" / name).exists():
                return str(Path(root) / "lib" / name)
    return ctypes.util.find_library("rocprofiler-sdk")


class _Id(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64)]


class _ConfigureResult(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("initialize", ctypes.c_void_p),
        ("finalize", ctypes.c_void_p),
        ("tool_data", ctypes.c_void_p),
    ]


class _Header(ctypes.Structure):
    _fields_ = [("hash", ctypes.c_uint64), ("payload", ctypes.c_void_p)]


_BUFFER_CB = ctypes.CFUNCTYPE(
    None, _Id, _Id, ctypes.POINTER(ctypes.POINTER(_Header)), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64
)
_INIT_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_FINI_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CONFIGURE_CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_void_p)


class KernelTimer:
    """A rocprofiler-sdk tool in this process: one context tracing kernel dispatches into one buffer."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.context, self.buffer = _Id(), _Id()
        self.dispatches: list[Dispatch] = []
        self.dropped = 0
        self.setup_error = ""
        self._lock = threading.Lock()
        # ctypes callbacks and the configure result must outlive every call rocprofiler makes into them
        self._on_buffer = _BUFFER_CB(self._records)
        self._on_init = _INIT_CB(self._initialize)
        self._on_fini = _FINI_CB(lambda _data: None)
        self._result = _ConfigureResult(
            ctypes.sizeof(_ConfigureResult),
            ctypes.cast(self._on_init, ctypes.c_void_p),
            ctypes.cast(self._on_fini, ctypes.c_void_p),
            None,
        )
        self._on_configure = _CONFIGURE_CB(lambda *_: ctypes.addressof(self._result))  # its address

    def _call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise OSError(f"{name} returned status {status}")

    def _initialize(self, _finalize, _data) -> int:
        """The tool's initialize: a context, its buffer and kernel dispatch tracing into it (not started)."""
        try:
            self._call("rocprofiler_create_context", ctypes.byref(self.context))
            self._call(
                "rocprofiler_create_buffer",
                self.context,
                ctypes.c_size_t(BUFFER_BYTES),
                ctypes.c_size_t(WATERMARK_BYTES),
                ctypes.c_int(POLICY_LOSSLESS),
                self._on_buffer,
                None,
                ctypes.byref(self.buffer),
            )
            self._call(
                "rocprofiler_configure_buffer_tracing_service",
                self.context,
                ctypes.c_int(KIND_KERNEL_DISPATCH),
                None,
                ctypes.c_size_t(0),
                self.buffer,
            )
        except (OSError, AttributeError) as exc:
            self.setup_error = str(exc)
            return 1  # rocprofiler then leaves this tool out
        return 0

    def _records(self, _context, _buffer, headers, count, _data, dropped) -> None:
        with self._lock:
            self.dropped += int(dropped)
            for k in range(int(count)):
                header = headers[k].contents
                if header_is_dispatch(int(header.hash)) and header.payload:
                    self.dispatches.append(parse_dispatch(ctypes.string_at(header.payload, RECORD_BYTES)))

    def register(self) -> None:
        """Register as a tool (before the HIP runtime initializes); OSError saying why not."""
        status = self.lib.rocprofiler_force_configure(self._on_configure)
        if status == STATUS_CONFIGURATION_LOCKED:
            raise OSError(
                "rocprofiler-sdk was configured already (the HIP runtime started before the timer, or "
                "another tool such as rocprofv3 owns it)"
            )
        if status != 0:
            raise OSError(f"rocprofiler_force_configure returned status {status}")
        if self.setup_error or not self.context.handle:
            raise OSError(
                f"rocprofiler-sdk did not set up kernel tracing: {self.setup_error or 'initialize never ran'}"
            )

    def start(self) -> None:
        self._call("rocprofiler_start_context", self.context)

    def stop(self) -> None:
        self._call("rocprofiler_stop_context", self.context)

    def take(self) -> list[Dispatch]:
        """Flush the buffer and hand over (and forget) every dispatch record received so far."""
        self._call("rocprofiler_flush_buffer", self.buffer)
        with self._lock:
            taken, self.dispatches = self.dispatches, []
        return taken


#: The oldest rocprofiler-sdk this timer is written against (ROCm 6.2's).
OLDEST_VERSION = (0, 4)


def _version(lib: ctypes.CDLL) -> str | None:
    """None for rocprofiler-sdk OLDEST_VERSION or newer; else what it is."""
    get = lib.rocprofiler_get_version
    u32p = ctypes.POINTER(ctypes.c_uint32)
    get.restype, get.argtypes = ctypes.c_int, [u32p, u32p, u32p]
    major, minor, patch = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
    if get(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch)) != 0:
        return "rocprofiler_get_version failed"
    found = (major.value, minor.value)
    if found < OLDEST_VERSION:
        return (
            f"it is rocprofiler-sdk {major.value}.{minor.value}.{patch.value}; the kernel timer needs "
            f"{'.'.join(map(str, OLDEST_VERSION))} or newer"
        )
    return None


def _locate() -> str:
    path = library_path()
    if path is None:
        raise MnemeError("librocprofiler-sdk was not found")
    return path


_ID_P = ctypes.POINTER(_Id)
LOADER = NativeLoader(
    "rocprofiler-sdk (the kernel timer)",
    _locate,
    {
        "rocprofiler_force_configure": (ctypes.c_int, [_CONFIGURE_CB]),
        "rocprofiler_create_context": (ctypes.c_int, [_ID_P]),
        "rocprofiler_create_buffer": (
            ctypes.c_int,
            [_Id, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, _BUFFER_CB, ctypes.c_void_p, _ID_P],
        ),
        "rocprofiler_configure_buffer_tracing_service": (
            ctypes.c_int,
            [_Id, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, _Id],
        ),
        "rocprofiler_start_context": (ctypes.c_int, [_Id]),
        "rocprofiler_stop_context": (ctypes.c_int, [_Id]),
        "rocprofiler_flush_buffer": (ctypes.c_int, [_Id]),
    },
    version=_version,
    remedy="dispatches are timed with hipEvents meanwhile; install ROCm 6.2+'s rocprofiler-sdk or set "
    "MNEME_ROCPROFILER_SDK_LIB to its librocprofiler-sdk.so",
)

_timer: tuple[KernelTimer | None, str] | None = None


def kernel_timer() -> tuple[KernelTimer | None, str]:
    """(the process's kernel timer, "") or (None, why it cannot be had); set up once per process."""
    global _timer
    if _timer is None:
        lib, why = LOADER.try_load()
        if lib is None:
            _timer = (None, why)
            return _timer
        try:
            timer = KernelTimer(lib)
            timer.register()
            _timer = (timer, "")
        except OSError as exc:
            _timer = (None, str(NativeLibraryError(LOADER.what, library_path(), str(exc), LOADER.remedy)))
    return _timer
