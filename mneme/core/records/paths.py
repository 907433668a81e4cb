"""Path safety for recording databases: relative paths that stay inside the database's folder."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from mneme.core import fsutil
from mneme.core.errors import FormatError

# -- path safety -----------------------------------------------------------------------------


def check_lexical(rel: str, db: Path | None, field: str) -> None:
    if "\0" in rel:
        raise FormatError(db, f"{rel!r} holds a NUL byte", field=field)
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(db, f"{rel!r} is not UTF-8 text (a lone surrogate)", field=field) from None
    if not rel or rel == ".":
        raise FormatError(db, "is an empty path", field=field)
    if "\\" in rel:
        raise FormatError(
            db, f"{rel!r} uses backslashes; paths are POSIX, relative to the database's folder", field=field
        )
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise FormatError(db, f"{rel!r} is absolute; paths must be relative to the database's folder", field=field)
    if ".." in pure.parts:
        raise FormatError(db, f"{rel!r} leaves the database's folder ('..'); keep every file inside it", field=field)


def is_inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _within(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


class FileChecker:
    """Checks that relative paths name regular files inside one folder (each directory resolved once)."""

    def __init__(self, folder: Path, db: Path | None, allow_missing: bool = False):
        self.folder = os.fspath(folder)
        self.root = os.path.realpath(folder)
        self.db = db
        self.allow_missing = allow_missing
        self._dirs: dict[str, str] = {}

    def check(self, rel: str, field: str) -> None:
        check_lexical(rel, self.db, field)
        parent, name = os.path.split(os.path.join(self.folder, rel))
        real_parent = self._dirs.get(parent)
        if real_parent is None:
            real_parent = self._dirs[parent] = os.path.realpath(parent)
        real = os.path.join(real_parent, name)
        if os.path.islink(real):
            real = os.path.realpath(real)
        if self.db is not None and real == os.path.realpath(self.db):
            raise FormatError(
                self.db,
                f"{rel!r} is the database itself; a database names its IR, images and snapshots, never a database",
                field=field,
            )
        if not _within(real, self.root):
            raise FormatError(
                self.db,
                f"{rel!r} leads outside the database's folder through a symbolic link "
                f"(to {real}); keep every file inside it",
                field=field,
            )
        if not os.path.exists(real):
            if self.allow_missing:
                return
            raise FormatError(
                self.db,
                f"{rel!r} does not exist in {os.path.abspath(self.folder)}; the recording is "
                "incomplete, record it again",
                field=field,
            )
        if not os.path.isfile(real):
            raise FormatError(self.db, f"{rel!r} is not a regular file", field=field)


def atomic_write(target: Path, text: str) -> None:
    fsutil.atomic_write(target, text)
