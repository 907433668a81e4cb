"""`list` and `extract`: the kernels whose IR `mneme-cc` embedded in a binary.

They are plain click commands so the `mneme ir` group can adopt them as `mneme ir list`
and `mneme ir extract`; until then this plugin offers them as `mneme embedded list|extract`.
"""

from __future__ import annotations

import json
import os

import click
from rich.table import Table

from mneme.core.console import current as _console
from mneme.core.demangle import demangle
from mneme.core.errors import EXIT_CODES_HELP, UsageError
from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, read_entries
from mneme.instrument.symbols import short_names


def _kernels(binary: str) -> list[tuple[str, EmbeddedEntry]]:
    rows = []
    for entry in read_entries(binary):
        for kernel in entry.kernels:
            rows.append((kernel, entry))
    return rows


def _short(path: str) -> str:
    rel = os.path.relpath(path) if path else ""
    return path if rel.startswith("..") else rel


@click.command("list", epilog=EXIT_CODES_HELP)
@click.argument("binary", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per kernel, for scripts.")
def list_command(binary: str, as_json: bool) -> None:
    """List the kernels with IR embedded in BINARY (object, executable or shared library)."""
    console = _console()

    rows = _kernels(binary)
    if as_json:
        for kernel, e in rows:
            click.echo(
                json.dumps(
                    {
                        "kernel": kernel,
                        "demangled": demangle(kernel),
                        "arch": e.arch,
                        "targets": list(e.targets),
                        "source": e.source,
                        "language": e.language,
                        "rdc": e.rdc,
                        "clang": e.clang_version,
                        "bitcode_bytes": len(e.bitcode),
                    }
                )
            )
        return
    if not rows:
        console.print(
            f"{binary}: no embedded IR (no {SECTION_NAME} section or no kernels); build it with "
            "mneme-cc, and strip it with GNU strip or llvm-strip --keep-section=.mneme_ir"
        )
        return
    table = Table(title=f"Kernels with embedded IR in {os.path.basename(binary)}")
    for column in ("kernel", "arch", "source", "mangled name"):
        table.add_column(column, overflow="fold")
    for kernel, e in rows:
        table.add_row(demangle(kernel), e.arch, _short(e.source), kernel)
    console.print(table)


def select(binary: str, kernel: str, arch: str | None) -> tuple[str, EmbeddedEntry]:
    """The entry defining KERNEL: its mangled or demangled name, or the name without parameters."""
    rows = _kernels(binary)
    if not rows:
        raise UsageError(f"{binary} has no embedded IR ({SECTION_NAME}); build it with mneme-cc")
    for match in (lambda k: k == kernel, lambda k: demangle(k) == kernel, lambda k: kernel in short_names(demangle(k))):
        found = [(k, e) for k, e in rows if match(k)]
        if found:
            break
    else:
        known = ", ".join(sorted({demangle(k) for k, _ in rows}))
        raise UsageError(f"no kernel {kernel!r} in the embedded IR of {binary}; it has: {known}")
    names = sorted({k for k, _ in found})
    if len(names) > 1:
        raise UsageError(f"{kernel!r} names several kernels in {binary}: {', '.join(names)}; give the mangled name")
    archs = sorted({e.arch for _, e in found})
    if arch is not None:
        found = [(k, e) for k, e in found if e.arch == arch]
        if not found:
            raise UsageError(
                f"kernel {kernel!r} in {binary} has IR for {', '.join(archs)}, not {arch}; pick one with --arch"
            )
    elif len(archs) > 1:
        raise UsageError(
            f"kernel {kernel!r} in {binary} has IR for several architectures ({', '.join(archs)}); pick one with --arch"
        )
    return found[0]


@click.command("extract", epilog=EXIT_CODES_HELP)
@click.argument("binary", type=click.Path(exists=True, dir_okay=False))
@click.argument("kernel")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where to write the module: .bc for bitcode, .ll for textual IR.",
)
@click.option("--arch", default=None, help="The architecture to extract when there are several (e.g. sm_90).")
def extract_command(binary: str, kernel: str, output: str, arch: str | None) -> None:
    """Write the embedded IR module that defines KERNEL in BINARY to a file."""
    console = _console()
    from mneme.plugins.ir_sources.embedded import to_ir_module

    mangled, entry = select(binary, kernel, arch)
    to_ir_module(entry, mangled).write(output)
    console.print(f"{demangle(mangled)} ({entry.arch}, from {entry.source}) -> {output}", highlight=False)
