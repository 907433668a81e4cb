"""The `mneme ir` commands (show, compile, resources, diff, passes), registered as a plugin."""

from __future__ import annotations

import click

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_cli_commands():
    return [ir_group]


@click.group("ir")
def ir_group() -> None:
    """Inspect, transform and compile kernel IR."""
