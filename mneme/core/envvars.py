"""Every ``MNEME_*`` environment variable Mneme reads, with its default and meaning, in one place.

`mneme config` prints this registry; a test greps the sources (Python, C, C++) for
``MNEME_[A-Z_]+`` and fails on a variable that is read but not registered here. The
recorder and the host runtime read theirs in C/C++; Python code reads through `get` and
`get_int` (a test fails on any other read of ``os.environ`` for them; writing them into the
environment of a child process is fine). A backend registers its own variables
(`Backend.environment`); they are looked up only for a name the core does not register.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import NamedTuple


class EnvVar(NamedTuple):
    """One environment variable: its name, default (as text; "" when none), meaning and reader.

    A named tuple, not an attrs class: `mneme --help` reads the registry before anything else and
    imports no attrs (start-up, docs/design/interfaces.md "CLI commands").
    """

    name: str
    default: str
    help: str
    component: str  # core, cache, instrument, recorder, snapshot, host, limits, or a backend's name


def _limit_vars() -> list[EnvVar]:
    from mneme.core import limit_defaults

    return [
        EnvVar(
            limit_defaults.variable(name),
            str(value),
            f"limit {name.replace('_', ' ')} (see docs/security.md)",
            "limits",
        )
        for name, value in limit_defaults.DEFAULTS.items()
    ]


_VARS = [
    EnvVar("MNEME_DISABLE_PLUGINS", "", "comma-separated plugin names to disable, as `mneme -p no:NAME`", "core"),
    EnvVar(
        "MNEME_TRACE_PLUGINS",
        "",
        "1/stderr or a file: print every plugin hook call, as `mneme --trace-plugins`",
        "core",
    ),
    EnvVar("MNEME_CACHE_DIR", "~/.cache/mneme", "folder of cached builds and native libraries", "cache"),
    EnvVar("MNEME_CACHE_MAX_BYTES", str(512 << 20), "size limit of the build cache in bytes", "cache"),
    EnvVar("MNEME_CACHE_DISABLE", "", "1/true/yes: keep no build cache on disk", "cache"),
    EnvVar("MNEME_LINK_CACHE", "1", "0: do not cache linked IR modules in memory", "cache"),
    EnvVar("MNEME_SNAPIO", "", "path of a prebuilt native snapshot reader/writer library", "snapshot"),
    EnvVar("MNEME_SNAPSHOT_NO_LZ4", "", "set: the native snapshot writer does not load liblz4", "snapshot"),
    EnvVar("MNEME_SNAPSHOT_NO_ZSTD", "", "set: the native snapshot writer does not load libzstd", "snapshot"),
    EnvVar("MNEME_CC_CLANG", "clang++-19", "clang used by mneme-cc to build device IR", "instrument"),
    EnvVar("MNEME_CC_OBJCOPY", "objcopy", "objcopy used by mneme-cc to embed IR", "instrument"),
    EnvVar("MNEME_CC_DISABLE", "", "set: mneme-cc only runs the compiler", "instrument"),
    EnvVar("MNEME_CC_VERBOSE", "", "set: mneme-cc logs what it does", "instrument"),
    EnvVar("MNEME_RECORD_DIR", "", "folder the recorder writes to (set by `mneme record`)", "recorder"),
    EnvVar("MNEME_RECORD_KERNEL", "", "regular expression of kernel names to record (`--kernel`)", "recorder"),
    EnvVar("MNEME_RECORD_SKIP", "0", "launches of each kernel to skip before recording (`--skip`)", "recorder"),
    EnvVar(
        "MNEME_RECORD_SYNC",
        "0",
        "1: copy snapshots to the host while the application waits (no device shadows)",
        "recorder",
    ),
    EnvVar(
        "MNEME_RECORD_PENDING_MIB",
        "",
        "MiB of device shadows not yet written out before launches wait (default: half the device's memory)",
        "recorder",
    ),
    EnvVar("MNEME_RECORD_MAX", "1", "instances recorded per kernel (`--max`)", "recorder"),
    EnvVar("MNEME_RECORD_RANKS", "0", "MPI ranks that record: all, or a list like 0,3 (`--record-ranks`)", "recorder"),
    EnvVar(
        "MNEME_RECORD_VA_BASE", "", "base of the virtual address range the recorder places allocations in", "recorder"
    ),
    EnvVar("MNEME_RECORD_VA_SIZE", "", "size of that placed virtual address range", "recorder"),
    EnvVar(
        "MNEME_RECORD_VMM_SIZE",
        str(1 << 41),
        "zone above the placed range for the application's own reservations",
        "recorder",
    ),
    EnvVar("MNEME_RECORD_PLACE", "1", "0: do not place allocations at fixed addresses", "recorder"),
    EnvVar("MNEME_RECORD_TIMED", "16", "launches timed in the application per recorded instance", "recorder"),
    EnvVar(
        "MNEME_RECORD_TIMER", "auto", "in-application timer: kernel (device timestamps), events or auto", "recorder"
    ),
    EnvVar(
        "MNEME_RECORD_TIMER_PARK",
        "64",
        "untimed launches in a row after which the device timer's records stop until the next timing; 0: never",
        "recorder",
    ),
    EnvVar("MNEME_RECORD_TIMING_GATE", "1", "0: do not hold a timed launch's stream until it is queued", "recorder"),
    EnvVar("MNEME_RECORD_TIMING_EXCLUSIVE", "1", "0: timed launches may overlap other work on the device", "recorder"),
    EnvVar("MNEME_RECORD_TIMING_FLUSH", "1", "0: do not evict the L2 cache before a timed launch", "recorder"),
    EnvVar(
        "MNEME_RECORD_RETIME",
        "0",
        "1: run and time each recorded launch again from its restored prologue, then restore its results",
        "recorder",
    ),
    EnvVar(
        "MNEME_RECORD_GRAPHS",
        "1",
        "0: run every graph launch as a graph (its kernels counted, not recorded)",
        "recorder",
    ),
    EnvVar("MNEME_RECORD_COMPRESSION", "lz4", "snapshot codec: lz4, zstd or none (`--compression`)", "recorder"),
    EnvVar("MNEME_RECORD_ZSTD_LEVEL", "", "zstd level of recorded snapshots", "recorder"),
    EnvVar(
        "MNEME_RECORD_WRITE_THREADS", "", "snapshot encoding threads (default: half the cores, at most 8)", "recorder"
    ),
    EnvVar("MNEME_RECORD_EPILOGUE_FORMAT", "", "epilogue encoding (`mneme record --epilogue-format`)", "recorder"),
    EnvVar(
        "MNEME_ISOLATE", "1", "0: `mneme replay` and `capture` run kernels in their own process, not a child", "limits"
    ),
    EnvVar(
        "MNEME_LIMIT_WORKER_DATA_BYTES",
        "",
        "data-memory (RLIMIT_DATA) cap of each worker process in bytes "
        "(replay and capture: the machine's memory by default)",
        "limits",
    ),
    EnvVar("MNEME_HOST_DEVICES", "1", "CPU devices the host backend exposes", "host"),
    EnvVar("MNEME_HOST_THREADS", "", "threads of one host launch (default: the CPUs this process may use)", "host"),
    EnvVar("MNEME_HOST_STACK_KB", "", "stack of one host-backend fiber in KiB (at least 16)", "host"),
    EnvVar(
        "MNEME_HOST_POLL_US",
        "200",
        "microseconds host helper threads poll for the next launch when launches follow that closely (0: park at once)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_PIN",
        "1",
        "0: leave the host sandbox's workers where the system puts them (by default, where they take every CPU the"
        " process may use, each gets one of its own)",
        "host",
    ),
    EnvVar("MNEME_HOST_FIBERS", "", "1: allow kernels that need fibers (barriers) on the host backend", "host"),
    EnvVar(
        "MNEME_HOST_SANDBOX",
        "1",
        "0: run host kernels in the calling process, without the sandbox process (unsafe; docs/security.md)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_LANES",
        "16",
        "threads of a block a host kernel without barriers runs in lockstep (0: one after another)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_GUARD_SPLIT",
        "1",
        "0: host kernels' long rows run every thread through the kernel's own `i < n` guard (masked vector steps)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_GRID_STRIDE",
        "1",
        "0: run grid-stride host kernels thread by thread, not as one loop over the index space",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_STRIDE_WALK",
        "1",
        "0: grid-stride host kernels keep each thread's iterations in order even where none can see another's "
        "(a claim then sweeps the array a block's width per step, not one contiguous range)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_BLOCK_STEPS",
        "1",
        "0: run host kernels with barriers a thread per call (the runtime's passes), not a block per call",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_BLOCK_LANES",
        "1",
        "0: keep a host barrier kernel's per-thread frames whole (no per-field arrays, recomputed values or pauses "
        "before atomic tails), so its barrier intervals run thread after thread",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_BLOCK_UNIFORM",
        "1",
        "0: fold every frame field a host barrier kernel's passes read over the block's threads, even where the IR "
        "proves all threads hold the same value (no divergence analysis)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_BLOCK_FLAT",
        "1",
        "0: run every pass of a host barrier kernel as loops over z, y and x, with no copy over the linear index for "
        "blocks of rows of a power-of-two length (16x16 tiles)",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_BLOCK_PREFETCH",
        "1",
        "0: host barrier kernels do not prefetch the slice of their inputs a later block reads at "
        "blockIdx.x * blockDim.x + threadIdx.x",
        "host",
    ),
    EnvVar(
        "MNEME_HOST_DEFER_ATOMICS",
        "1",
        "0: host kernels apply every atomic update at once, not gathered per worker where nothing reads it back",
        "host",
    ),
    EnvVar("MNEME_HOST_BOUNDS", "1", "0: compile host kernels without read checks (docs/security.md)", "host"),
]

# Names in the sources that are not environment variables: header guards and compile-time macros.
NOT_VARIABLES = frozenset(
    {
        "MNEME_ANNOTATE_H",
        "MNEME_CUPTI_TIMER_H",
        "MNEME_CUPTI",
        "MNEME_DEVICE_TIMER",
        "MNEME_NVCC_COMPAT_H",
        "MNEME_COMPAT_PAIR",
        # the original Mneme's diff-epilogue magic and a Python constant, not variables
        "MNEME_DIFF_V1",
        "MNEME_ONLY_KEYS",
    }
)


@functools.lru_cache(maxsize=1)
def _core() -> dict[str, EnvVar]:
    return {v.name: v for v in _VARS + _limit_vars()}


#: Where variables declared outside the core come from: `mneme.core.backend` adds the installed
#: backends' (`Backend.environment`) when it is imported (the core does not import its plugins).
_sources: list[Callable[[], Iterable[EnvVar]]] = []
_reading = False


def add_source(source: Callable[[], Iterable[EnvVar]]) -> None:
    """Also register the variables `source()` gives (asked each time: plugins come and go)."""
    _sources.append(source)


def _declared(name: str | None = None) -> dict[str, EnvVar]:
    """The variables the sources declare; with `name`, only that one, read from the sources until it is found
    (a source may import its declarations as it goes: a backend's lookup imports no other backend)."""
    global _reading
    if _reading:  # a plugin reading its variable while the sources load it
        return {}
    _reading = True
    try:
        found: dict[str, EnvVar] = {}
        for source in _sources:
            for var in source():
                found[var.name] = var
                if var.name == name:
                    return {name: var}
        return {} if name is not None else found
    finally:
        _reading = False


def _backend_vars() -> dict[str, EnvVar]:
    return _declared()


def _registry() -> dict[str, EnvVar]:
    found = {**_backend_vars(), **_core()}
    return {name: found[name] for name in sorted(found, key=lambda n: (found[n].component, n))}


def _lookup(name: str) -> EnvVar | None:
    return _core().get(name) or _declared(name).get(name)


def registry() -> dict[str, EnvVar]:
    """Every registered variable by name: the core's, the limits (MNEME_LIMIT_*) and the installed backends'."""
    return _registry()


def _registered(name: str) -> EnvVar:
    var = _lookup(name)
    if var is None:
        raise KeyError(f"{name} is not registered in mneme.core.envvars; add it with its help")
    return var


def raw(name: str) -> str | None:
    """The text of registered variable `name` exactly as set, or None when unset (`mneme config`)."""
    _registered(name)
    return os.environ.get(name)


def get(name: str, default: str | None = None) -> str | None:
    """The value of registered variable `name`; unset or empty: `default`, else its registered default.

    A registered default of "" (none) reads as None, and so does an unset variable without one.
    """
    var = _registered(name)
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if default is not None:
        return default
    return var.default or None


def get_named(name: str) -> str | None:
    """`get` for a variable a caller names (a plugin's `NativeLibrary(env=...)`), which need not be Mneme's own."""
    if _lookup(name) is not None:
        return get(name)
    return os.environ.get(name, "").strip() or None


def get_int(name: str, default: int | None = None, *, minimum: int | None = None) -> int | None:
    """`get` as an integer (decimal, or 0x.. hex); a value that is not one is a UsageError naming the variable."""
    from mneme.core.errors import UsageError

    text = get(name, None if default is None else str(default))
    if text is None:
        return None
    try:
        value = int(text, 0)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not an integer ({_registered(name).help})") from None
    if minimum is not None and value < minimum:
        raise UsageError(f"{name}={text!r} must be at least {minimum} ({_registered(name).help})")
    return value


def unregistered() -> dict[str, str]:
    """The MNEME_* variables set in this environment that Mneme does not read (misspelt ones)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("MNEME_") and k not in _registry()}
