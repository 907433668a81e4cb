"""The installed entry points of group ``mneme``, read once per process (the plugin manager loads them;
the command index is keyed by them).

They are read from the distributions' metadata folders on ``sys.path`` (``*.dist-info``,
``*.egg-info``: ``entry_points.txt``, then the name and version of those that declare one), as
`importlib.metadata` finds them, in the same order, without importing it: its import (the
e-mail parser) is a tenth of `mneme --help` (docs/design/interfaces.md, "Plugins").
"""

from __future__ import annotations

import functools
import os
import sys

# The entry-point group, `mneme.core.hookspecs.PROJECT` (not imported: it imports pluggy, which listing commands
# from the command index does not need).
GROUP = "mneme"


class EntryPoint:
    """One entry point: `name`, `value` ("module:attr"), `group`; `load()` imports what it names."""

    __slots__ = ("group", "name", "value")

    def __init__(self, name: str, value: str, group: str = GROUP):
        self.name, self.value, self.group = name, value, group

    def load(self):
        import importlib

        module, _, attr = self.value.partition(":")
        obj = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


@functools.lru_cache(maxsize=1)
def entry_points() -> tuple[tuple[str, str, EntryPoint], ...]:
    """(distribution, version, entry point) of every installed entry point of group ``mneme``, in ``sys.path`` order."""
    found = []
    for folder in _metadata_folders():
        declared = _group(os.path.join(folder, "entry_points.txt"), GROUP)
        if declared:
            name, version = _name_and_version(folder)
            found += [(name, version, EntryPoint(ep_name, value)) for ep_name, value in declared]
    return tuple(found)


def _metadata_folders() -> list[str]:
    folders = []
    for entry in sys.path:
        path = entry or "."
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith((".dist-info", ".egg-info")))
        except OSError:  # not a folder (a zip, a path hook's name)
            continue
        folders += [os.path.join(path, n) for n in names if os.path.isdir(os.path.join(path, n))]
    return folders


def _group(path: str, group: str) -> list[tuple[str, str]]:
    """(name, value) of the entries of section `group` in an ``entry_points.txt``."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return []
    if f"[{group}]" not in text:
        return []
    entries, inside = [], False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
        elif inside and "=" in line:
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.strip()))
    return entries


def _name_and_version(folder: str) -> tuple[str, str]:
    """`Name` and `Version` from the folder's METADATA (PKG-INFO for an egg-info): its header lines."""
    fields: dict[str, str] = {}
    for filename in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, filename), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        break  # the end of the header: the description follows
                    key, sep, value = line.partition(":")
                    if sep and key in ("Name", "Version") and key not in fields:
                        fields[key] = value.strip()
            break
        except OSError:
            continue
    return fields.get("Name", ""), fields.get("Version", "")
