"""The kernel timer: each timed launch's duration from the GPU's own start and end timestamps.

CUDA events around a launch time the front end's work between the start event, the launch and
the stop event as well; for a ~1 us kernel that is two thirds of a 3.5 us window, and it varies
from process to process by several percent (docs/design/recording.md, "The kernel timer"). The
kernel records of CUPTI's activity API hold the kernel alone. `native/cupti_timer.h` reads them;
the recorder compiles it in and so does the replay's helper, `native/cuptitime.c`, which this
module builds (it needs CUPTI's headers, cupti.h) and opens with the core's loader
(`mneme.core.native_loader`: its ABI number checked, every function declared). libcupti itself is
opened at run time: $MNEME_CUPTI_LIB, else the CUDA toolkit's, else the checkout's .gpu/lib/cupti
(where `scripts/gpu-suite --prepare` copies it for the GPU machine; `mneme_cuda.libraries`), else the
loader's search.
Where either is missing, timing falls back to CUDA events and says why.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

from mneme.core import envvars
from mneme.core.errors import MnemeError, UsageError
from mneme.core.native import NativeLibrary, c_compiler
from mneme.core.native_loader import Abi, NativeLoader
from mneme_cuda.libraries import CHECKOUT_LIB

log = logging.getLogger(__name__)

#: How launches are timed: "cupti" (kernel timestamps), "events" (CUDA events), "auto" (cupti where it opens).
TIMERS = ("auto", "cupti", "events")
NATIVE = Path(__file__).resolve().parent / "native"
SOURCE = NATIVE / "cuptitime.c"
HEADER = NATIVE / "cupti_timer.h"
FLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-std=gnu11")
LIBRARY = NativeLibrary("mneme_cuptitime", "the kernel timer", (SOURCE,), (HEADER,), FLAGS, cache="cuda-cuptitime")
ABI = 3
TAGS = 1  # mneme_cupti_enable's mode: MCT_TAGS in cupti_timer.h
WINDOWS = 2  # MCT_WINDOWS: kernel records only, a launch's found by its name and a time window (as the recorder)
MATCH_ENV = "MNEME_CUPTI_MATCH"


def cuda_roots() -> list[Path]:
    """The CUDA toolkit folders to look in: $CUDA_PATH, $CUDA_HOME, /usr/local/cuda."""
    roots = [os.environ.get("CUDA_PATH", ""), os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    return [Path(r) for r in roots if r]


def headers() -> Path | None:
    """The folder holding CUPTI's cupti.h, or None."""
    folders = [Path(os.environ["CUPTI_INCLUDE"])] if os.environ.get("CUPTI_INCLUDE") else []
    for root in cuda_roots():
        folders += [root / "include", root / "extras" / "CUPTI" / "include"]
    return next((f for f in folders if (f / "cupti.h").exists()), None)


def cupti_library() -> Path | None:
    """libcupti's path: $MNEME_CUPTI_LIB (as given, so that one that is missing fails to open, naming it),
    the CUDA toolkit's, or the checkout's .gpu/lib/cupti; None: not found (the loader's search then)."""
    explicit = envvars.get("MNEME_CUPTI_LIB")
    if explicit:
        return Path(explicit)
    folders = []
    for root in cuda_roots():
        folders += [root / "lib64", root / "lib", root / "extras" / "CUPTI" / "lib64"]
    folders.append(CHECKOUT_LIB / "cupti")
    for folder in folders:
        found = sorted(folder.glob("libcupti.so.*[0-9]"))
        if found:
            return found[0]
    return None


def library_name() -> str:
    return LIBRARY.name()


def library_path() -> Path | None:
    """The built helper for this source: the build cache, else the checkout's .gpu/lib; None when not built."""
    return LIBRARY.find()


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """Compile cuptitime.c into `out_dir` (default: the build cache); returns the library's path."""
    cc, include = c_compiler(), headers()
    if cc is None:
        raise MnemeError(f"cannot build the kernel timer {SOURCE}: no C compiler; install gcc or set CC")
    if include is None:
        raise MnemeError(
            f"cannot build the kernel timer {SOURCE}: CUPTI's cupti.h is not in the CUDA toolkit "
            "(set CUDA_PATH, or CUPTI_INCLUDE to its folder)"
        )
    return LIBRARY.build(
        lambda sources, out: [*cc.split(), *FLAGS, f"-I{include}", f"-I{NATIVE}", "-o", out, *sources, "-ldl"],
        out_dir,
        force,
    )


class KernelTimer:
    """The GPU's start and end of tagged launches. One per process (CUPTI's buffers are the process's).

    `enable()` once, then for each launch to time `push(id)`, the launch, `pop()`; once the
    launches have run, `take(first, n)` gives the seconds of the launches tagged first .. first + n - 1
    (None for one whose record did not come). Ids only grow: `ids(n)` hands out the next n.
    """

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        self._next = 1
        self._enabled = False
        self.windows = False
        self._warned_clock = False
        self.push = lib.mneme_cupti_push
        self.pop = lib.mneme_cupti_pop

    def why(self) -> str:
        return self._lib.mneme_cupti_why().decode(errors="replace")

    def enable(self) -> None:
        """Turn the records on, once per process, in the mode $MNEME_CUPTI_MATCH names: "windows" (the default:
        the kernel records alone, as the recorder takes them; `window` times each launch) or "tags" (each launch
        tagged by an external correlation id, which also turns on the driver API's records; on the H100 those
        made 2-6 us kernels replay 0.3-0.6 us slower than the recorder timed them: docs/design/recording.md,
        "The kernel timer")."""
        if not self._enabled:
            match = envvars.get(MATCH_ENV) or "windows"
            if match not in ("tags", "windows"):
                raise UsageError(f"${MATCH_ENV}={match!r}: use tags or windows")
            if self._lib.mneme_cupti_enable(WINDOWS if match == "windows" else TAGS) != 0:
                raise MnemeError(f"CUPTI's kernel records could not be turned on: {self.why()}")
            self.windows = match == "windows"
            self._enabled = True

    def window(self, name: str, launch, synchronize) -> float | None:
        """Seconds of the record of kernel `name` (mangled) that came from `launch()` (window mode; the device
        must run nothing else of that name meanwhile); None when none came. What the stream holds
        before (a primed run of the same kernel) is drained and its records delivered first, so the records that
        come after are this launch's: they are found by the order they came in, not by their timestamps, which
        CUPTI converts to its host clock and which in a long-lived process ran up to fall outside the host's
        window around the launch (an H100 tuning process: every run after a minute or so)."""
        synchronize()
        if self._lib.mneme_cupti_flush() != 0:
            return None
        seq = self._lib.mneme_cupti_seq()
        start = self._lib.mneme_cupti_now()
        launch()
        synchronize()
        end = self._lib.mneme_cupti_now()
        if self._lib.mneme_cupti_flush() != 0:
            return None
        ns, first, last = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        found = self._lib.mneme_cupti_take_since(
            name.encode(), seq, ctypes.byref(ns), ctypes.byref(first), ctypes.byref(last)
        )
        if found > 1:  # a run of the same kernel before (a primed run) whose record came late: ours ended last
            log.debug("%d records of %s came after the flush before its timed launch; the latest is its", found, name)
        if found >= 1 and (first.value < start or last.value > end) and not self._warned_clock:
            self._warned_clock = True
            log.info(
                "CUPTI's record of %s lies %.1f us before to %.1f us after the host's window around its launch "
                "(matched by order, not by time)",
                name,
                max(0, start - first.value) * 1e-3,
                max(0, last.value - end) * 1e-3,
            )
        return ns.value * 1e-9 if found >= 1 and ns.value else None

    def ids(self, n: int) -> int:
        first, self._next = self._next, self._next + n
        return first

    def take(self, first: int, n: int) -> list[float | None]:
        """Seconds of the launches tagged first .. first + n - 1, after delivering every record so far
        (all None when CUPTI could not deliver them). What else waits is forgotten: the launches have
        run, so nothing that comes later belongs to a tag still in use."""
        try:
            if self._lib.mneme_cupti_flush() != 0:
                log.warning("CUPTI could not deliver its activity records (cuptiActivityFlushAll failed)")
                return [None] * n
            ns = (ctypes.c_uint64 * n)()
            self._lib.mneme_cupti_take(first, n, ns)
            return [v * 1e-9 if v else None for v in ns]
        finally:
            self.forget()

    def forget(self) -> None:
        self._lib.mneme_cupti_forget()

    def dropped(self) -> int:
        return int(self._lib.mneme_cupti_dropped())

    def seen(self) -> tuple[int, int]:
        """(kernel records, correlation records of ours) delivered so far."""
        kernels, ids = ctypes.c_uint64(), ctypes.c_uint64()
        self._lib.mneme_cupti_seen(ctypes.byref(kernels), ctypes.byref(ids))
        return kernels.value, ids.value


def _locate() -> Path | None:
    """The built helper; built on first use where a C compiler and cupti.h are present."""
    path = library_path()
    if path is None:
        if headers() is None or c_compiler() is None:
            raise MnemeError("it is not built, and building it needs a C compiler and CUPTI's cupti.h")
        path = build()
    return path


def _open_cupti(lib: ctypes.CDLL, _path: str) -> None:
    """Open libcupti itself from the helper (the loader's search when no file is known)."""
    found = cupti_library()
    cupti_path = str(found) if found is not None else ""  # "": the loader's search for libcupti.so.<major>
    if lib.mneme_cupti_open(cupti_path.encode()) != 0:
        raise MnemeError(f"libcupti did not open: {lib.mneme_cupti_why().decode(errors='replace')}")


_U64P = ctypes.POINTER(ctypes.c_uint64)
LOADER = NativeLoader(
    "the kernel timer",
    _locate,
    {
        "mneme_cupti_open": (ctypes.c_int, [ctypes.c_char_p]),
        "mneme_cupti_why": (ctypes.c_char_p, []),
        "mneme_cupti_enable": (ctypes.c_int, [ctypes.c_int]),
        "mneme_cupti_push": (ctypes.c_int, [ctypes.c_uint64]),
        "mneme_cupti_pop": (ctypes.c_int, []),
        "mneme_cupti_flush": (ctypes.c_int, []),
        "mneme_cupti_forget": (None, []),
        "mneme_cupti_dropped": (ctypes.c_uint64, []),
        "mneme_cupti_take": (ctypes.c_size_t, [ctypes.c_uint64, ctypes.c_size_t, _U64P]),
        "mneme_cupti_seen": (None, [_U64P, _U64P]),
        "mneme_cupti_now": (ctypes.c_uint64, []),
        "mneme_cupti_seq": (ctypes.c_uint64, []),
        "mneme_cupti_take_since": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint64, _U64P, _U64P, _U64P]),
    },
    abi=Abi("mneme_cupti_abi", ABI),
    after_load=_open_cupti,
    remedy="launches are timed with CUDA events meanwhile; for kernel timestamps set CUDA_PATH (or CUPTI_INCLUDE and "
    "MNEME_CUPTI_LIB) to a toolkit with CUPTI and remove the file so Mneme rebuilds it",
)


def _load() -> tuple[KernelTimer | None, str]:
    lib, why = LOADER.try_load()
    return (KernelTimer(lib), "") if lib is not None else (None, why)


@functools.lru_cache(maxsize=1)
def kernel_timer() -> tuple[KernelTimer | None, str]:
    """(the process's kernel timer, "") or (None, why there is none)."""
    timer, why = _load()
    if timer is None:
        log.debug("no kernel timer: %s", why)
    return timer, why
