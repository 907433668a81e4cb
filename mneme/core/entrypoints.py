"""The installed entry points of group ``mneme``, read once per process (the plugin manager loads them;
the command index is keyed by them)."""

from __future__ import annotations

import functools
import importlib.metadata

from mneme.core.hookspecs import PROJECT


@functools.lru_cache(maxsize=1)
def entry_points() -> tuple[tuple[str, str, importlib.metadata.EntryPoint], ...]:
    """(distribution, version, entry point) of every installed entry point of group ``mneme``.

    Only the distributions that declare one have their metadata parsed (parsing every installed
    distribution's costs ~0.1 s of start-up).
    """
    found = []
    for dist in importlib.metadata.distributions():
        eps = [ep for ep in dist.entry_points if ep.group == PROJECT]
        if eps:
            metadata = dist.metadata
            found += [(metadata["name"] or "", metadata["version"] or "", ep) for ep in eps]
    return tuple(found)
