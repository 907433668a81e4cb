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


_base_option = click.option(
    "--base", type=click.Path(exists=True, dir_okay=False), help="The prologue, for an epilogue stored as a diff."
)


@click.group("snapshot")
def snapshot_group() -> None:
    """Inspect, verify and compare snapshot files (DeviceState.*.mneme)."""


_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")

_EXIT_CODES = "Exit codes: 0 ok; 1 internal error; 2 invalid input (a malformed file, bad options)"


def _info_json(path: str, snap) -> dict:
    return {
        "path": path,
        "kind": snap.kind.value,
        "version": snap.version,
        "static_hash": snap.static_hash,
        "dynamic_hash": snap.dynamic_hash,
        "producer": snap.producer,
        "num_args": snap.num_args,
        "args_bytes": len(snap.args),
        "globals": {n: len(d) for n, d in sorted(snap.globals.items())},
        "regions": [
            {
                "address": r.addr,
                "size": r.size,
                "encoding": r.encoding,
                "stored": r.stored_size,
                "ratio": r.ratio,
                "chunks": r.num_chunks,
                "policy": str(r.policy),
            }
            for r in snap.regions
        ],
    }


@snapshot_group.command("info", epilog=_EXIT_CODES + "; 130 interrupted.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@_base_option
@_json_option
def info_command(path: str, base: str | None, as_json: bool) -> None:
    """Header, arguments, regions (encoding, size on disk, policy) and globals of one snapshot."""
    console = _console()

    with _opened(path, base) as snap:
        if as_json:
            import json

            click.echo(json.dumps(_info_json(path, snap), indent=2))
            return
        console.print(
            f"[bold]{Path(path).name}[/]: {snap.kind.value}, format version {snap.version}, "
            f"static {snap.static_hash or '-'}, dynamic {snap.dynamic_hash or '-'}, "
            f"written by {snap.producer or '-'}",
            highlight=False,
        )
        console.print(
            f"arguments: {snap.num_args} in {len(snap.args)} bytes; globals: "
            + (", ".join(f"{n} ({len(d)} B)" for n, d in sorted(snap.globals.items())) or "none"),
            highlight=False,
        )
        table = Table(title="regions", title_justify="left")
        for column in ("address", "size", "encoding", "stored", "ratio", "chunks", "policy"):
            table.add_column(
                column,
                justify="right" if column in ("size", "stored", "ratio", "chunks") else "left",
                no_wrap=column != "policy",
            )
        for r in snap.regions:
            table.add_row(
                f"0x{r.addr:x}",
                _size(r.size),
                r.encoding,
                _size(r.stored_size),
                f"{r.ratio:.2f}",
                str(r.num_chunks),
                str(r.policy),
            )
        console.print(table)


@snapshot_group.command(
    "verify", epilog=_EXIT_CODES + "; 3 a snapshot is corrupt (a checksum or block is wrong); 130 interrupted."
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_base_option
@_json_option
def verify_command(paths: tuple[str, ...], base: str | None, as_json: bool) -> None:
    """Read every chunk of each snapshot and check every checksum; exit 3 at the first bad one."""
    from mneme.core.errors import CorruptFileError, NotVerifiedError

    console = _console()
    checked = []
    for path in paths:
        try:
            with _opened(path, base) as snap:
                snap.verify()
                checked.append({"path": path, "ok": True, "regions": len(snap.regions), "size": snap.size})
        except CorruptFileError as exc:
            if as_json:
                import json

                click.echo(json.dumps(checked + [{"path": path, "ok": False, "error": str(exc)}], indent=2))
            raise NotVerifiedError(str(exc)) from exc
        if not as_json:
            console.print(f"{path}: ok ({len(snap.regions)} regions, {_size(snap.size)})", highlight=False)
    if as_json:
        import json

        click.echo(json.dumps(checked, indent=2))


@snapshot_group.command("compare", epilog=_EXIT_CODES + "; 3 the snapshots differ; 130 interrupted.")
@click.argument("expected", type=click.Path(exists=True, dir_okay=False))
@click.argument("actual", type=click.Path(exists=True, dir_okay=False))
@_base_option
def compare_command(expected: str, actual: str, base: str | None) -> None:
    """Compare two snapshots under EXPECTED's verification policies; exit 3 when they differ."""
    console = _console()
    from mneme.core.errors import NotVerifiedError
    from mneme.core.snapshot import Snapshot, compare

    with _opened(expected, base) as exp, Snapshot.open(actual, base=exp.base) as act:  # both may diff --base
        report = compare(exp, act)
    for line in report.mismatches:
        console.print(line, highlight=False, soft_wrap=True)
    if not report.ok:
        raise NotVerifiedError(f"{actual} differs from {expected} in {len(report.mismatches)} region(s) or global(s)")
    console.print(f"{actual} matches {expected} ({len(report.regions)} regions)", highlight=False)


@hookimpl
def mneme_cli_commands():
    return [snapshot_group]
