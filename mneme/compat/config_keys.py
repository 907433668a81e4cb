"""`mneme config KEY`: the original Mneme's llvm-config-style keys, answered for Mneme's installation.

The original printed one value of its installation's configuration, for build systems
(`CC="$(mneme config cc)"`). Mneme builds recordable applications through the `mneme-cc`
launcher, which adds what it needs itself: `cc`/`cxx` are the launcher with a compiler,
`cflags`/`ldflags` are empty, `libdir` is where Mneme's native libraries are built.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from mneme.core.errors import UsageError

KEYS = ("cc", "cxx", "prefix", "libdir", "includedir", "cmakedir", "cflags", "ldflags")


def _launcher() -> str:
    found = shutil.which("mneme-cc") or str(Path(sys.executable).with_name("mneme-cc"))
    return found


def _compiler(names: tuple[str, ...], what: str) -> str:
    for name in names:
        if shutil.which(name):
            return f"{_launcher()} {name}"
    raise UsageError(f"mneme config {what}: no clang found ({', '.join(names)}); install clang, "
                     "which mneme-cc uses to build each file's device IR")  # fmt: skip


def _includedir() -> str:
    # located, not imported: the original API's layer imports no backend (.importlinter)
    spec = importlib.util.find_spec("mneme_cuda")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).resolve().parents[1] / "recorder" / "include"
        if (folder / "mneme_annotate.h").exists():
            return str(folder)
    raise UsageError("mneme config includedir: this installation has no mneme_annotate.h (it ships with a "
                     "checkout of mneme-cuda: backends/cuda/recorder/include); Python code uses mneme.annotate")  # fmt: skip


def value(key: str) -> str:
    """The value the original's `mneme config KEY` printed, for this installation."""
    from mneme.core import native

    if key == "cc":
        return _compiler(("clang", "clang-19"), key)
    if key == "cxx":
        return _compiler(("clang++", "clang++-19"), key)
    if key == "prefix":
        return sys.prefix
    if key == "libdir":
        return str(native.cache_root())
    if key == "includedir":
        return _includedir()
    if key in ("cflags", "ldflags"):
        return ""  # mneme-cc adds what recording needs; no plugin or library to name
    if key == "cmakedir":
        raise UsageError("mneme config cmakedir: Mneme ships no CMake package; build with "
                         "CMAKE_<LANG>_COMPILER_LAUNCHER=mneme-cc instead")  # fmt: skip
    raise UsageError(f"unknown config key {key!r}; use one of {', '.join(KEYS)} or a key of `mneme config --json`")
