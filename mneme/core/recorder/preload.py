"""Running an application under a backend's recorder: the engine's MNEME_RECORD_* environment with the
recorder library preloaded, and the run itself (with a live progress line where asked)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mneme.core.errors import UsageError
from mneme.core.recorder.progress import watch
from mneme.core.recorder.rawdir import EPILOGUE_FORMATS, check_compression

#: Where the engine places the application's allocations unless told otherwise (native/config.h's default).
DEFAULT_VA_BASE = 0x153940000000


def environment(
    library: Path | Callable[[], Path],
    raw_dir: Path,
    *,
    kernel: str | None = None,
    skip: int = 0,
    max_recordings: int = 4,
    va_base: int = DEFAULT_VA_BASE,
    record_ranks: str | None = None,
    epilogue_format: str = "diff",
    compression: str = "lz4",
) -> dict[str, str]:
    """This process's environment with `library` preloaded and the engine's settings (MNEME_RECORD_*).

    `library`: the recorder's path, or a function that finds or builds it (called once the settings
    are known to be valid, so that bad input never waits for a build). `kernel`: record only kernels
    whose mangled name matches this regex. `skip`: launches of each kernel passed over first.
    `max_recordings`: distinct instances recorded per kernel. `va_base`: where the reserved range
    starts. `record_ranks`: "all", a comma-separated list of MPI ranks, or None (rank 0 when a
    launcher announces ranks, else the one process). `epilogue_format`: how each epilogue region is
    stored (EPILOGUE_FORMATS). `compression`: "lz4", "zstd" or "none".

    A backend's own ``environment(raw_dir, library=None, **settings)`` passes these settings through
    by name and adds its own variables to the result.
    """
    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    check_compression(compression)
    if callable(library):
        library = library()
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
    env["MNEME_RECORD_DIR"] = str(raw_dir)
    env["MNEME_RECORD_SKIP"] = str(skip)
    env["MNEME_RECORD_MAX"] = str(max_recordings)
    env["MNEME_RECORD_VA_BASE"] = hex(va_base)
    env["MNEME_RECORD_EPILOGUE_FORMAT"] = epilogue_format
    env["MNEME_RECORD_COMPRESSION"] = compression
    if kernel:
        env["MNEME_RECORD_KERNEL"] = kernel
    if record_ranks:
        env["MNEME_RECORD_RANKS"] = record_ranks
    return env


def run(command: Sequence[str], raw_dir: Path, env: dict[str, str], progress: bool | None = None) -> int:
    """Run `command` in `env`; returns its exit code (the application's, untouched).

    `progress`: show a live line (kernels, instances, bytes written) on stderr while it runs;
    None: when stderr is a terminal.
    """
    if progress is None:
        progress = sys.stderr.isatty()
    try:
        if not progress:
            return subprocess.run(list(command), env=env, check=False).returncode
        from mneme.core.console import current

        with subprocess.Popen(list(command), env=env) as proc:
            return watch(proc, raw_dir, current(err=True))
    except FileNotFoundError as exc:
        raise UsageError(f"cannot run {command[0]!r}: {exc}") from exc
