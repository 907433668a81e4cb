"""Building Mneme's small native libraries (the host runtime, the snapshot reader, the CUDA recorder).

Each is compiled with the system's compiler into a cache folder that several processes may fill at
once, so a build writes a temporary file beside its target and renames it into place: a reader
never loads half a library, and a failed build leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from mneme.core.errors import MnemeError

log = logging.getLogger(__name__)


def cache_dir(name: str) -> Path:
    """``$MNEME_CACHE_DIR/<name>`` (default ``~/.cache/mneme/<name>``): where a native library is built."""
    root = os.environ.get("MNEME_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mneme")
    return Path(root) / name


def c_compiler() -> str | None:
    """The C compiler to build with: $CC (it may carry flags), else cc, gcc, clang, clang-19; None: none found."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang", "clang-19"):
        if name and shutil.which(name.split()[0]):
            return name
    return None


def compile_library(target: Path, command: Callable[[str], list[str]], what: str,
                    error: type[MnemeError] = MnemeError) -> Path:  # fmt: skip
    """Run `command(output_path)` to build `target` atomically; raise `error` naming `what` when it fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        argv = command(tmp)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise error(f"could not compile {what} ({' '.join(argv)}):\n{proc.stderr[-4000:]}")
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would hide it from other users of a shared cache
        os.replace(tmp, target)
        log.info("built %s: %s", what, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
