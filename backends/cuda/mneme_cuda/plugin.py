"""Registers the CUDA backend with Mneme (entry point `cuda` in group `mneme`)."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_backends():
    from mneme_cuda.backend import CudaBackend

    return [CudaBackend]


@hookimpl
def mneme_cli_commands():
    from mneme_cuda.commands import COMMANDS

    return COMMANDS
