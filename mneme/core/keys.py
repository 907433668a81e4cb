"""Unknown keys in a YAML/JSON input are refused by name, with the nearest valid key.

A misspelt key (`blok:`, `shared_memory:`) silently ignored would run something other than what
the user wrote; every reader of a description, space, configuration or options mapping calls
`check_keys` on the mappings it reads.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from mneme.core.errors import FormatError


def nearest(name: str, valid: Iterable[str]) -> str | None:
    """The valid key closest to `name`, when one is close enough to be a likely misspelling."""
    valid = sorted(valid)
    swapped = [v for v in valid if sorted(v) == sorted(name)]  # two letters swapped: `stpe` is `step`
    if swapped:
        return swapped[0]
    found = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return found[0] if found else None


def check_keys(
    mapping: Mapping[Any, Any],
    valid: Iterable[str],
    source: str | os.PathLike | None,
    field: str | None = None,
    *,
    error: type[Exception] = FormatError,
) -> None:
    """Raise `error` naming the first key of `mapping` not in `valid`, the nearest valid one and all of them.

    `error` is FormatError (a file's content: exit 2) by default; a UsageError subclass for
    mappings given on the command line.
    """
    valid = sorted(set(valid))
    unknown = sorted(str(k) for k in mapping if k not in valid)
    if not unknown:
        return
    key = unknown[0]
    near = nearest(key, valid)
    hint = f"; did you mean {near!r}?" if near else ""
    more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
    message = f"unknown key {key!r}{more}{hint} Valid keys: {', '.join(valid)}"
    where = f"{field}.{key}" if field else key
    if error is FormatError or issubclass(error, FormatError):
        raise error(source, message, field=where)
    prefix = f"{os.fspath(source)}: " if source is not None else ""
    raise error(f"{prefix}{where}: {message}")
