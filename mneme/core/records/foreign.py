"""Recording databases of other tools, read through the `mneme_recording_formats` plugins.

A database without `SchemaVersion` is offered to each registered format in turn; the first
that claims it converts it into a Mneme recording (once, into a cache beside it) and names
the converted database, which the caller then reads as any other. Scans for other databases
(what clean and move must keep) ask with `create=False`: they never convert a recording they
were not asked about.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mneme.core import plugins


def convert(path: str | os.PathLike, data: Any, *, create: bool = True) -> Path | None:
    """The Mneme database converted from `path` (its parsed JSON `data`).

    None when no format claims it, or, with `create=False`, when no current conversion exists.
    """
    for _name, fmt in sorted(plugins.registry("recording-format").items()):
        if fmt.claims(data):
            found = fmt.convert(path, create=create)
            return Path(found) if found is not None else None
    return None


def claimed(path: str | os.PathLike) -> bool:
    """Whether a registered format claims the database at `path` (another tool's, converted on use)."""
    from mneme.core import limits
    from mneme.core.errors import MnemeError

    try:
        data = limits.load_json(limits.read_text(Path(path), "recording database"), Path(path))
    except (MnemeError, OSError):
        return False
    return (
        isinstance(data, dict)
        and "SchemaVersion" not in data
        and any(fmt.claims(data) for fmt in plugins.registry("recording-format").values())
    )
