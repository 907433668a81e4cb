"""`mneme snapshot`: look inside snapshot files, check every checksum, compare two of them."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click
from rich.table import Table

from mneme.core.console import current as _console
from mneme.core.hookspecs import hookimpl




@contextlib.contextmanager
def _opened(path: str, base: str | None):
    """The snapshot at `path` (with its prologue `base`, if given), both closed afterwards."""
    from mneme.core.snapshot import Snapshot

    with contextlib.ExitStack() as stack:
        prologue = stack.enter_context(Snapshot.open(base)) if base else None
        yield stack.enter_context(Snapshot.open(path, base=prologue))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


_base_option = click.option("--base", type=click.Path(exists=True, dir_okay=False),
                            help="The prologue, for an epilogue stored as a diff.")  # fmt: skip


@click.group("snapshot")
def snapshot_group() -> None:
    """Inspect, verify and compare snapshot files (DeviceState.*.mneme)."""


@snapshot_group.command("info")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@_base_option
def info_command(path: str, base: str | None) -> None:
    """Header, arguments, regions (encoding, size on disk, policy) and globals of one snapshot."""
    console = _console()

    with _opened(path, base) as snap:
        console.print(f"[bold]{Path(path).name}[/]: {snap.kind.value}, format version {snap.version}, "
                      f"static {snap.static_hash or '-'}, dynamic {snap.dynamic_hash or '-'}, "
                      f"written by {snap.producer or '-'}", highlight=False)  # fmt: skip
        console.print(f"arguments: {snap.num_args} in {len(snap.args)} bytes; globals: "
                      + (", ".join(f"{n} ({len(d)} B)" for n, d in sorted(snap.globals.items())) or "none"),
                      highlight=False)  # fmt: skip
        table = Table(title="regions", title_justify="left")
        for column in ("address", "size", "encoding", "stored", "ratio", "chunks", "policy"):
            table.add_column(column, justify="right" if column in ("size", "stored", "ratio", "chunks") else "left",
                             no_wrap=column != "policy")  # fmt: skip
        for r in snap.regions:
            table.add_row(f"0x{r.addr:x}", _size(r.size), r.encoding, _size(r.stored_size), f"{r.ratio:.2f}",
                          str(r.num_chunks), str(r.policy))  # fmt: skip
        console.print(table)


@snapshot_group.command("verify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_base_option
def verify_command(paths: tuple[str, ...], base: str | None) -> None:
    """Read every chunk of each snapshot and check every checksum; exit 1 at the first bad one."""
    console = _console()

    for path in paths:
        with _opened(path, base) as snap:
            snap.verify()
            console.print(f"{path}: ok ({len(snap.regions)} regions, {_size(snap.size)})", highlight=False)


@snapshot_group.command("compare")
@click.argument("expected", type=click.Path(exists=True, dir_okay=False))
@click.argument("actual", type=click.Path(exists=True, dir_okay=False))
@_base_option
def compare_command(expected: str, actual: str, base: str | None) -> None:
    """Compare two snapshots under EXPECTED's verification policies; exit 1 when they differ."""
    console = _console()
    from mneme.core.errors import MnemeError
    from mneme.core.snapshot import Snapshot, compare

    with _opened(expected, base) as exp, Snapshot.open(actual, base=exp.base) as act:  # both may diff --base
        report = compare(exp, act)
    for line in report.mismatches:
        console.print(line, highlight=False, soft_wrap=True)
    if not report.ok:
        raise MnemeError(f"{actual} differs from {expected} in {len(report.mismatches)} region(s) or global(s)")
    console.print(f"{actual} matches {expected} ({len(report.regions)} regions)", highlight=False)


@hookimpl
def mneme_cli_commands():
    return [snapshot_group]
