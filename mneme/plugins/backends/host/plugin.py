"""Registers the host backend (built in, registered like any third-party backend)."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


@hookimpl
def mneme_backends():
    # Described: `mneme plugins` asks `availability` without loading LLVM or the host runtime.
    return [
        Described(
            "host",
            "mneme.plugins.backends.host.backend:HostBackend",
            availability="mneme.plugins.backends.host.availability:availability",
            priority=0,
        )
    ]
