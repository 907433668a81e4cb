"""`mneme ir`: show, compile, measure and compare a kernel's IR under configurations (a plugin)."""

from __future__ import annotations

import copy
import json
import re
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import click

from mneme.core import params
from mneme.core.console import current, echo
from mneme.core.errors import EXIT_CODES_HELP, MnemeError, UsageError
from mneme.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from mneme.core.backend import Backend

# LLVM, the records and the build cache are imported inside the commands that use them, so that
# `mneme ir passes` and `mneme ir --help` load none of them (start-up; docs/design/interfaces.md).

EMITS = ("ll", "ptx", "cubin", "asm", "object", "hsaco")


@hookimpl
def mneme_cli_commands(cli, registry):
    # Each command that takes a configuration gets a flag per declared parameter (--ptxas-opt, ...).
    group = copy.copy(ir_group)
    group.commands = {}
    for name, command in ir_group.commands.items():
        if getattr(command.callback, "takes_configuration", False):
            command = copy.copy(command)
            command.params = command.params + params.click_options(registry.knobs())
        group.add_command(command, name)
    cli.add_command(group)


# -- inputs -----------------------------------------------------------------------------------------


@attrs.define
class Source:
    """The kernel to work on: its linked module, name, and (from a recording) launch and arguments."""

    module: object
    kernel: str
    label: str
    args: bytes | None = None
    arg_layout: list | None = None
    grid: tuple | None = None
    block: tuple | None = None
    arch: str | None = None
    specialize_indexes: list | None = None  # with --arg: only the arguments given


def _dims(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    try:
        parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"launch dimensions must be like 256 or 16,16,1, not {text!r}") from None
    if not 1 <= len(parts) <= 3:
        raise UsageError(f"launch dimensions must have 1 to 3 values, not {text!r}")
    return tuple(parts + [1] * (3 - len(parts)))


def _load_source(ir_files: tuple[str, ...], kernel: str | None, rdb: str | None, record_id: str | None) -> Source:
    from mneme.core import ir

    if rdb:
        from mneme.core.records import RecordedExecution

        if ir_files:
            raise UsageError("give IR files or -rdb, not both")
        rec = RecordedExecution.from_json(rdb)
        if not rec.llvm_files:
            raise UsageError(
                f"{rdb}: the recording of {rec.kernel_name!r} carries no LLVM IR; it can only be replayed from its binary"
            )
        inst = rec.select(record_id)
        module = ir.link(rec.llvm_files, rec.kernel_name, prune=False, internalize=False)
        return Source(
            module,
            rec.kernel_name,
            str(rdb),
            inst.args,
            rec.args,
            inst.grid_dim.as_tuple(),
            inst.block_dim.as_tuple(),
            rec.arch or None,
        )
    if not ir_files:
        raise UsageError("give an IR file (.ll or .bc) and --kernel, or a recording database with -rdb")
    modules = [ir.load(Path(f)) for f in ir_files]
    if kernel is None:
        found = [k for m in modules for k in ir.kernels(m)]
        if len(found) != 1:
            raise UsageError(
                f"{', '.join(ir_files)} define {len(found)} kernels ({', '.join(found) or 'none'}); pick one with --kernel"
            )
        kernel = found[0]
    module = ir.link(modules, kernel, prune=False, internalize=False)
    return Source(module, kernel, ", ".join(ir_files))


def _arg_values(source: Source, values: tuple[str, ...]) -> None:
    """Fill the argument buffer from --arg INDEX=VALUE, read by the IR parameter types."""
    from mneme.core import ir

    if not values:
        return
    params = ir.kernel_params(source.module, source.kernel)
    buf = bytearray(source.args or bytes(params[-1].offset + params[-1].size if params else 0))
    for item in values:
        index_text, _, value = item.partition("=")
        try:
            index = int(index_text)
            param = params[index]
        except (ValueError, IndexError):
            raise UsageError(
                f"--arg {item!r}: use INDEX=VALUE with INDEX 0..{len(params) - 1} for kernel {source.kernel!r}"
            ) from None
        try:
            if param.kind == "float":
                data = struct.pack("<d" if param.size == 8 else "<f", float(value))
            else:
                data = (int(value, 0) & ((1 << (8 * param.size)) - 1)).to_bytes(param.size, "little")
        except ValueError:
            raise UsageError(
                f"--arg {item!r}: {value!r} is not a {param.kind} value for parameter {index} ({param.type})"
            ) from None
        buf[param.offset : param.offset + param.size] = data
        source.specialize_indexes = sorted(set(source.specialize_indexes or []) | {index})
    source.args = bytes(buf)


def _config(source: Source, options: dict, overrides: tuple[str, ...] = ()):
    """The ExperimentConfiguration from --config FILE, the flags, and key=value overrides."""
    from mneme.core.types import ExperimentConfiguration

    data: dict = {}
    if options.get("config_file"):  # the same files `mneme replay --config` reads: JSON or YAML, best.json
        from mneme.core.configfile import read_config_file

        data = read_config_file(options["config_file"])
    missing = [
        flag
        for flag, key, recorded in (("--grid", "grid", source.grid), ("--block", "block", source.block))
        if not options.get(key) and recorded is None and key not in data
    ]
    data.setdefault("grid", list(_dims(options.get("grid")) or source.grid or (1, 1, 1)))
    data.setdefault("block", list(_dims(options.get("block")) or source.block or (1, 1, 1)))
    if options.get("grid"):
        data["grid"] = list(_dims(options["grid"]))
    if options.get("block"):
        data["block"] = list(_dims(options["block"]))
    flags = {
        name: options.get(name)
        for name in ("specialize", "specialize_dims", "passes", "codegen_opt", "prune", "internalize", *params.knobs())
    }
    if options.get("launch_bounds"):
        max_threads, _, min_blocks = options["launch_bounds"].partition(",")
        try:
            flags.update(set_launch_bounds=True, max_threads=int(max_threads), min_blocks_per_sm=int(min_blocks or 1))
        except ValueError:
            raise UsageError(
                f"--launch-bounds takes MAX_THREADS[,MIN_BLOCKS], not {options['launch_bounds']!r}"
            ) from None
        if not 1 <= flags["max_threads"] <= 1024 or flags["min_blocks_per_sm"] < 1:
            raise UsageError(
                f"--launch-bounds {options['launch_bounds']}: max threads must be 1..1024 "
                "and min blocks per SM at least 1"
            )
    data.update({k: v for k, v in flags.items() if v is not None})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"configuration override {item!r}: use FIELD=VALUE (JSON value)")
        try:
            data[key] = json.loads(value)
        except ValueError:
            data[key] = value
    dims_used = [f"--{k.replace('_', '-')}" for k in ("specialize_dims", "specialize_dims_assume") if data.get(k)]
    if dims_used and missing:
        # without them the kernel would be specialized for a 1x1x1 launch
        raise UsageError(
            f"{' and '.join(dims_used)} needs the launch dimensions: add {' and '.join(f'{m} N' for m in missing)} "
            "(or use a recording with -rdb)"
        )
    try:
        return ExperimentConfiguration.from_dict(data, source="the command line")
    except MnemeError:
        raise
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid configuration: {exc}") from exc


def input_options(func):
    """IR input and configuration options shared by every `mneme ir` command (the parameters' flags come from
    their declarations, added by the hook)."""
    options = [
        click.argument("ir_files", nargs=-1, type=click.Path(dir_okay=False)),
        click.option("-k", "--kernel", help="Mangled kernel name (needed when the IR has several)."),
        click.option(
            "-rdb",
            "--record-db",
            "rdb",
            type=click.Path(exists=True, dir_okay=False),
            help="A recording database (JSON) instead of IR files.",
        ),
        click.option("--record-id", help="Dynamic hash of the recorded launch (default: the only one)."),
        click.option(
            "--config",
            "config_file",
            type=click.Path(exists=True, dir_okay=False),
            help="An ExperimentConfiguration as JSON.",
        ),
        click.option("--grid", help="Grid size, e.g. 128 or 64,2,1 (default: the recorded one)."),
        click.option("--block", help="Block size, e.g. 256 or 16,16,1 (default: the recorded one)."),
        click.option("--specialize/--no-specialize", default=None, help="Fold recorded argument values."),
        click.option(
            "--arg",
            "arg_values",
            multiple=True,
            metavar="INDEX=VALUE",
            help="Argument value to specialize on (with IR files); repeatable.",
        ),
        click.option("--specialize-dims/--no-specialize-dims", default=None, help="Grid and block sizes as constants."),
        click.option("--launch-bounds", metavar="MAX[,MIN]", help="Max threads per block [, min blocks per SM]."),
        click.option("--passes", help="default<O0..O3|Os|Oz> or a comma-separated pass list ('' skips)."),
        click.option("--codegen-opt", type=click.IntRange(0, 3), help="LLVM code generation level."),
        click.option("--prune/--no-prune", default=None, help="Drop what the kernel cannot reach."),
        click.option("--internalize/--no-internalize", default=None, help="Make all but the kernel internal."),
    ]
    for option in reversed(options):
        func = option(func)
    func.takes_configuration = True  # the plugin hook adds the declared parameters' flags
    return func


def _prepare(kw: dict, overrides: tuple[str, ...] = ()):
    source = _load_source(kw["ir_files"], kw["kernel"], kw["rdb"], kw["record_id"])
    _arg_values(source, kw.get("arg_values") or ())
    config = _config(source, kw, overrides)
    from mneme.core import pipeline

    pipeline.parse_pipeline(config.passes)  # an unknown pass fails here, listing the known ones
    return source, config


_DEFAULT_ARCH = {"nvptx": "sm_90", "amdgpu": "gfx90a"}


def _ir_arch(source: Source) -> str | None:
    """The architecture the IR was written for: its functions' target-cpu, else its triple's default."""
    from mneme.core import pipeline

    target = pipeline.module_target(source.module)
    if target not in _DEFAULT_ARCH:
        return None
    found = re.search(r'"target-cpu"="((?:sm|gfx)_?\w+)"', str(source.module))
    return found.group(1) if found else _DEFAULT_ARCH[target]


def _arch(kw_arch: str | None, source: Source) -> tuple[str, Backend]:
    """The architecture to build for and the installed backend that claims it.

    Without --arch: the recording's, unless that backend runs IR of another target (a host
    recording of GPU IR), then the architecture the IR's triple and target-cpu name.
    """
    from mneme.core import pipeline
    from mneme.core.backend import backend_for_arch

    if kw_arch:
        return kw_arch, backend_for_arch(kw_arch)
    arch = source.arch
    if arch:
        backend = backend_for_arch(arch)
        written_for = _ir_arch(source)
        if written_for and getattr(backend, "target", None) != pipeline.module_target(source.module):
            current(err=True).print(
                f"the recording ran on the {backend.name} backend ({arch}); its IR targets "
                f"{source.module.triple}, so this builds for {written_for} (--arch {arch} builds for the recording's)",
                highlight=False,
            )
            arch = written_for
    arch = arch or _ir_arch(source)
    if not arch:
        raise UsageError("give --arch (sm_XX or gfxNNN)")
    return arch, backend_for_arch(arch)


def _transformed(source: Source, config, kw: dict, optimized: bool, arch: str | None):
    from mneme.core import pipeline

    pre = pipeline.preprocess(
        source.module,
        source.kernel,
        config,
        source.args,
        source.arg_layout,
        specialize_indexes=source.specialize_indexes,
    )
    if optimized:
        arch, backend = _arch(arch, source)
        backend.optimize(pre.module, config, arch)
    return pre


def _build(source: Source, config, kw: dict, arch: str, backend: Backend, emit: str):
    """(text or bytes, DeviceBinary or None) for one configuration, built by `backend`."""
    from mneme.core import build

    if emit == "ll":
        pre = _transformed(source, config, kw, True, arch)
        return str(pre.module), None
    binary = build.compile(
        source.module,
        source.kernel,
        config,
        arch,
        source.args,
        source.arg_layout,
        backend=backend,
        emit=emit,
        specialize_indexes=source.specialize_indexes,
        cache=False,
    )
    data = binary.data.decode() if emit in ("ptx", "asm") else binary.data
    return data, binary


def _write(data, output: str | None) -> None:
    if output and output != "-":
        Path(output).write_bytes(data if isinstance(data, bytes) else data.encode())
        echo(f"wrote {output}", err=True)
    elif isinstance(data, bytes):
        raise UsageError("binary output: give -o FILE")
    else:
        sys.stdout.write(data)


def _resource_rows(binary) -> list[tuple[str, str]]:
    res = binary.resources
    if binary.kind in ("ptx", "asm", "object"):
        return [("object size (bytes)", str(len(binary.data)))] + [
            (f"{stage} (ms)", f"{seconds * 1e3:.1f}") for stage, seconds in binary.stage_times.items()
        ]
    rows = [
        ("registers", res.registers),
        ("spill stores (bytes)", res.spill_stores),
        ("spill loads (bytes)", res.spill_loads),
        ("shared memory (bytes)", res.shared_mem),
        ("local memory (bytes)", res.local_mem),
        ("constant memory (bytes)", res.const_mem),
        ("max threads per block", res.max_threads_per_block),
        ("object size (bytes)", len(binary.data)),
    ]
    rows = [(name, "-" if value == -1 else str(value)) for name, value in rows]
    if res.assembler:
        rows.append(("assembler", res.assembler))
    rows += [(f"{stage} (ms)", f"{seconds * 1e3:.1f}") for stage, seconds in binary.stage_times.items()]
    return rows


# -- commands -----------------------------------------------------------------------------------------


def _table(title: str):
    from rich.table import Table  # only the commands that draw one import rich's layout

    return Table(title=title)


class _IrGroup(click.Group):
    """The `ir` group; `list`, `extract` (IR embedded by `mneme-cc`) and `check` are imported when asked for,
    so that `mneme ir compile` loads neither the ELF readers nor the backends' checks (start-up)."""

    LAZY = {
        "list": "mneme.plugins.instrument_commands:list_command",
        "extract": "mneme.plugins.instrument_commands:extract_command",
        "check": "mneme.plugins.check_commands:check_command",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.LAZY))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        found = super().get_command(ctx, name)
        if found is None and name in self.LAZY:
            import importlib

            module, _, attr = self.LAZY[name].partition(":")
            found = getattr(importlib.import_module(module), attr)
        return found


@click.group("ir", cls=_IrGroup)
def ir_group() -> None:
    """Inspect, transform and compile kernel IR (from IR files or a recording)."""


@ir_group.command("show", epilog=EXIT_CODES_HELP)
@input_options
@click.option("--optimized", is_flag=True, help="Also run the optimization pipeline.")
@click.option("--arch", help="Target architecture for --optimized (default: from the IR or recording).")
@click.option("-o", "--output", help="Write the IR to this file (default: stdout).")
def show(optimized: bool, arch: str | None, output: str | None, **kw) -> None:
    """Print the kernel's IR after the configuration's transforms."""
    source, config = _prepare(kw)
    pre = _transformed(source, config, kw, optimized, arch)
    current(err=True).print(
        f"kernel {source.kernel}: {', '.join(pre.applied) or 'no transforms'}; variant {pre.variant_hash[:16]}",
        highlight=False,
    )
    _write(str(pre.module), output)


@ir_group.command("compile", epilog=EXIT_CODES_HELP)
@input_options
@click.option("--arch", help="sm_XX or gfxNNN (default: from the recording, else sm_90 / gfx90a by the IR's target).")
@click.option("--emit", type=click.Choice(EMITS), default=None, help="Output kind (default: cubin / hsaco).")
@click.option("-o", "--output", help="Output file (default: stdout for ll/ptx/asm, KERNEL.EMIT for binaries).")
def compile_(arch: str | None, emit: str | None, output: str | None, **kw) -> None:
    """Transform, optimize and generate code for the kernel (with the backend that claims --arch)."""
    source, config = _prepare(kw)
    arch, backend = _arch(arch, source)
    emit = emit or backend.default_emit(arch)
    data, binary = _build(source, config, kw, arch, backend, emit)
    _write(data, output or (None if emit in ("ll", "ptx", "asm") else f"{source.kernel}.{emit}"))
    if binary is not None:
        summary = ", ".join(f"{name} {value}" for name, value in _resource_rows(binary))
        echo(f"{source.kernel} ({arch}, {backend.name} backend, {binary.kind}): {summary}", err=True)


@ir_group.command("resources", epilog=EXIT_CODES_HELP)
@input_options
@click.option("--arch", help="sm_XX or gfxNNN (default: from the recording or the IR's target).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def resources(arch: str | None, as_json: bool, **kw) -> None:
    """Registers, spills and memory of the compiled kernel, with per-stage compile times."""
    source, config = _prepare(kw)
    arch, backend = _arch(arch, source)
    _, binary = _build(source, config, kw, arch, backend, backend.default_emit(arch))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "kernel": source.kernel,
                    "arch": arch,
                    "resources": attrs.asdict(binary.resources),
                    "object_size": len(binary.data),
                    "stage_times": binary.stage_times,
                },
                indent=2,
            )
        )
        return
    table = _table(f"{source.kernel} on {arch}")
    table.add_column("resource")
    table.add_column("value", justify="right")
    for name, value in _resource_rows(binary):
        table.add_row(name, value)
    current().print(table)


@ir_group.command("diff", epilog=EXIT_CODES_HELP)
@input_options
@click.option("-a", "set_a", multiple=True, metavar="FIELD=VALUE", help="Configuration A override (repeatable).")
@click.option("-b", "set_b", multiple=True, metavar="FIELD=VALUE", help="Configuration B override (repeatable).")
@click.option("--arch", help="sm_XX or gfxNNN.")
@click.option("--emit", type=click.Choice(("ll", "ptx", "asm")), default="ptx", help="What to compare as text.")
def diff(set_a: tuple[str, ...], set_b: tuple[str, ...], arch: str | None, emit: str, **kw) -> None:
    """Compare two configurations: resources side by side, then a unified diff of the IR or PTX."""
    source, config_a = _prepare(kw, set_a)
    config_b = _config(source, kw, set_b)
    arch, backend = _arch(arch, source)
    binary_kind = backend.default_emit(arch)
    _, bin_a = _build(source, config_a, kw, arch, backend, binary_kind)
    _, bin_b = _build(source, config_b, kw, arch, backend, binary_kind)
    table = _table(f"{source.kernel} on {arch}: A vs B")
    table.add_column("")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    for (name, a), (_, b) in zip(_resource_rows(bin_a), _resource_rows(bin_b)):
        table.add_row(name, a, b, style=None if a == b or name.endswith("(ms)") else "bold")
    changed = {k: (v, config_b.to_dict()[k]) for k, v in config_a.to_dict().items() if config_b.to_dict()[k] != v}
    for field, (a, b) in changed.items():
        table.add_row(f"config: {field}", str(a), str(b))
    current().print(table)
    text_a, _ = _build(source, config_a, kw, arch, backend, emit)
    text_b, _ = _build(source, config_b, kw, arch, backend, emit)
    import difflib

    lines = difflib.unified_diff(text_a.splitlines(), text_b.splitlines(), f"A.{emit}", f"B.{emit}", lineterm="", n=2)
    out = "\n".join(lines)
    click.echo(out if out else f"the {emit} of A and B is identical")


@ir_group.command("passes", epilog=EXIT_CODES_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--llvm",
    "llvm_registry",
    is_flag=True,
    help="List every pass LLVM registers (its pipeline syntax), by level, read from LLVM itself.",
)
def passes(as_json: bool, llvm_registry: bool) -> None:
    """The optimization passes a pipeline may name, the default levels, and the IR transforms."""
    levels = [f"default<O{x}>" for x in ("0", "1", "2", "3", "s", "z")]
    from mneme.core import plugins
    from mneme.core.passes import PASSES

    if llvm_registry:
        from mneme.core import pass_registry

        listed = pass_registry.transform_passes()
        if as_json:
            click.echo(json.dumps([{"name": n, "parameters": p, "level": lv} for n, p, lv in listed], indent=2))
            return
        table = _table("LLVM's registered passes (LLVM pipeline syntax: function(...), loop(...), name<params>)")
        table.add_column("pass")
        table.add_column("level")
        table.add_column("parameters")
        for name, params, level in listed:
            table.add_row(name, level, params)
        current().print(table)
        return

    # Described transforms say what they do without being imported (no LLVM for this listing).
    provided = {item.name: item for item in plugins.provided("transform")}
    transforms = {name: plugins.description(provided[name]) for name in plugins.names("transform")}
    if as_json:
        click.echo(
            json.dumps(
                {"levels": levels, "passes": {n: d for n, (_, d) in sorted(PASSES.items())}, "transforms": transforms},
                indent=2,
            )
        )
        return
    from mneme.core import plaintable  # piped: the tables rich would draw, without rich (start-up)

    plaintable.print_table(
        None,
        "passes (comma-separated in --passes / the configuration's `passes`)",
        ("pass", "what it does"),
        [(n, d) for n, (_, d) in sorted(PASSES.items())],
    )
    echo("levels: " + ", ".join(levels))
    plaintable.print_table(None, "IR transforms (plugins)", ("transform", "what it does"), list(transforms.items()))
