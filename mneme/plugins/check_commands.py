"""`mneme ir check`: per kernel, whether a backend can run it and every construct it cannot (runs nothing).

Inputs: IR files (.ll/.bc), a recording (-rdb) or a binary built by `mneme-cc` (its embedded IR).
The answer is the backend's own `Backend.check`, the check its compile makes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import attrs
import click
from rich.table import Table

from mneme.core.backend import backends, get_backend
from mneme.core.console import current
from mneme.core.errors import EXIT_CODES_HELP, MnemeError, UsageError


@attrs.frozen
class Verdict:
    kernel: str
    source: str
    unsupported: tuple[str, ...]

    @property
    def runnable(self) -> bool:
        return not self.unsupported


def _modules(inputs: tuple[str, ...], rdb: str | None):
    from mneme.core import ir  # here, not at import: the `mneme ir` group must load without LLVM
    from mneme.core.records import RecordedExecution

    """(label, kernels, module or loader) for each input: IR file, recording or mneme-cc binary."""
    if rdb:
        if inputs:
            raise UsageError("give IR files, binaries or -rdb, not both")
        rec = RecordedExecution.from_json(rdb)
        if not rec.llvm_files:
            raise UsageError(f"{rdb}: the recording of {rec.kernel_name!r} carries no LLVM IR; nothing to check")
        yield str(rdb), [rec.kernel_name], ir.link(rec.llvm_files, rec.kernel_name, prune=False, internalize=False)
        return
    if not inputs:
        raise UsageError("give an IR file (.ll or .bc), a binary built by mneme-cc, or a recording with -rdb")
    # Files, not modules: `ir.link` links a file once and hands each kernel its own part, where a
    # module of hundreds of kernels would be printed and pruned whole for every kernel.
    with tempfile.TemporaryDirectory(prefix="mneme-check-") as scratch:
        for n, path in enumerate(inputs):
            head = Path(path).read_bytes()[:4]
            if head == b"\x7fELF" or head == b"!<ar":
                from mneme.instrument.section import read_entries

                entries = read_entries(path)
                if not entries:
                    raise UsageError(f"{path} has no embedded IR (.mneme_ir); build it with mneme-cc")
                for k, entry in enumerate(entries):
                    bitcode = Path(scratch, f"{n}.{k}.bc")
                    bitcode.write_bytes(entry.bitcode)
                    yield f"{path}:{entry.source or entry.arch}", list(entry.kernels), bitcode
            else:
                module = ir.load(Path(path))
                names = ir.kernels(module)
                module.close()
                yield path, names, Path(path)


def check(
    inputs: tuple[str, ...], rdb: str | None, kernel: str | None, backend_name: str, arch: str | None = None
) -> list[Verdict]:
    """The verdict of backend `backend_name` on every kernel of the inputs (or only `kernel`)."""
    if backend_name not in backends():
        raise UsageError(f"no backend {backend_name!r}; installed backends: {', '.join(sorted(backends()))}")
    from mneme.core import ir

    backend = get_backend(backend_name)
    verdicts: list[Verdict] = []
    seen: list[str] = []
    for label, names, source in _modules(inputs, rdb):
        for name in names:
            seen.append(name)
            if kernel is not None and name != kernel:
                continue
            linked = None
            try:
                if isinstance(source, Path):
                    linked = ir.link([source], name)
                found = backend.check(source if linked is None else linked, name, arch)
            except MnemeError as exc:  # e.g. a parameter type it cannot read: not runnable, and why
                found = [str(exc)]
            finally:
                if linked is not None:
                    linked.close()
            verdicts.append(Verdict(name, label, tuple(found)))
    if kernel is not None and not verdicts:
        raise UsageError(f"no kernel {kernel!r} in the input; kernels present: {', '.join(seen) or 'none'}")
    return verdicts


@click.command("check", epilog=EXIT_CODES_HELP)
@click.argument("inputs", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("-rdb", "--record-db", "rdb", type=click.Path(exists=True, dir_okay=False), help="A recording database.")
@click.option("-k", "--kernel", help="Only this kernel (mangled name).")
@click.option(
    "--backend", "backend_name", default="host", show_default=True, help="The backend to ask (host, cuda, hip)."
)
@click.option("--arch", help="Architecture to check for (default: the backend's choice).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def check_command(
    inputs: tuple[str, ...], rdb: str | None, kernel: str | None, backend_name: str, arch: str | None, as_json: bool
) -> None:
    """Say, per kernel, whether BACKEND can run it and name every construct it cannot; runs nothing."""
    verdicts = check(inputs, rdb, kernel, backend_name, arch)
    runnable = sum(v.runnable for v in verdicts)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "backend": backend_name,
                    "total": len(verdicts),
                    "runnable": runnable,
                    "kernels": [
                        {
                            "kernel": v.kernel,
                            "source": v.source,
                            "runnable": v.runnable,
                            "unsupported": list(v.unsupported),
                        }
                        for v in verdicts
                    ],
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"{runnable} of {len(verdicts)} kernels run on the {backend_name} backend")
    for column in ("kernel", "runs", "what it cannot run"):
        table.add_column(column, overflow="fold")
    for v in verdicts:
        table.add_row(v.kernel, "yes" if v.runnable else "no", "; ".join(v.unsupported))
    current().print(table)
