"""Loading a recording by what a user names: a database file, or the folder holding exactly one.

Every command, the Python API, the tuning session and the worker processes load a recording
here, so the ``mneme_recording_loaded`` event fires wherever one is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mneme.core import events
from mneme.core.errors import UsageError
from mneme.core.records import RecordedExecution


def load_recording(record_db: Any) -> RecordedExecution:
    """A RecordedExecution from a path (a database file, or a folder holding exactly one); one given is returned."""
    if isinstance(record_db, RecordedExecution):
        return record_db
    path = Path(record_db)
    if path.is_dir():
        candidates = sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
        candidates = [p for p in candidates if _looks_like_database(p)]
        if len(candidates) != 1:
            names = ", ".join(p.name for p in candidates) or "none"
            raise UsageError(
                f"{path}: expected one recording database (*.json) in the folder, found {names}; name the database file"
            )
        path = candidates[0]
    recording = RecordedExecution.from_json(path)
    events.emit("mneme_recording_loaded", recording=recording)
    return recording


def _looks_like_database(path: Path) -> bool:
    try:
        head = path.read_text(errors="replace")[:4096]
    except OSError:
        return False
    return '"KernelName"' in head or '"StaticHash"' in head
