"""Which other recording databases refer to a file: what clean and move must keep.

A database names files by paths relative to its own folder that never leave it (after
symbolic links), so the only databases that can refer to a file are those directly inside one
of the folders above it, up to the file system's root. Searching those folders (the real ones,
after links, and the ones the path names) finds every referrer with one listing per folder:
`rec/top.json` naming `sub/p.mneme` is found from `rec/sub/p.mneme` as well as `rec/sub/x.json`
is, and no other folder can hold one. docs/security.md ("No data lost") states the rule.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from mneme.core.errors import FormatError, MnemeError
from mneme.core.records.model import RecordedExecution

log = logging.getLogger(__name__)


@attrs.frozen
class Referrers:
    """The other databases that could refer to the chosen ones' files, and the files they refer to."""

    databases: frozenset[Path]  # each by its real folder and name, and resolved
    files: frozenset[Path]  # resolved


def folders_above(files: Iterable[Path]) -> list[Path]:
    """Every folder that could hold a database naming one of `files`: each one's folders up to '/'."""
    found: dict[Path, None] = {}
    for f in files:
        absolute = Path(os.path.abspath(f))
        real_parent, real = Path(os.path.realpath(absolute.parent)), Path(os.path.realpath(absolute))
        for start in (absolute.parent, real_parent, real.parent):
            for folder in (start, *start.parents):
                if folder in found:
                    break  # its parents are there already
                found[folder] = None
    return list(found)


def _candidates(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return sorted(Path(e.path) for e in entries if e.name.endswith(".json") and e.is_file())
    except OSError as exc:  # an unreadable parent (another user's): its databases are not ours to read
        log.debug("cannot list %s for databases: %s", folder, exc)
        return []


def load_candidate(path: Path) -> RecordedExecution:
    """A database found next to a file (the one place that reads candidates: other formats plug in here)."""
    return RecordedExecution.from_json(path, allow_missing=True, convert=False)  # never converts a bystander


def _where(path: Path) -> Path:
    """A database's identity: its real folder and its own name (a link to one names files from its own folder)."""
    return Path(os.path.realpath(path.parent)) / path.name


def find(records: Sequence[RecordedExecution]) -> Referrers:
    """The databases other than `records` that could refer to their files, and every file those name.

    Candidates that are not regular files (a FIFO named `*.json`) or not databases are skipped
    without being opened for long: they are neither kept nor removed.
    """
    chosen = {_where(r.path) for r in records}
    files = [f for r in records for f in r.referenced_files()]
    databases: set[Path] = set()
    shared: set[Path] = set()
    for folder in folders_above([*files, *(r.path for r in records)]):
        for candidate in _candidates(folder):
            where = _where(candidate)
            if where in chosen or where in databases:
                continue
            try:
                other = load_candidate(candidate)
            except MnemeError as exc:
                log.debug("not a recording database, ignored: %s", exc)
                continue
            if _where(other.path) in chosen:
                continue  # another tool's database whose conversion is one of the chosen: the same recording
            databases.update((where, candidate.resolve()))
            shared.update(f.resolve() for f in other.referenced_files())
    return Referrers(frozenset(databases), frozenset(shared))


def refuse_database_references(records: Sequence[RecordedExecution], databases: Iterable[Path]) -> None:
    """A database that names a recording database as one of its files would have it deleted or overwritten."""
    known = {*databases, *(r.path.resolve() for r in records), *(_where(r.path) for r in records)}
    for rec in records:
        for f in rec.referenced_files():
            if f.resolve() in known:
                raise FormatError(
                    rec.path,
                    f"names the recording database {f} as one of its files; a database "
                    "never references a database: fix the database, nothing was changed",
                )
