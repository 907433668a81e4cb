"""The native part of the host backend: `runtime.c`, compiled once per source hash into a cache folder."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core.errors import BackendUnavailable
from mneme.core.native import c_compiler, compile_library
from mneme.core.native import cache_dir as native_cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("runtime.c")


def cache_dir() -> Path:
    """``$MNEME_CACHE_DIR/host-runtime`` (default ``~/.cache/mneme/host-runtime``)."""
    return native_cache_dir("host-runtime")


def _flags() -> list[str]:
    return ["-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-std=gnu11"]


def built() -> Path | None:
    """The runtime already compiled from this source by any compiler, if there is one."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return next(iter(sorted(cache_dir().glob(f"libmneme-host-{digest}-*.so"))), None)


def build(compiler: str | None = None) -> Path:
    """Compile the runtime if this source was not compiled yet; returns the shared library."""
    compiler = compiler or c_compiler()
    if compiler is None and built() is not None:
        return built()
    if compiler is None:
        raise BackendUnavailable(
            "the host backend needs a C compiler to build its runtime once; install gcc (apt-get install gcc) "
            "or set CC"
        )
    source = SOURCE.read_bytes()
    flags = _flags()
    digest = hashlib.sha256(source).hexdigest()[:16]
    key = hashlib.sha256(" ".join([compiler, *flags]).encode()).hexdigest()[:8]
    folder = cache_dir()
    target = folder / f"libmneme-host-{digest}-{key}.so"
    if target.exists():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: build into the temporary folder instead
        folder = Path(tempfile.gettempdir()) / f"mneme-host-runtime-{os.getuid()}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / target.name
        if target.exists():
            return target
    return compile_library(target, lambda out: [*compiler.split(), *flags, "-o", out, str(SOURCE)],
                           f"the host runtime {SOURCE}", BackendUnavailable)


@functools.lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    """Build and load the runtime, and make its symbols visible to JIT-compiled kernels."""
    path = build()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(str(path))
    u32x3 = ctypes.c_uint32 * 3
    lib.mneme_launch.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, u32x3, u32x3, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64, ctypes.c_int,
        ctypes.c_char_p, ctypes.c_size_t,
    ]  # fmt: skip
    lib.mneme_launch.restype = ctypes.c_int
    return lib
