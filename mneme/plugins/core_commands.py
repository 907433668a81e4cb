"""The core `mneme` commands: plugins, inspect, clean, copy, move, config."""

from __future__ import annotations

import json
import platform
import shutil
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from mneme import __version__
from mneme.core import plaintable, plugins
from mneme.core.console import current as _console
from mneme.core.errors import DISTRIBUTION, EXIT_CODES_HELP, MnemeError, UsageError
from mneme.core.printable import markup

if TYPE_CHECKING:
    from mneme.core.records import RecordedExecution


@click.command("plugins", epilog="Exit codes: 0 ok; 1 internal error; 2 invalid options.")
@click.option("--parameters", is_flag=True, help="List the configuration parameters plugins declare instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def plugins_command(parameters: bool, as_json: bool) -> None:
    """List every registered plugin: what it provides, its distribution and version, usable backends.

    The plugin column is the name `mneme -p no:NAME` (or MNEME_DISABLE_PLUGINS=NAME,...) disables.
    """
    if parameters:
        if as_json:
            from mneme.core import params

            click.echo(
                json.dumps(
                    [
                        {
                            "parameter": k.name,
                            "flag": k.flag,
                            "type": k.type,
                            "optional": k.optional,
                            "default": k.default,
                            "low": k.low,
                            "high": k.high,
                            "choices": k.choices,
                            "stage": k.stage,
                            "plugin": k.plugin,
                            "help": k.help,
                        }
                        for k in params.knobs().values()
                    ],
                    indent=2,
                    default=repr,
                )
            )
            return
        _parameters_table()
        return
    columns = ("kind", "name", "plugin", "distribution", "version", "status")
    rows = []
    for item in sorted(plugins.provided(), key=lambda p: (p.kind, p.name)):
        status = ""
        if item.missing_extra:
            extra = item.missing_extra
            status = f"needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"
        elif item.kind == "backend":
            availability = plugins.availability(item)
            status = "usable" if availability.usable else f"unusable: {availability.reason}"
        rows.append((item.kind, item.name, item.plugin, item.distribution, item.version, status))
    for name, by in sorted(plugins.replaced().items()):
        dist, version = plugins.origin(name)
        rows.append(("replaced", "", name, dist, version, f"replaced by plugin {by!r}"))
    for name in plugins.disabled():
        rows.append(("disabled", "", name, "", "", "disabled (-p no:NAME or MNEME_DISABLE_PLUGINS)"))
    for bad in plugins.broken():
        rows.append(("broken", "", bad.name, bad.distribution, bad.version, f"failed to load {bad.value}: {bad.error}"))
    if as_json:
        click.echo(json.dumps([dict(zip(columns, row)) for row in rows], indent=2, default=str))
        return
    # Piped output is drawn without rich's layout engine (start-up, issue 27; docs/cli.md).
    plaintable.print_table(None, "Mneme plugins", columns, rows)


def _parameters_table() -> None:
    from mneme.core import params

    rows = []
    for knob in params.knobs().values():
        values = (
            f"{knob.low}..{knob.high}"
            if knob.low is not None or knob.high is not None
            else ", ".join(repr(c) for c in knob.choices)
            if knob.choices
            else ""
        )
        kind = knob.type + (" or none" if knob.optional else "")
        rows.append((knob.name, knob.flag, kind, repr(knob.default), values, knob.stage, knob.plugin, knob.help))
    plaintable.print_table(
        None,
        "configuration parameters declared by plugins (`mneme replay` / `mneme ir` flags)",
        ("parameter", "flag", "type", "default", "values", "stage", "plugin", "help"),
        rows,
    )


# -- inspect ------------------------------------------------------------------------------------


def _database_paths(paths: tuple[str, ...]) -> list[Path]:
    """The database files named, a folder standing for every database directly inside it."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if not path.is_dir():
            found.append(path)
            continue
        from mneme.core import limits

        inside = []
        for candidate in sorted(path.glob("*.json")):
            try:  # a FIFO, a device or an unreadable sibling is not a database: skipped, never waited on
                data = limits.load_json(limits.read_text(candidate, "recording database"), candidate)
            except MnemeError:
                continue
            if isinstance(data, dict) and "StaticHash" in data and "KernelName" in data:
                inside.append(candidate)
        if not inside:
            raise UsageError(f"{path} holds no recording database (<static-hash>.json)")
        found += inside
    return found


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _snapshot_summary(path: Path, base: Any = None) -> tuple[dict[str, Any], Any]:
    """File size, regions, bytes, globals and verification policies of one snapshot file."""
    from mneme.core.snapshot import Snapshot

    info: dict[str, Any] = {"file": path.name, "file_size": path.stat().st_size}
    try:
        snap = Snapshot.open(path, base=base)
    except MnemeError as exc:
        info["error"] = str(exc)
        return info, None
    regions = list(snap.regions)
    info["regions"] = len(regions)
    info["bytes"] = sum(r.size for r in regions)
    info["stored_bytes"] = sum(r.stored_size for r in regions)
    info["encodings"] = sorted({r.encoding for r in regions})
    info["globals"] = len(snap.globals)
    info["args_size"] = len(snap.args)
    info["policies"] = sorted({str(r.policy) for r in regions})
    return info, snap


def arg_text(kind: str, data: bytes) -> str:
    """One recorded argument value as a performance engineer reads it."""
    if kind == "pointer" and len(data) in (4, 8):
        return f"{int.from_bytes(data, 'little'):#x}"
    if kind == "int" and len(data) in (1, 2, 4, 8):
        return str(int.from_bytes(data, "little", signed=True))
    if kind == "float" and len(data) in (2, 4, 8):
        return f"{struct.unpack('<' + {2: 'e', 4: 'f', 8: 'd'}[len(data)], data)[0]:g}"
    return data.hex() if len(data) <= 16 else f"{data[:16].hex()}... ({len(data)} B)"


def _summary(rec: RecordedExecution) -> dict[str, Any]:
    instances = {}
    for key, inst in rec.items():
        prologue, base = _snapshot_summary(inst.prologue_path)
        epilogue, snap = _snapshot_summary(inst.epilogue_path, base)
        for opened in (snap, base):
            getattr(opened, "close", lambda: None)()
        instances[key] = {"prologue": prologue, "epilogue": epilogue}
    return {"path": str(rec.path), "database": rec.to_dict(), "snapshots": instances}


def _print_summary(rec: RecordedExecution, summary: dict[str, Any]) -> None:
    from rich.table import Table  # here: `mneme plugins` must not pay for it (start-up, issue 27)

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    head.add_row("kernel", markup(rec.kernel_name))  # names are data: control characters escaped
    from mneme.core.demangle import demangle

    head.add_row("demangled", markup(rec.demangled_name or demangle(rec.kernel_name)))
    head.add_row("static hash", rec.static_hash)
    head.add_row("backend / arch", f"{markup(rec.backend)} / {markup(rec.arch)}")
    if rec.modules:
        size = sum(f.stat().st_size for f in rec.llvm_files)
        head.add_row(
            "code",
            f"LLVM IR, {len(rec.modules)} module(s), {_size(size)}: " + ", ".join(markup(m) for m in rec.modules),
        )
    for image in rec.images:
        size = (rec.folder / image.path).stat().st_size
        head.add_row(
            "code" if not rec.modules else "binary", markup(f"{image.kind} {image.path.as_posix()} ({_size(size)})")
        )
    if rec.va_size:
        head.add_row("VA range", f"{rec.va_addr:#x} .. {rec.va_addr + rec.va_size:#x} ({_size(rec.va_size)})")
    else:
        head.add_row("VA range", "none recorded")
    if rec.globals:
        head.add_row("globals", ", ".join(markup(f"{n} ({_size(s)})") for n, s in rec.globals.items()))
    _console().print(f"[bold]{markup(rec.path)}[/]", highlight=False)
    _console().print(head)

    args = Table(title="arguments", title_justify="left")
    for column in ("#", "name", "kind", "offset", "size", "specializable"):
        args.add_column(column, justify="right" if column in ("#", "offset", "size") else "left")
    for i, arg in enumerate(rec.args):
        args.add_row(
            str(i),
            markup(arg.name),
            markup(arg.kind),
            str(arg.offset),
            str(arg.size),
            "yes" if arg.specializable else "no",
        )
    _console().print(args)

    table = Table(title=f"instances ({len(rec)})", title_justify="left")
    for column in ("dynamic hash", "grid", "block", "shared mem", "occurrences"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("shared mem", "occurrences") else "left")
    table.add_column("arguments")
    for key, inst in rec.items():
        values = " ".join(f"{a.name}={arg_text(a.kind, v)}" for a, v in zip(rec.args, inst.arg_values))
        how = (["cooperative"] if inst.cooperative else []) + (
            [f"clusters {inst.cluster_dim}"] if inst.cluster_dim is not None else []
        )
        grid = ", ".join([str(inst.grid_dim), *how])
        table.add_row(markup(key), grid, str(inst.block_dim), _size(inst.shared_mem), str(inst.occ), markup(values))
    _console().print(table)

    snaps = Table(title="snapshots", title_justify="left")
    for column in ("dynamic hash", "prologue", "epilogue", "verification"):
        snaps.add_column(column, no_wrap=column == "dynamic hash")
    for key in rec:
        cells = []
        for side in ("prologue", "epilogue"):
            info = summary["snapshots"][key][side]
            if "error" in info:
                cells.append(f"[red]unreadable: {info['error']}[/]")
            elif "regions" in info:
                n, g = info["regions"], info["globals"]
                cells.append(
                    f"{_size(info['bytes'])}, {n} region{'s' * (n != 1)}"
                    + (f" + {g} global{'s' * (g != 1)}" if g else "")
                    + (f", {'/'.join(info['encodings'])}" if info["encodings"] else "")
                    + f"; file {_size(info['file_size'])}"
                )
            else:
                cells.append(f"file {_size(info['file_size'])}")
        policies = ", ".join(summary["snapshots"][key]["epilogue"].get("policies", [])) or "-"
        snaps.add_row(key, *cells, policies)
    _console().print(snaps)


@click.command("inspect", epilog=EXIT_CODES_HELP)
@click.argument("databases", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the databases and snapshot summaries as JSON.")
def inspect_command(databases: tuple[str, ...], as_json: bool) -> None:
    """Summarize recording databases (DB files, or folders holding them)."""
    from mneme.core.records import RecordedExecution  # here: `mneme plugins` must not import the records

    records = [RecordedExecution.from_json(p) for p in _database_paths(databases)]
    summaries = [_summary(rec) for rec in records]
    if as_json:
        click.echo(json.dumps(summaries, indent=2))
    else:
        for rec, summary in zip(records, summaries):
            _print_summary(rec, summary)
    broken = [
        (s["path"], k, side, info["error"])
        for s in summaries
        for k, sides in s["snapshots"].items()
        for side, info in sides.items()
        if "error" in info
    ]
    if broken:
        raise MnemeError(f"{len(broken)} snapshot file(s) unreadable, first: {broken[0][3]}")


# -- clean, copy, move ----------------------------------------------------------------------------


@click.command("clean", epilog=EXIT_CODES_HELP)
@click.argument("databases", nargs=-1, required=True, type=click.Path())
@click.option("-n", "--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
def clean_command(databases: tuple[str, ...], dry_run: bool) -> None:
    """Delete recording databases and the files they reference inside their folders.

    Files another database in the same folder still references are kept.
    """
    from mneme.core.records import clean_records

    report = clean_records(databases, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for db in report.databases:
        _console().print(f"{verb} {db}", highlight=False)
    if dry_run:
        for f in report.removed:
            _console().print(f"{verb} {f}", highlight=False)
    _console().print(
        f"{len(report.databases)} database(s), {len(report.removed)} file(s) "
        + ("to remove" if dry_run else "removed")
        + (f", {len(report.kept)} shared file(s) kept" if report.kept else ""),
        highlight=False,
    )
    _print_foreign_left(report.foreign)


def _print_foreign_left(foreign) -> None:
    # Another tool's database: Mneme acted on its conversion; the tool's own files are not Mneme's to delete.
    for db in foreign:
        _console().print(
            f"left {db} and the files it names in place (another tool's format; only its "
            "conversion was acted on): delete them with that tool or by hand",
            highlight=False,
        )


@click.command("copy", epilog=EXIT_CODES_HELP)
@click.argument("databases", nargs=-1, required=True, type=click.Path())
@click.argument("dest", type=click.Path())
def copy_command(databases: tuple[str, ...], dest: str) -> None:
    """Copy recording databases with every file they reference into folder DEST."""
    from mneme.core.records import copy_records

    report = copy_records(databases, dest)
    for db in report.databases:
        _console().print(f"wrote {db}", highlight=False)


@click.command("move", epilog=EXIT_CODES_HELP)
@click.argument("databases", nargs=-1, required=True, type=click.Path())
@click.argument("dest", type=click.Path())
def move_command(databases: tuple[str, ...], dest: str) -> None:
    """Move recording databases with every file they reference into folder DEST."""
    from mneme.core.records import copy_records

    report = copy_records(databases, dest, move=True)
    for db in report.databases:
        _console().print(f"wrote {db}", highlight=False)
    if report.kept:
        _console().print(f"kept {len(report.kept)} file(s) other databases still reference", highlight=False)
    _print_foreign_left(report.foreign)


# -- config ---------------------------------------------------------------------------------------

#: Environment variables Mneme reads, with what they set.
TOOLS = ("clang-19", "ld.lld-19", "llvm-cxxfilt-19", "c++filt", "nvcc", "ptxas")


def cache_dir() -> Path:
    """Where cached build products go (the build cache's own rule)."""
    from mneme.core.native import cache_root

    return cache_root()


def _cache_usage(root: Path) -> str:
    if not root.is_dir():
        return "not created yet"
    files = [p for p in root.rglob("*") if p.is_file()]
    return f"{len(files)} files, {_size(sum(p.stat().st_size for p in files))}"


def effective_config() -> dict[str, Any]:
    import mneme

    backends = {}
    for item in plugins.provided("backend"):
        try:
            availability = plugins.availability(item)
            backends[item.name] = {
                "distribution": item.distribution,
                "version": item.version,
                "usable": availability.usable,
                "reason": availability.reason,
            }
        except Exception as exc:  # noqa: BLE001 - a broken backend plugin must not hide the others
            backends[item.name] = {
                "distribution": item.distribution,
                "version": item.version,
                "usable": False,
                "reason": f"availability check failed: {exc!r}",
            }
    from mneme.core import backend as _backend  # noqa: F401 - registers the installed backends' variables
    from mneme.core import envvars

    environment = {}
    for name, var in envvars.registry().items():
        environment[name] = {
            "value": envvars.raw(name) or "",
            "default": var.default,
            "meaning": var.help,
            "component": var.component,
        }
    for name, value in envvars.unregistered().items():
        import difflib

        near = difflib.get_close_matches(name, list(environment), n=1)
        environment[name] = {
            "value": value,
            "default": "",
            "component": "unknown",
            "meaning": "not read by Mneme" + (f"; did you mean {near[0]}?" if near else ""),
        }
    tool_paths = {tool: shutil.which(tool) or "" for tool in TOOLS}
    if shutil.which("ptxas") is None and Path("/usr/local/cuda/bin/ptxas").exists():
        tool_paths["ptxas"] = "/usr/local/cuda/bin/ptxas"
    return {
        "version": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "package": str(Path(mneme.__file__).parent),
        "cache_dir": str(cache_dir()),
        "cache_usage": _cache_usage(cache_dir()),
        "environment": environment,
        "backends": backends,
        "tools": tool_paths,
    }


@click.command("config", epilog="Exit codes: 0 ok; 1 internal error; 2 invalid options.")
@click.argument("key", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the configuration as JSON.")
def config_command(key: str | None, as_json: bool) -> None:
    """Show the effective configuration: versions, cache folder, environment, backends, tools.

    The environment table lists every MNEME_* variable Mneme reads (mneme.core.envvars), and
    any MNEME_* variable that is set but read by nothing, with the nearest real name.

    KEY prints one value: a top-level key of `--json` (version, package, cache_dir, ...) or
    one of the original Mneme's keys (cc, cxx, cuda, launcher, cmakedir, prefix, libdir, includedir,
    cflags, ldflags): cc, cxx and cuda print one executable each, a compiler through mneme-cc.
    """
    if key is not None:
        from mneme.compat import config_keys

        top = {k: v for k, v in effective_config().items() if isinstance(v, str)} if key not in config_keys.KEYS else {}
        click.echo(top[key] if key in top else config_keys.value(key))
        return
    config = effective_config()
    if as_json:
        click.echo(json.dumps(config, indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    for key in ("version", "python", "package", "cache_dir", "cache_usage"):
        head.add_row(key.replace("_", " "), config[key])
    _console().print(head)
    env = Table(title="environment", title_justify="left")
    for column in ("variable", "value", "default", "component", "meaning"):
        env.add_column(column)
    for name, entry in config["environment"].items():
        env.add_row(
            name,
            escape(entry["value"]) if entry["value"] else "[dim](unset)[/]",
            escape(entry["default"]),
            entry["component"],
            escape(entry["meaning"]),
        )
    _console().print(env)
    table = Table(title="backends", title_justify="left")
    for column in ("backend", "distribution", "status"):
        table.add_column(column)
    for name, entry in sorted(config["backends"].items()):
        status = "usable" if entry["usable"] else f"unusable: {entry['reason']}"
        table.add_row(name, f"{entry['distribution']} {entry['version']}", status)
    _console().print(table)
    tools = Table(title="tools", title_justify="left")
    tools.add_column("tool")
    tools.add_column("path")
    for tool, path in config["tools"].items():
        tools.add_row(tool, path or "[dim]not found[/]")
    _console().print(tools)


COMMANDS = [plugins_command, inspect_command, clean_command, copy_command, move_command, config_command]
