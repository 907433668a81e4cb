"""`mneme plugins` (more core commands are added beside it)."""

from __future__ import annotations

import click
from rich.table import Table

from mneme.core import plugins
from mneme.core.cli import console


@click.command("plugins")
def plugins_command() -> None:
    """List every registered plugin, its distribution and version, and usable backends."""
    table = Table(title="Mneme plugins")
    for column in ("kind", "name", "distribution", "version", "status"):
        table.add_column(column)
    for item in sorted(plugins.provided(), key=lambda p: (p.kind, p.name)):
        status = ""
        if item.kind == "backend":
            availability = item.obj().availability()
            status = "usable" if availability.usable else f"unusable: {availability.reason}"
        table.add_row(item.kind, item.name, item.distribution, item.version, status)
    console.print(table)


COMMANDS = [plugins_command]
