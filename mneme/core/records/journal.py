"""What a copy or move created, so that undoing it removes exactly that and nothing that was there.

Every file is created under a name that did not exist (hard link, or a copy opened with
O_EXCL), never renamed over one, so a file that appeared in the destination meanwhile is
refused rather than replaced, and a rollback never deletes what it did not make. A move
links each source into place (or copies it, across file systems and bind mounts, where a
link is refused with EXDEV) and deletes the sources only after the whole move succeeded.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

from mneme.core import fsutil
from mneme.core.errors import UsageError

log = logging.getLogger(__name__)

# A link is refused here: another file system or bind mount (EXDEV), or one that has no hard links.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def _exists_error(dst: Path, verb: str) -> UsageError:
    return UsageError(
        f"{dst} appeared while {verb}ing (another process writes there?); nothing was changed: "
        "try again or choose another destination"
    )


def _copy_bytes(src: Path, out) -> None:
    """Copy `src`'s bytes into the open file `out` and make them durable."""
    with open(src, "rb") as fin:
        shutil.copyfileobj(fin, out, 1 << 20)
    out.flush()
    os.fsync(out.fileno())


class Journal:
    """The folders and files one operation created, in order; `undo` removes them, newest first."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.folders: list[Path] = []
        self.files: list[Path] = []
        self.linked: set[Path] = set()  # destinations that are the source's own inode

    def make_folders(self, folder: Path) -> None:
        for d in [*reversed(folder.parents), folder]:
            if d.is_dir():
                continue
            try:
                d.mkdir()
            except FileExistsError:
                continue
            self.folders.append(d)

    def copy(self, src: Path, dst: Path) -> None:
        """Copy `src` (bytes and times) to `dst`, a name that must not exist yet (O_EXCL)."""
        try:
            out = open(dst, "xb")
        except FileExistsError:
            raise _exists_error(dst, self.verb) from None
        self.files.append(dst)  # ours from here on, partial or not
        with out:
            _copy_bytes(src, out)
        shutil.copystat(src, dst)

    def link_or_copy(self, src: Path, dst: Path) -> None:
        """`dst` becomes another name of `src` (a move), or a copy where the file system refuses a link."""
        try:
            os.link(src, dst, follow_symlinks=False)
        except FileExistsError:
            raise _exists_error(dst, self.verb) from None
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            log.debug("cannot link %s to %s (%s); copying", src, dst, exc.strerror)
            self.copy(src, dst)
            return
        self.files.append(dst)
        self.linked.add(dst)

    def write_new(self, target: Path, text: str) -> None:
        """Write a database under a name that must not exist yet: complete, durable, never replacing one."""
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, fsutil.file_mode(target))
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise _exists_error(target, self.verb) from None
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                if os.path.lexists(target):  # no hard links here: check, then rename (a narrow window)
                    raise _exists_error(target, self.verb) from None
                os.rename(tmp, target)
            self.files.append(target)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        fsutil.fsync_dir(target.parent)

    def undo(self) -> None:
        """Remove what this journal created, newest first; log (never raise) what cannot be removed."""
        for path in reversed(self.files):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.error("could not undo the %s of %s: %s", self.verb, path, exc)
        for d in reversed(self.folders):
            try:
                d.rmdir()
            except OSError:
                pass
