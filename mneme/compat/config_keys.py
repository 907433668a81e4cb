"""`mneme config KEY`: the original Mneme's llvm-config-style keys, answered for Mneme's installation.

The original printed one value of its installation's configuration, for build systems
(`CC="$(mneme config cc)"`). Mneme builds recordable applications through the `mneme-cc`
launcher, which adds what it needs itself: `cc`, `cxx` and `cuda` are one executable each, a
small script (written on demand under the cache folder) that runs a compiler through mneme-cc;
`launcher` is mneme-cc as one executable (for CMAKE_<LANG>_COMPILER_LAUNCHER); `cmakedir` is
the folder of Mneme's CMake package (`find_package(mneme)`, `add_mneme(<target>)`);
`cflags`/`ldflags` are empty; `libdir` is where Mneme's native libraries are built.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path

from mneme.core.errors import UsageError

KEYS = ("cc", "cxx", "cuda", "launcher", "prefix", "libdir", "includedir", "cmakedir", "cflags", "ldflags")

# The compilers each key wraps, in order of preference (clang builds the device IR either way).
_COMPILERS = {
    "cc": ("clang", "clang-19"),
    "cxx": ("clang++", "clang++-19"),
    "cuda": ("nvcc", "/usr/local/cuda/bin/nvcc", "clang++", "clang++-19"),
}


def _script(name: str, command: list[str], what: str) -> str:
    """An executable shell script under the cache folder that runs `command` with the caller's arguments."""
    from mneme.core import native

    text = (
        f"#!/bin/sh\n# {what} (written by `mneme config`; written again when the installation moves)\n"
        f'exec {" ".join(shlex.quote(c) for c in command)} "$@"\n'
    )
    path = native.cache_root() / "bin" / name
    try:
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{name}.{os.getpid()}")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(
            f"mneme config: cannot write the launcher script {path}: {exc.strerror}; set "
            "MNEME_CACHE_DIR to a writable folder"
        ) from exc
    return str(path)


def _launcher() -> str:
    """mneme-cc of this interpreter, as one executable."""
    return _script(
        "mneme-cc",
        [sys.executable, "-m", "mneme.instrument.launcher"],
        "mneme-cc, Mneme's compiler launcher, of this installation",
    )


def _compiler(key: str) -> str:
    for name in _COMPILERS[key]:
        found = shutil.which(name)
        if found:
            return _script(
                f"mneme-cc-{key}",
                [sys.executable, "-m", "mneme.instrument.launcher", found],
                f"{found} through mneme-cc, which also embeds each file's device IR",
            )
    raise UsageError(
        f"mneme config {key}: no compiler found ({', '.join(_COMPILERS[key])}); install clang "
        "(or the CUDA toolkit for `cuda`)"
    )


def cmakedir() -> str:
    """The folder of Mneme's CMake package (mnemeConfig.cmake), shipped in the `mneme` package."""
    folder = Path(__file__).resolve().parents[1] / "cmake"
    if not (folder / "mnemeConfig.cmake").is_file():
        raise UsageError(
            f"mneme config cmakedir: this installation lacks {folder}/mnemeConfig.cmake; reinstall mneme-gpu"
        )
    return str(folder)


def _includedir() -> str:
    # located, not imported: the original API's layer imports no backend (.importlinter)
    spec = importlib.util.find_spec("mneme_cuda")
    if spec is not None and spec.origin:
        folder = Path(spec.origin).resolve().parents[1] / "recorder" / "include"
        if (folder / "mneme_annotate.h").exists():
            return str(folder)
    raise UsageError(
        "mneme config includedir: this installation has no mneme_annotate.h (it ships with a "
        "checkout of mneme-cuda: backends/cuda/recorder/include); Python code uses mneme.annotate"
    )


def value(key: str) -> str:
    """The value the original's `mneme config KEY` printed, for this installation."""
    from mneme.core import native

    if key in _COMPILERS:
        return _compiler(key)
    if key == "launcher":
        return _launcher()
    if key == "prefix":
        return sys.prefix
    if key == "libdir":
        return str(native.cache_root())
    if key == "includedir":
        return _includedir()
    if key in ("cflags", "ldflags"):
        return ""  # mneme-cc adds what recording needs; no plugin or library to name
    if key == "cmakedir":
        return cmakedir()
    raise UsageError(f"unknown config key {key!r}; use one of {', '.join(KEYS)} or a key of `mneme config --json`")
