"""Whole-database file operations: clean, copy and move recordings with every file they reference."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from mneme.core.errors import UsageError
from mneme.core.records import referrers
from mneme.core.records.journal import Journal
from mneme.core.records.model import RecordedExecution

log = logging.getLogger(__name__)


# -- whole-database file operations (clean, copy, move) ----------------------------------------
# Each operation loads and checks every database and plans every file before it changes
# anything, so a bad database or destination leaves the disk as it was.


@attrs.frozen
class FileReport:
    """What a clean, copy or move did: databases written or removed, files removed, files kept."""

    databases: list[Path] = attrs.Factory(list)
    removed: list[Path] = attrs.Factory(list)
    kept: list[Path] = attrs.Factory(list)
    #: other tools' databases given (the original Mneme's): only their conversion was acted on, their files stay
    foreign: list[Path] = attrs.Factory(list)


def load_all(
    paths: Iterable[str | os.PathLike],
    *,
    allow_missing: bool = False,
    convert: bool = True,
    foreign: list[Path] | None = None,
) -> list[RecordedExecution]:
    """Load every database (validating each); two arguments naming one database count once.

    Another tool's database is loaded through its conversion (made when `convert`); its path is
    added to `foreign` when given, and with `convert=False` one without a current conversion
    is only listed there.
    """
    from mneme.core.errors import FormatError
    from mneme.core.records import foreign as formats

    records: dict[Path, RecordedExecution] = {}
    for p in paths:
        try:
            rec = RecordedExecution.from_json(p, allow_missing=allow_missing, convert=convert)
        except FormatError:
            if foreign is None or convert or not formats.claimed(p):
                raise
            foreign.append(Path(p))  # nothing of Mneme's format to act on
            continue
        if foreign is not None and os.path.realpath(rec.path) != os.path.realpath(p):
            foreign.append(Path(p))
        records.setdefault(rec.path.resolve(), rec)
    return list(records.values())


def _files_of_others(records: Sequence[RecordedExecution]) -> set[Path]:
    """Files referenced by any other database that could name them (kept when one is removed).

    Also refuses a database that names a database as one of its files.
    """
    others = referrers.find(records)
    referrers.refuse_database_references(records, others.databases)
    return set(others.files)


def _check_plain(path: Path, verb: str) -> None:
    """Refuse to read or replace what is not a regular file: FIFOs, devices, sockets."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        return
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file (a FIFO, socket or device); cannot {verb} it")


def _remove_empty_dirs(files: Iterable[Path], stop: Path) -> None:
    stop = stop.resolve()
    for parent in sorted({f.parent.resolve() for f in files}, key=lambda d: len(d.parts), reverse=True):
        while parent != stop and stop in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent


def clean_records(paths: Iterable[str | os.PathLike], *, dry_run: bool = False) -> FileReport:
    """Delete each database and the files it references inside its folder, nothing else.

    A file that any other database still references is kept (`referrers`: the databases in
    every folder above it). With `dry_run`, only report what would be removed.
    """
    foreign: list[Path] = []
    # another tool's database: its conversion is cleaned, never made just to be deleted
    records = load_all(paths, allow_missing=True, convert=False, foreign=foreign)
    others = _files_of_others(records)
    for rec in records:
        for f in rec.referenced_files():
            _check_plain(f, "remove")
    report = FileReport(foreign=foreign)
    gone: set[Path] = set()
    for rec in records:
        removed = []
        for f in rec.referenced_files():
            if others and f.resolve() in others:
                report.kept.append(f)
            elif f not in gone and (f.is_file() or f.is_symlink()):
                if not dry_run:
                    f.unlink()
                gone.add(f)
                removed.append(f)
        if not dry_run:
            rec.path.unlink()
            _remove_empty_dirs(removed, rec.folder)
            _remove_empty_conversion(rec, foreign)
            log.info("removed %s and %d files", rec.path, len(removed))
        report.databases.append(rec.path)
        report.removed.extend(removed)
    return report


def _remove_empty_conversion(rec: RecordedExecution, foreign: Sequence[Path]) -> None:
    """The cache folder of a removed conversion goes too once empty (the other tool's folder stays)."""
    for source in foreign:
        home = Path(source).parent.resolve()
        if home in rec.folder.resolve().parents:
            _remove_empty_dirs([rec.path], home)
            return


def _digest(path: Path) -> str:
    """A file's content checksum, read through one descriptor of a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path} is not a regular file (a FIFO, socket or device)")
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def _same_content(a: Path, b: Path) -> bool:
    """Same bytes, by checksum; never by name, link or inode alone."""
    return _digest(a) == _digest(b)


def _refuse_link(dst: Path, src: Path, verb: str) -> None:
    """A destination that is a link (dangling or not) or the source itself would lose the source's data."""
    if dst.is_symlink():
        raise UsageError(
            f"{dst} is a symbolic link (to {os.readlink(dst)}); cannot {verb} {src} over it: remove it or "
            "choose another destination"
        )
    if dst.exists() and os.path.samefile(dst, src):
        raise UsageError(
            f"{dst} is the same file as {src} (a hard link or a folder reached twice); cannot {verb} it "
            "onto itself: choose another destination"
        )


def copy_records(paths: Iterable[str | os.PathLike], dest: str | os.PathLike, *, move: bool = False) -> FileReport:
    """Copy (or move) databases with every file they reference into folder `dest`.

    Each database keeps its folder's relative layout under `dest` and is rewritten there.
    Refused before anything changes: a destination that is a file, a database that points
    outside its folder or misses a file, two sources for one destination file with different
    contents, a destination file that exists with other contents.
    """
    dest = Path(os.path.abspath(dest))
    if dest.is_symlink() and not dest.exists():
        raise UsageError(f"destination {dest} is a dangling symbolic link; give a folder")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"destination {dest} is a file; give a folder (it is created if missing)")
    foreign: list[Path] = []
    records = load_all(paths, foreign=foreign)
    if not records:
        raise UsageError("no recording database given")
    verb = "move" if move else "copy"
    plan: dict[Path, Path] = {}  # destination file -> source file
    present: set[Path] = set()  # destination files and databases already there, the same
    targets: dict[Path, RecordedExecution] = {}
    for rec in records:
        if rec.folder.resolve() == dest.resolve():
            raise UsageError(f"{rec.path} is already in {dest}; nothing to {verb}")
        db_target = dest / rec.path.name
        if db_target in targets:
            raise UsageError(
                f"{rec.path} and {targets[db_target].path} would both become {db_target}; "
                f"{verb} them to different folders"
            )
        targets[db_target] = rec
        if db_target.is_symlink():
            raise UsageError(
                f"{db_target} is a symbolic link; cannot write the database over it: remove it or choose "
                "another destination"
            )
        if db_target.exists():
            existing = RecordedExecution.from_json(db_target, allow_missing=True) if db_target.is_file() else None
            if existing is None or existing.to_dict() != rec.to_dict():
                raise UsageError(
                    f"{db_target} already exists and differs from {rec.path}; remove it or choose another destination"
                )
            present.add(db_target)
        for src in rec.referenced_files():
            dst = dest / src.relative_to(rec.folder)
            if dst in plan and plan[dst].resolve() != src.resolve() and not _same_content(plan[dst], src):
                raise UsageError(
                    f"{plan[dst]} and {src} would both become {dst} with different contents; "
                    f"{verb} them to different folders"
                )
            plan.setdefault(dst, src)
    for dst, src in plan.items():
        _check_plain(src, verb)
        _refuse_link(dst, src, verb)
        _check_plain(dst, f"{verb} over")
        for parent in dst.parents:
            if parent == dest.parent:
                break
            if parent.is_symlink():
                raise UsageError(
                    f"{parent} is a symbolic link; cannot {verb} {src} through it: choose another destination"
                )
        if dst.is_dir():
            raise UsageError(f"{dst} is a folder; cannot {verb} {src} there")
        if dst.exists():
            if not _same_content(src, dst):
                raise UsageError(
                    f"{dst} already exists and differs from {src}; remove it or choose another destination"
                )
            present.add(dst)

    keep = _files_of_others(records)  # also refuses a database naming another database
    keep = keep if move else set()
    journal = Journal(verb)
    written: list[Path] = []
    try:
        for folder in sorted({d.parent for d in list(plan) + list(targets)}, key=lambda d: len(d.parts)):
            journal.make_folders(folder)
        # Data files go to their names first (none existed: checked above), the databases last,
        # so no database ever names a partial file. A move links (or copies) and deletes its
        # sources only once everything is in place: undoing it removes what it created, only.
        for dst, src in plan.items():
            if dst in present:
                continue  # identical content already there (anything else there now is refused)
            if move and not src.is_symlink() and src.resolve() not in keep:
                journal.link_or_copy(src, dst)
            else:
                journal.copy(src, dst)
        for db_target, rec in targets.items():
            if db_target not in present:  # an identical database already there stays as it is
                journal.write_new(db_target, json.dumps(rec.to_dict(), indent=2) + "\n")
            written.append(db_target)
        if move:  # every source is deleted only once its destination holds the same bytes
            for dst, src in plan.items():
                if dst not in journal.linked and not _same_content(src, dst):
                    raise UsageError(f"{dst} does not hold the bytes of {src} after copying; nothing was removed")
    except BaseException:
        journal.undo()
        raise
    report = FileReport(databases=written, foreign=foreign)
    if move:
        for rec in records:
            removed = []
            for f in rec.referenced_files():
                if keep and f.resolve() in keep:
                    report.kept.append(f)
                elif f.is_file() or f.is_symlink():
                    f.unlink()
                    removed.append(f)
            rec.path.unlink()
            report.removed.extend([*removed, rec.path])
            _remove_empty_dirs(removed, rec.folder)
            _remove_empty_conversion(rec, foreign)
    log.info("%s %d databases to %s", "moved" if move else "copied", len(written), dest)
    return report
