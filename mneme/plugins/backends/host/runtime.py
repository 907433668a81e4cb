"""The native part of the host backend: `runtime.c`, compiled once per source hash into a cache folder."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import envvars
from mneme.core.errors import BackendUnavailable
from mneme.core.native import NativeLibrary, c_compiler

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("runtime.c")
#: The files runtime.c includes, one idea each (one translation unit: they share static state).
PARTS = tuple(sorted(SOURCE.with_name("runtime_parts").glob("*.inc")))
FLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-std=gnu11")
LIBRARY = NativeLibrary("mneme_host", "the host runtime", (SOURCE,), headers=PARTS, flags=FLAGS, cache="host-runtime")


def source_text() -> str:
    """The runtime's whole source: runtime.c and the parts it includes."""
    return "\n".join(path.read_text(encoding="utf-8") for path in (SOURCE, *PARTS))


def cache_dir() -> Path:
    """``$MNEME_CACHE_DIR/host-runtime`` (default ``~/.cache/mneme/host-runtime``)."""
    return LIBRARY.build_dir()


def built() -> Path | None:
    """The runtime already compiled from this source, if there is one."""
    return LIBRARY.find(_fallback_dir())


def _fallback_dir() -> Path:
    """Where the runtime is built when the cache folder cannot be written (a read-only home)."""
    return Path(tempfile.gettempdir()) / f"mneme-host-runtime-{os.getuid()}"


def build(compiler: str | None = None) -> Path:
    """Compile the runtime if this source was not compiled yet; returns the shared library."""
    found = built()
    if found is not None:
        return found
    compiler = compiler or c_compiler()
    if compiler is None:
        raise BackendUnavailable(
            "the host backend needs a C compiler to build its runtime once; install gcc (apt-get install gcc) "
            "or set CC"
        )
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: build into the temporary folder instead
        folder = _fallback_dir()
    return LIBRARY.build(lambda sources, out: [*compiler.split(), *FLAGS, "-o", out, *sources], folder,
                         error=BackendUnavailable)


@functools.lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    """Build and load the runtime, and make its symbols visible to JIT-compiled kernels (the runtime is
    Mneme's code: loading it maps no recorded code)."""
    path = build()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(str(path))
    u32x3 = ctypes.c_uint32 * 3
    lib.mneme_launch.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, u32x3, u32x3, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64, ctypes.c_int,
        ctypes.c_char_p, ctypes.c_size_t,
    ]  # fmt: skip
    lib.mneme_launch.restype = ctypes.c_int
    lib.mneme_grid_capacity.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.mneme_grid_capacity.restype = ctypes.c_uint64
    lib.mneme_serve.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                ctypes.c_int, ctypes.c_int]
    lib.mneme_serve.restype = None
    return lib
