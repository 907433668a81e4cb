"""`mneme import-original` and `mneme export-original`: exchange recordings with the original Mneme's tools."""

from __future__ import annotations

from pathlib import Path

import click

from mneme.core.errors import EXIT_CODES_HELP
from mneme.core.console import current
from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_cli_commands():
    return [import_original_command, export_original_command]


@click.command("import-original", epilog=EXIT_CODES_HELP)
@click.argument("source", type=click.Path(exists=True))
@click.option(
    "-o",
    "--out",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder of the Mneme recording (default: SOURCE's folder/.mneme-import).",
)
@click.option(
    "--backend",
    default=None,
    help="Backend of the recording (default: from the IR modules' target triple, .ll or .bc).",
)
@click.option("--arch", default=None, help="Architecture, e.g. sm_90 (default: from the IR modules' target-cpu).")
@click.option(
    "--allow-files-outside",
    is_flag=True,
    help="Read files the database names outside its folder (the original writes absolute paths); "
    "only for a recording you trust.",
)
def import_original_command(
    source: str, out: str | None, backend: str | None, arch: str | None, allow_files_outside: bool
) -> None:
    """Convert the original Mneme's recordings (a database JSON or a folder of them) to Mneme's format.

    Every layout the original has written is read: the documented one, per-region metadata, and
    epilogues stored as diffs (MNEME_DIFF_V1) or by the `best` mode. Mneme's commands also read an
    original database directly, converting it once into .mneme-import/ beside it.
    """
    from mneme.compat import original_format as fmt
    from mneme.compat.original_format import IMPORT_FOLDER

    path = Path(source)
    folder = path if path.is_dir() else path.parent
    target = Path(out) if out else folder / IMPORT_FOLDER
    if path.is_dir():
        written = fmt.import_folder(path, target, backend=backend, arch=arch, allow_files_outside=allow_files_outside)
    else:
        written = [
            fmt.import_original(path, target, backend=backend, arch=arch, allow_files_outside=allow_files_outside)
        ]
    for db in written:
        current().print(f"imported {db}; replay it with: mneme replay -rdb {db}")


@click.command("export-original", epilog=EXIT_CODES_HELP)
@click.option(
    "-rdb",
    "--record-db",
    "record_db",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Mneme recording database to export.",
)
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for the original Mneme's database, IR and snapshot files.",
)
@click.option(
    "--layout",
    default="current",
    show_default=True,
    type=click.Choice(["current", "diff", "best", "bytes", "documented"]),
    help="Snapshot layout: the current release's (per-region metadata, epilogues as diffs; 'diff' is the "
    "same), 'best' (each epilogue a diff or full, whichever is smaller), 'bytes' (full epilogues), "
    "or the documented version's.",
)
def export_original_command(record_db: str, out: str, layout: str) -> None:
    """Write a Mneme recording in the original Mneme's format (for the original's tools)."""
    from mneme.compat.original_format import export_original

    current().print(f"exported {export_original(record_db, out, layout=layout)}")
