"""Built-in core CLI commands, registered as a plugin."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_cli_commands():
    from mneme.core.recorder.command import record_command
    from mneme.plugins import core_commands

    return [*core_commands.COMMANDS, record_command()]
