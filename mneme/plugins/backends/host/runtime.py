"""The native part of the host backend: `runtime.c`, compiled once per source hash into a cache folder."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from mneme.core.errors import BackendUnavailable

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("runtime.c")
COMPILERS = ("cc", "gcc", "clang", "clang-19")


def find_compiler() -> str | None:
    """The C compiler used to build the runtime: $CC, or the first of cc, gcc, clang on PATH."""
    env = os.environ.get("CC")
    if env and shutil.which(env.split()[0]):
        return env
    for name in COMPILERS:
        if shutil.which(name):
            return name
    return None


def cache_dir() -> Path:
    root = os.environ.get("MNEME_CACHE") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / ("mneme" if "MNEME_CACHE" not in os.environ else "") / "host-runtime"


def build(compiler: str | None = None) -> Path:
    """Compile the runtime if this source was not compiled yet; returns the shared library."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise BackendUnavailable(
            "the host backend needs a C compiler to build its runtime once; install gcc (apt-get install gcc) "
            "or set CC"
        )
    source = SOURCE.read_bytes()
    flags = ["-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-std=gnu11"]
    key = hashlib.sha256(source + " ".join([compiler, *flags]).encode()).hexdigest()[:16]
    folder = cache_dir()
    target = folder / f"libmneme-host-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=target.name, suffix=".tmp")
    os.close(fd)
    try:
        command = [*compiler.split(), *flags, "-o", tmp, str(SOURCE)]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BackendUnavailable(f"could not compile the host runtime {SOURCE} ({' '.join(command)}):\n{proc.stderr}")
        os.replace(tmp, target)  # atomic: parallel processes may build it at once
        log.info("built the host runtime %s", target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@functools.lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    """Build and load the runtime, and make its symbols visible to JIT-compiled kernels."""
    import llvmlite.binding as llvm

    path = build()
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(str(path))
    u32x3 = ctypes.c_uint32 * 3
    lib.mneme_launch.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, u32x3, u32x3, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
        ctypes.c_char_p, ctypes.c_size_t,
    ]  # fmt: skip
    lib.mneme_launch.restype = ctypes.c_int
    return lib
