"""The native part of the host backend: `runtime.c`, compiled once per source hash into a cache folder and
opened by the core's loader (`mneme.core.native_loader`), its functions declared."""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import envvars
from mneme.core.errors import BackendUnavailable
from mneme.core.native import NativeLibrary, c_compiler
from mneme.core.native_loader import NativeLoader

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
            "the host backend needs a C compiler to build its runtime once; install gcc (apt-get install gcc) or set CC"
        )
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: build into the temporary folder instead
        folder = _fallback_dir()
    return LIBRARY.build(
        lambda sources, out: [*compiler.split(), *FLAGS, "-o", out, *sources], folder, error=BackendUnavailable
    )


def _make_visible_to_kernels(_lib: ctypes.CDLL, path: str) -> None:
    llvm.load_library_permanently(path)


_U32X3 = ctypes.c_uint32 * 3
#: The file name's hash is the runtime's version (a build of other sources has another name): no ABI number.
LOADER = NativeLoader(
    "the host runtime",
    build,
    {
        "mneme_launch": (
            ctypes.c_int,
            [
                ctypes.c_void_p,
                ctypes.c_void_p,
                _U32X3,
                _U32X3,
                ctypes.c_uint64,
                ctypes.c_int,
                ctypes.c_uint64,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_size_t,
            ],
        ),
        "mneme_grid_capacity": (ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]),
        "mneme_serve": (
            None,
            [
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_uint64,
                ctypes.c_int,
                ctypes.c_int,
            ],
        ),
        "mneme_set_timeout": (None, [ctypes.c_double]),
    },
    mode=ctypes.RTLD_GLOBAL,
    after_load=_make_visible_to_kernels,
    remedy="the host backend cannot run kernels; install a C compiler (apt-get install gcc, or set CC) and remove "
    "the file so Mneme rebuilds it",
)


def load() -> ctypes.CDLL:
    """Build and load the runtime, and make its symbols visible to JIT-compiled kernels (the runtime is
    Mneme's code: loading it maps no recorded code). NativeLibraryError when it cannot be had."""
    return LOADER.load()
