"""`mneme capture`, `mneme replay` and `mneme annotate`: make a recording, run one experiment, set tolerances."""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import click
from rich.table import Table

from mneme.core import limits, params
from mneme.core.backend import CACHE_STATES
from mneme.core.configfile import read_config_file, resolve_config
from mneme.core.console import current as _console
from mneme.core.errors import EXIT_CODES_HELP, EXIT_INVALID_INPUT, EXIT_NOT_VERIFIED, MnemeError, UsageError
from mneme.core.hookspecs import hookimpl
from mneme.core.printable import markup
from mneme.core.types import ExperimentConfiguration, ExperimentResult

log = logging.getLogger(__name__)


@hookimpl
def mneme_cli_commands(cli, registry):
    replay = copy.copy(replay_command)  # with a flag per declared parameter (--ptxas-opt, ...)
    replay.params = replay_command.params + params.click_options(registry.knobs())
    for command in (capture_command, replay, annotate_command, nondeterminism_command):
        cli.add_command(command)


# -- report formatting --------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.3f} ms"


def _resource(value: int) -> str:
    return "-" if value is None or value < 0 else str(value)


def application_median(app_times: Sequence[float]) -> tuple[float, int]:
    """The median of the later launches with the recorded arguments, and how many launches it is of.

    The recorder times the recorded launch and the repeats with its arguments; the first is the
    recorded launch, left out where repeats exist. The repeats are context only: they may do
    different work (an iterative kernel's shrinking frontier), so the reference of a replay is the
    recorded launch's own time (`RecordedTime`) where the recording has it.
    """
    used = list(app_times[1:]) if len(app_times) > 1 else list(app_times)
    return statistics.median(used), len(used)


@attrs.frozen
class InApplication:
    """What the recorder measured of an instance inside the application: the replay's references."""

    times: Sequence[float] = ()  # AppTimes: the recorded launch, then its repeats
    timer: str = "events"
    recorded: float | None = None  # RecordedTime: the recorded launch itself
    cache: str = "flushed"  # RecordedCache: the state it started from

    @classmethod
    def of(cls, instance) -> InApplication:
        return cls(tuple(instance.app_times), instance.app_timer, instance.recorded_time, instance.recorded_cache)

    def rows(self, result: ExperimentResult, cache: str) -> list[tuple[str, str]]:
        rows = []
        timer = f", timed by {self.timer}"
        if result.timer and result.timer != self.timer:
            timer += f" (this replay by {result.timer}: not like for like; --timer {self.timer} is)"
        if self.recorded is not None:
            ratio = f"; replay / recorded launch {result.median_time / self.recorded:.3f}" if result.median_time else ""
            like = "" if cache == self.cache else f" (this replay from --cache {cache}: not like for like)"
            rows.append(
                (
                    "recorded launch",
                    f"{_ms(self.recorded)} in the application, from a {self.cache} cache{timer}{like}{ratio}",
                )
            )
        if self.times and self.recorded is None:  # a recording without the recorded launch's own time
            app, used = application_median(self.times)
            ratio = f"; replay / application {result.median_time / app:.3f}" if result.median_time else ""
            which = "launches" if used == len(self.times) else "repeated launches (the first left out)"
            rows.append(("in the application", f"{_ms(app)} median of {used} {which}{timer}{ratio}"))
        elif len(self.times) > 1:
            app, used = application_median(self.times)
            ratio = f"; replay / these {result.median_time / app:.3f}" if result.median_time else ""
            rows.append(
                (
                    "later launches (context)",
                    (
                        f"{_ms(app)} median of {used} later launches with the same "
                        f"arguments; they may do different work than the recorded one{ratio}"
                    ),
                )
            )
        return rows

    def reference(self) -> float | None:
        """The time a replay compares with: the recorded launch's, else the later launches' median."""
        if self.recorded is not None:
            return self.recorded
        return application_median(self.times)[0] if self.times else None


def result_rows(
    result: ExperimentResult,
    config: ExperimentConfiguration,
    baseline: ExperimentResult | None = None,
    app_times: Sequence[float] = (),
    app_timer: str = "events",
    assembler: str = "",
    app: InApplication | None = None,
    cache: str = "flushed",
) -> list[tuple[str, str]]:
    """(label, value) rows describing one experiment, in report order.

    `app_times`: the instance's launch times inside the application (the recorder's), if known,
    measured by `app_timer` (the record's AppTimer); `app`, all the recorder measured (it wins over
    `app_times`), `cache` the state this replay's runs started from.
    """
    app = app or InApplication(tuple(app_times), app_timer)
    rows = [
        ("grid / block / shared", f"{config.grid} / {config.block} / {config.shared_mem} B"),
        ("device", result.device or "-"),
        ("verified", "yes" if result.verified else "NO"),
    ]
    if result.failed:
        rows.append(("failed", f"{result.error_kind}: {result.error}"))
    for line in result.mismatches[:8]:
        rows.append(("mismatch", line))
    times = result.exec_time
    if times:
        rows.append(("median time", _ms(result.median_time)))
        rows.append(("min / max time", f"{_ms(min(times))} / {_ms(max(times))}"))
        rows.append(
            (
                "runs",
                f"{len(times)} timed + {len(result.warmup_time)} warm-up"
                + (f", timed by {result.timer}" if result.timer else ""),
            )
        )
        spread = (max(times) - min(times)) / result.median_time if result.median_time else 0.0
        rows.append(("spread", f"{spread * 100:.1f}% of the median"))
    if baseline is not None and baseline.median_time and result.median_time:
        rows.append(
            (
                "speedup vs recorded binary",
                f"{baseline.median_time / result.median_time:.3f}x (binary {_ms(baseline.median_time)})",
            )
        )
    rows += app.rows(result, cache)
    rows.append(
        (
            "compile (preprocess / opt / codegen)",
            " / ".join(_ms(t) for t in (result.preprocess_ir_time, result.opt_time, result.codegen_time)),
        )
    )
    rows.append(("load", _ms(result.load_time)))
    rows.append(("object size", f"{result.obj_size} B"))
    rows.append(
        (
            "registers / local / const / shared",
            " / ".join(
                _resource(v)
                for v in (result.reg_usage, result.local_mem_usage, result.const_mem_usage, result.shared_mem_usage)
            ),
        )
    )
    if assembler:
        rows.append(("assembler", assembler))
    if result.variant_hash:
        rows.append(("variant", result.variant_hash[:16]))
    return rows


def result_table(
    result: ExperimentResult,
    config: ExperimentConfiguration,
    title: str,
    baseline: ExperimentResult | None = None,
    app_times: Sequence[float] = (),
    app_timer: str = "events",
    assembler: str = "",
    app: InApplication | None = None,
    cache: str = "flushed",
) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in result_rows(result, config, baseline, app_times, app_timer, assembler, app, cache):
        style = "red" if (label in ("verified", "failed", "mismatch") and result.failed) else None
        table.add_row(label, markup(value), style=style)  # values hold names from the recording
    return table


def result_json(
    result: ExperimentResult,
    config: ExperimentConfiguration,
    *,
    database: str,
    record_id: str,
    kernel: str,
    baseline: ExperimentResult | None = None,
    app_times: Sequence[float] = (),
    app_timer: str = "events",
    assembler: str = "",
    app: InApplication | None = None,
    cache: str = "flushed",
) -> str:
    data = {
        "database": database,
        "record_id": record_id,
        "kernel": kernel,
        "config": config.to_dict(),
        "config_hash": config.hash(),
        "result": result.to_dict(),
        "median_time": result.median_time,
    }
    if assembler:  # the tool and version that assembled the replayed binary (its resources describe that binary)
        data["assembler"] = assembler
    if baseline is not None:
        data["recorded_binary"] = baseline.to_dict()
        if baseline.median_time and result.median_time:
            data["speedup_vs_recorded_binary"] = baseline.median_time / result.median_time
    app = app or InApplication(tuple(app_times), app_timer)
    data["cache"] = cache
    if app.times:
        data["app_median_time"] = application_median(app.times)[0]  # the later launches: context
        data["app_timer"] = app.timer
    if app.recorded is not None:
        data["recorded_time"], data["recorded_cache"] = app.recorded, app.cache
    if app.reference() is not None and result.median_time:
        data["replay_vs_app"] = result.median_time / app.reference()  # vs the recorded launch where known
    return json.dumps(data, indent=2, allow_nan=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# -- commands ---------------------------------------------------------------------------------------------


@click.command("capture", epilog=EXIT_CODES_HELP)
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="Folder of the recording.")
@click.option("--backend", default=None, help="Backend to capture on (default: the first usable: cuda, hip, host).")
@click.option("--device", "device_id", default=0, show_default=True, help="Device index.")
@click.option(
    "--allow-files-outside",
    is_flag=True,
    help="Let `file:` inputs of SPEC read files outside SPEC's folder (absolute paths, ../); "
    "by default a description reads only files in its folder.",
)
@limits.timeout_option
def capture_command(spec: str, out: str, backend: str | None, device_id: int, allow_files_outside: bool) -> None:
    """Capture a kernel launch described in SPEC (YAML/JSON) into a recording database.

    SPEC names the IR (`ir`), the `kernel`, `grid`, `block`, optional `shared_mem`, and
    `args`: numbers for scalars, or buffers made by `random`, `zeros`, `ones`, `full`,
    `arange`, `literal` or `file` (e.g. `{random: {dtype: float32, shape: [1024], seed: 1}}`),
    each with an optional `name`, `tolerance`, `padding: {before: 1, after: 1}`, `align` and
    `output: true`; `{ptr: NAME, offset: ELEMENTS}` points into another buffer (an argument or
    one under `buffers:`), `{struct: [{name, dtype, value} | {name, ptr}]}` is a struct by value,
    and `globals:` sets device globals by name. Every key is documented in docs/capture.md.
    A buffer the kernel writes that stays unchanged or all zero is warned about.
    """
    from mneme import capture
    from mneme.core import isolation

    # the kernel runs in a restricted child process (docs/security.md)
    path = isolation.run_isolated(
        lambda: capture.capture_spec(
            spec, out, backend=backend, device_id=device_id, allow_files_outside=allow_files_outside
        ),
        "capture",
    )
    _console().print(f"captured into [bold]{path}[/]; replay it with: mneme replay -rdb {path}", soft_wrap=True)


@click.command("replay")
@click.option(
    "-rdb",
    "--record-db",
    "record_db",
    required=True,
    type=click.Path(exists=True),
    help="Recording database (.json) or its folder.",
)
@click.option("-rid", "--record-id", "record_id", default=None, help="Kernel instance (dynamic hash or prefix).")
@click.argument("passes", required=False)
@click.option("--grid-dim-x", type=click.IntRange(min=1), default=None)
@click.option("--grid-dim-y", type=click.IntRange(min=1), default=None)
@click.option("--grid-dim-z", type=click.IntRange(min=1), default=None)
@click.option("--block-dim-x", type=click.IntRange(min=1), default=None)
@click.option("--block-dim-y", type=click.IntRange(min=1), default=None)
@click.option("--block-dim-z", type=click.IntRange(min=1), default=None)
@click.option("--shared-mem", type=click.IntRange(min=0), default=None, help="Dynamic shared memory in bytes.")
@click.option("--specialize/--no-specialize", default=None, help="Fold recorded scalar arguments into the code.")
@click.option("--specialize-dims/--no-specialize-dims", default=None, help="Make grid and block sizes constants.")
@click.option("--set-launch-bounds/--no-set-launch-bounds", default=None, help="Set launch bounds.")
@click.option("--max-threads", type=click.IntRange(1, 1024), default=None, help="Launch bounds: threads per block.")
@click.option("--min-blocks-per-sm", type=click.IntRange(min=1), default=None, help="Launch bounds: blocks per SM.")
@click.option("--codegen-opt", type=click.IntRange(0, 3), default=None, help="Code generation level.")
@click.option("--iterations", type=click.IntRange(min=1), default=3, show_default=True, help="Timed runs.")
@click.option("--output-ll", type=click.Path(dir_okay=False), default=None, help="Write the optimized variant IR here.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A configuration (JSON/YAML), e.g. one exported by `mneme tune`.",
)
@click.option(
    "--mode",
    type=click.Choice(["ir", "ptx", "cubin"]),
    default="ir",
    show_default=True,
    help="Compile the IR, or run the application's own PTX or cubin.",
)
@click.option(
    "--cache",
    type=click.Choice(list(CACHE_STATES)),
    default=None,
    help="The cache each timed run starts from: flushed, warm (as the reset left it), or primed "
    "(after one untimed run, like an application's repeated launches). Default: the state the "
    "recorded launch was timed from in the application (flushed where unknown).",
)
@click.option(
    "--timer",
    default="auto",
    show_default=True,
    help="What times the runs: cupti (the kernel's own GPU timestamps), events (CUDA events around "
    "each launch), host-clock (the host backend), or auto (the backend's best that works here).",
)
@click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--backend", default=None, help="Backend (default: the recorded one; host when that is not usable).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@limits.timeout_option
def replay_command(**arguments) -> None:
    """Replay a recorded kernel launch as one verified, timed experiment.

    PASSES is an optimization pipeline such as `default<O3>` or `Oz`, pass names (`gvn,licm`)
    or any pipeline in LLVM's syntax (`function(loop-mssa(licm)),simplifycfg<bonus-inst-threshold=4>`)
    (default: the configuration's).

    Exit codes: 0 verified; 1 internal error; 2 invalid input (options, a configuration
    the kernel cannot launch with, a malformed recording or --config file); 3 the variant
    did not run correctly or did not verify; 130 interrupted.
    """
    from mneme.core import isolation

    # the kernels run in a restricted child process, killed past the time limit (docs/security.md)
    isolation.run_isolated(functools.partial(_replay, **arguments), "replay")


def _replay(
    record_db,
    record_id,
    passes,
    iterations,
    output_ll,
    config_file,
    mode,
    cache,
    timer,
    device_id,
    backend,
    as_json,
    **options,
) -> None:
    """The body of `mneme replay` (in the child process `replay_command` starts); `options`: the knobs' flags."""
    from mneme.core.executor import BaseExecutor

    overrides = dict(options)
    overrides["passes"] = passes
    if passes is not None:  # a pipeline LLVM refuses is invalid input (exit 2), found before anything runs
        from mneme.core.pipeline import parse_pipeline

        parse_pipeline(passes)
    file_fields = read_config_file(config_file) if config_file else None
    if cache is None:
        cache = recorded_cache_state(record_db, record_id)
    with BaseExecutor(
        record_db,
        record_id,
        iterations=iterations,
        device_id=device_id,
        backend=backend,
        mode=mode,
        cache=cache,
        timer=timer,
    ) as ex:
        config = resolve_config(ex.default_config(), file_fields, overrides, source=config_file)
        if output_ll:
            if mode != "ir":
                raise UsageError("--output-ll needs --mode ir (the binary modes have no IR)")
            Path(output_ll).write_text(ex.optimized_ir(config))
        result = ex.execute(config)
        assembler = _assembler(ex, config) if mode == "ir" and result.executed else ""
        baseline = None
        recorded = ex.recorded_binary() if mode == "ir" else None
        if recorded is not None:
            baseline = ex.execute(ex.default_config(), binary=recorded)
        kernel, instance = ex.rec.kernel_name, ex.instance.dynamic_hash
        database, app = str(ex.rec.path), InApplication.of(ex.instance)
    if as_json:
        click.echo(
            result_json(
                result,
                config,
                database=database,
                record_id=instance,
                kernel=kernel,
                baseline=baseline,
                assembler=assembler,
                app=app,
                cache=cache,
            )
        )
    else:
        _console().print(
            result_table(
                result,
                config,
                markup(f"{kernel} [{instance}] ({mode})"),
                baseline,
                assembler=assembler,
                app=app,
                cache=cache,
            )
        )
        if output_ll:
            _console().print(f"variant IR written to [bold]{output_ll}[/]")
    if not result.ok:  # a configuration the kernel cannot launch with is invalid input; anything else did not verify
        raise SystemExit(EXIT_INVALID_INPUT if result.error_kind == "invalid" else EXIT_NOT_VERIFIED)


def recorded_cache_state(record_db, record_id: str | None) -> str:
    """The cache state the recorded launch was timed from, which a replay reproduces by default."""
    from mneme.core.recording import load_recording

    rec = load_recording(record_db)
    instance = rec.select(record_id) if record_id else next(iter(rec.kernel_instances.values()), None)
    if instance is None or instance.recorded_time is None:
        return "flushed"
    return instance.recorded_cache


def _assembler(ex, config) -> str:
    """The assembler of the replayed build (a build-cache hit: it was just built), "" when the backend has none."""
    try:
        return ex.build(config).resources.assembler
    except MnemeError:
        return ""


@click.command("annotate", epilog=EXIT_CODES_HELP)
@click.argument("record_db", type=click.Path(exists=True))
@click.option("-rid", "--record-id", "record_id", default=None, help="Only this instance (default: every instance).")
@click.option("--region", "region", default=None, help="Region by address (hex, e.g. 0x153940000000).")
@click.option("--arg", "arg_index", type=int, default=None, help="Region by the pointer argument's index.")
@click.option("--dtype", default="f32", show_default=True, help="Element type: f16 bf16 f32 f64 i8..i64 u8..u64.")
@click.option("--threshold", type=float, default=0.0, show_default=True, help="Allowed error.")
@click.option("--relative/--absolute", default=False, help="Threshold relative to the expected magnitude.")
@click.option("--norm", type=click.Choice(["none", "L1", "L2", "Linf"]), default="none", show_default=True)
@click.option("--exact", is_flag=True, help="Reset the region to exact byte comparison.")
def annotate_command(record_db, record_id, region, arg_index, dtype, threshold, relative, norm, exact) -> None:
    """Set the verification policy of one region of a recording's epilogue(s)."""
    from mneme.core.snapshot import RegionPolicy

    if (region is None) == (arg_index is None):
        raise UsageError("name the region with exactly one of --region ADDR or --arg INDEX")
    try:
        policy = (
            RegionPolicy() if exact else RegionPolicy(dtype=dtype, threshold=threshold, relative=relative, norm=norm)
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid policy: {exc}") from exc
    address = None
    if region is not None:
        try:
            address = int(region, 0)
        except ValueError:
            raise UsageError(f"--region takes an address such as 0x153940000000, not {region!r}") from None
    changed = annotate(record_db, policy, record_id=record_id, address=address, arg_index=arg_index)
    for path, addr in changed:
        _console().print(f"{path.name}: region 0x{addr:x} -> {policy}")


@click.command("nondeterminism", epilog=EXIT_CODES_HELP)
@click.option(
    "-rdb",
    "--record-db",
    "record_db",
    required=True,
    type=click.Path(exists=True),
    help="Recording database (or its folder).",
)
@click.option("-rid", "--record-id", "record_id", default=None, help="Instance (dynamic hash); default: the first.")
@click.option(
    "--runs",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Replays of the recorded configuration to compare.",
)
@click.option(
    "--margin",
    type=click.FloatRange(min=1.0),
    default=4.0,
    show_default=True,
    help="The bound is the largest observed error times this.",
)
@click.option(
    "--mode",
    type=click.Choice(["ir", "ptx", "cubin"]),
    default=None,
    help="What to replay: the application's own binary (the default where the recording has it: the "
    "recorded numerics) or the IR.",
)
@click.option("--backend", default=None, help="Backend (default: the recorded one; host when that is not usable).")
@click.option("--apply", "apply_", is_flag=True, help="Store the derived policies in the recording's epilogue.")
@limits.timeout_option
def nondeterminism_command(record_db, record_id, runs, margin, mode, backend, apply_) -> None:
    """Find the order-dependent outputs of a recorded launch and derive the policy that verifies them.

    Reads the kernel's IR for float atomics, exchanges and atomically handed-out indexes, and replays
    the recorded configuration RUNS times: a region whose bytes differ between replays or from the
    recording is order-dependent. Its policy accepts MARGIN times the largest error seen.
    """
    from mneme.core.executor import BaseExecutor
    from mneme.core.nondeterminism import analyze
    from mneme.core.recording import load_recording

    if mode is None:
        kinds = {image.kind for image in load_recording(record_db).binary_blobs}
        mode = "cubin" if "cubin" in kinds else ("ptx" if "ptx" in kinds else "ir")
    with BaseExecutor(record_db, record_id, iterations=1, backend=backend, mode=mode, cache="warm") as ex:
        findings = analyze(ex, runs=runs, margin=margin)
        database, instance = ex.rec.path, ex.instance.dynamic_hash
    table = Table(title=markup(f"{database.name} [{instance}]: regions the kernel writes"))
    for column in ("region", "order-dependent because", "between replays", "vs the recording", "policy"):
        table.add_column(column, overflow="fold")
    for f in findings:
        where = f"arg {f.arg}" if f.arg is not None else f"0x{f.addr:x}"
        why = "; ".join(f.reasons) or ("replays differ" if f.runs_differ else "-")
        between = f.between_runs.describe() if f.between_runs else ("differ (not floats)" if f.runs_differ else "same")
        recorded = "same" if f.matches_recording else (f.vs_recording.describe() if f.vs_recording else "differs")
        policy = str(f.policy) if f.policy else (f.note or "-")
        table.add_row(where, why, between, recorded, policy)
    _console().print(table)
    chosen = [f for f in findings if f.policy is not None]
    for f in chosen:
        if apply_:
            annotate(database, f.policy, record_id=instance, address=f.addr)
    if chosen:
        verb = "stored in" if apply_ else "to store in (--apply)"
        _console().print(
            f"{len(chosen)} policy(ies) {verb} the recording; override one with "
            + markup(f"mneme annotate {database} -rid {instance} --region 0x{chosen[0].addr:x} ...")
        )


def annotate(
    record_db, policy, *, record_id: str | None = None, address: int | None = None, arg_index: int | None = None
) -> list[tuple[Path, int]]:
    """Rewrite the epilogue policy of one region (by address or pointer argument) in each selected instance.

    Each epilogue is rewritten atomically; returns (epilogue path, region address) per change.
    """
    from mneme.core.executor import region_of_arg
    from mneme.core.recording import load_recording
    from mneme.core.snapshot import Snapshot

    rec = load_recording(record_db)
    instances = [rec.select(record_id)] if record_id else list(rec.kernel_instances.values())
    changed = []
    for inst in instances:
        prologue = Snapshot.open(inst.prologue_path)
        epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
        if arg_index is not None:
            addr = region_of_arg(rec, inst.args, epilogue.regions, arg_index)
        else:
            addr = address
            if addr not in {r.addr for r in epilogue.regions}:
                if record_id:
                    known = ", ".join(f"0x{r.addr:x}" for r in epilogue.regions)
                    raise UsageError(f"{inst.epilogue_path}: no region at 0x{addr:x}; regions: {known}")
                continue
        rewrite_policy(prologue, epilogue, inst.epilogue_path, addr, policy)
        changed.append((inst.epilogue_path, addr))
    if not changed:
        raise UsageError(f"{rec.path}: no instance has a region at 0x{address:x}")
    return changed


def rewrite_policy(prologue, epilogue, path: Path, addr: int, policy) -> None:
    """Write `epilogue` again at `path` (atomically) with `policy` for the region at `addr`."""
    from mneme.core.snapshot import SnapshotType, SnapshotWriter, codec

    regions = list(epilogue.regions)
    data = {r.addr: epilogue.read_region(r.addr) for r in regions}
    base = {r.addr: prologue.read_region(r.addr) for r in prologue.regions}
    globals_ = dict(epilogue.globals)
    args = bytes(epilogue.args)
    with SnapshotWriter(
        path, SnapshotType.EPILOGUE, static_hash=epilogue.static_hash, dynamic_hash=epilogue.dynamic_hash
    ) as writer:
        writer.set_args(args)
        for region in regions:
            new_policy = policy if region.addr == addr else region.policy
            before = base.get(region.addr)
            if region.encoding == "diff" and before is not None and len(before) == region.size:
                writer.add_diff_region(region.addr, before, data[region.addr], policy=new_policy)
            else:
                encoding = codec.writable_encoding(region.encoding if region.encoding != "diff" else "zstd")
                writer.add_region(region.addr, data[region.addr], encoding=encoding, policy=new_policy)
        for name, value in globals_.items():
            writer.add_global(name, value)


__all__ = ["annotate", "result_json", "result_rows", "result_table"]
