"""Durable file writes: a temp file in the same folder, fsync, rename, fsync of the folder.

A crash, a killed process or a full disk leaves either the old file or the new one under the
final name, never a half-written file; the temp file is removed on any error.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename inside `folder` durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes | str, *, mode: int | None = None) -> None:
    """Write `data` to `path` atomically and durably.

    `mode` sets the file's permissions; by default they are what a plain `open(path, "w")` gives
    (the existing file's, else 0o666 minus the umask), never mkstemp's private 0o600, so a team's
    shared recording or results folder stays readable to the team.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = file_mode(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(target.parent)


def file_mode(target: str | os.PathLike) -> int:
    """The mode a plain `open(target, "w")` would give: the existing file's, else 0o666 minus umask."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        return 0o666 & ~umask()


def umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    try:  # Linux reports it without changing it (os.umask would, for every thread at once)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    value = os.umask(0o022)
    os.umask(value)
    return value


def safe_component(text: str, limit: int = 40, default: str = "x") -> str:
    """`text` as one file-name component: only [A-Za-z0-9_.-], no leading dot, at most `limit` characters.

    Names from a recording (a kernel name, an instance key) never choose a folder: `../../x`
    becomes `.._.._x` trimmed of its leading dots, inside the folder the user asked for.
    """
    out = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in text)[:limit].lstrip(".")
    return out or default
