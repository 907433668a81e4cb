"""Building Mneme's small native libraries (the host runtime, the snapshot reader, the CUDA recorder).

Each is compiled with the system's compiler into a cache folder that several processes may fill at
once, so a build writes a temporary file beside its target and renames it into place: a reader
never loads half a library, and a failed build leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from mneme.core.errors import MnemeError

log = logging.getLogger(__name__)

#: A checkout's prebuilt native libraries (`scripts/gpu-suite --prepare` builds them for a machine
#: without a compiler or headers).
CHECKOUT_LIB = Path(__file__).resolve().parents[2] / ".gpu" / "lib"


def cache_root() -> Path:
    """``$MNEME_CACHE_DIR`` (default ``~/.cache/mneme``): Mneme's caches, builds and native libraries."""
    root = os.environ.get("MNEME_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "mneme"


def cache_dir(name: str) -> Path:
    """``cache_root()/<name>``: where a native library is built."""
    return cache_root() / name


def hashed_library(stem: str, *sources: Path) -> str:
    """``lib<stem>-<hash>.so``, the hash of `sources`: a build of other sources never goes by this name."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    return f"lib{stem}-{digest}.so"


def find_library(name: str, *folders: Path) -> Path | None:
    """`name` in the first of `folders` that holds it; None: none does."""
    return next((folder / name for folder in folders if (folder / name).exists()), None)


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
