"""Registers the HIP backend with Mneme (entry point `hip` in group `mneme`)."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_backends():
    from mneme_hip.backend import HipBackend  # lazily: `mneme --help` need not load LLVM

    return [HipBackend]


@hookimpl
def mneme_cli_commands(cli, registry):
    from mneme_hip.commands import COMMANDS

    return COMMANDS
