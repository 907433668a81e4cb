"""Registers the HIP backend with Mneme (entry point `hip` in group `mneme`)."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


@hookimpl
def mneme_backends():
    # Described: `mneme plugins` asks hipapi (hip-python only where it is installed), not the backend (LLVM).
    return [Described("hip", "mneme_hip.backend:HipBackend", availability="mneme_hip.hipapi:availability", priority=20)]


@hookimpl
def mneme_recorders():
    return [
        Described(
            "hip",
            "mneme_hip.commands:HipRecorder",
            description="records launches of programs that use the HIP runtime API",
        )
    ]


@hookimpl
def mneme_cli_commands(cli, registry):
    from mneme_hip.commands import COMMANDS

    return COMMANDS
