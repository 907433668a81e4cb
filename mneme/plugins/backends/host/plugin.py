"""Registers the host backend (built in, registered like any third-party backend)."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_backends():
    from mneme.plugins.backends.host.backend import HostBackend  # lazily: `mneme --help` need not load LLVM

    return [HostBackend]
