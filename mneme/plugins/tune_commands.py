"""`mneme tune` and `mneme results`, registered as a plugin."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from mneme.core.console import current as _console
from mneme.core.backend import CACHE_STATES
from mneme.core.errors import EXIT_CODES_HELP, UsageError
from mneme.core.interrupt import Interrupted
from mneme.core.hookspecs import hookimpl

log = logging.getLogger(__name__)


@hookimpl
def mneme_cli_commands():
    from mneme.plugins.sampler_commands import samplers_group
    from mneme.plugins.tune_original_command import tune_original_command

    return [tune_command, results_command, samplers_group, tune_original_command]


def _devices(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        devices = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise UsageError(f"--devices {text!r} must be comma-separated device indices, e.g. 0,1") from None
    if not devices or any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        raise UsageError(f"--devices {text!r} must be distinct non-negative device indices")
    return devices


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def _fmt_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _progress_view(progress) -> Group:
    from mneme.core.tuning.stats import format_interval

    done = min(progress.trials, progress.budget)
    width = 30
    filled = int(width * done / max(1, progress.budget))
    bar = Text(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{progress.budget} distinct trials  ({progress.phase})")
    table = Table.grid(padding=(0, 2))
    table.add_row("experiments run", str(progress.experiments), "duplicates (from store)", str(progress.cached))
    failures = ", ".join(f"{k} {v}" for k, v in sorted(progress.failures.items())) or "none"
    table.add_row("infeasible (skipped)", str(progress.infeasible), "failures", failures)
    best = f"{_fmt_time(progress.best_time)} (trial {progress.best_trial})" if progress.best_time else "-"
    table.add_row("baseline", _fmt_time(progress.baseline_time), "best so far", best)
    interval = progress.speedup_interval
    # Times taken apart: the interval is shown without a significance mark, as the final table's search rows.
    speedup = (
        format_interval({**interval.to_dict(), "significant": True})
        if interval is not None
        else _fmt_speedup(progress.speedup)
    )
    table.add_row("speedup vs baseline", speedup, "(search times taken apart: no verdict)", "")
    group = [bar, table]
    if progress.stop.detail:
        group.append(Text(progress.stop.detail))
    return Group(*group)


def show_space(space) -> None:
    description = space.describe()
    table = Table(title=f"search space {description['name']!r} ({description['class']})")
    from mneme.core import params

    knobs = params.knobs()
    table.add_column("parameter")
    table.add_column("kind")
    table.add_column("domain")
    table.add_column("declared by (stage)")
    for name, dim in description["dimensions"].items():
        knob = knobs.get(name)
        table.add_row(name, dim["kind"], dim["domain"], f"{knob.plugin} ({knob.stage})" if knob else "")
    _console().print(table)
    options = ", ".join(f"{k}={v}" for k, v in description["options"].items()) or "defaults"
    _console().print(f"options: {options}")
    size = description["size"]
    _console().print(f"points before constraints: {size if size is not None else 'continuous (not enumerable)'}")
    if size is not None and size <= 200_000:
        feasible = sum(1 for _ in space.sample_exhaustive())
        _console().print(f"feasible distinct configurations: {feasible}")
    baseline = getattr(space, "baseline", None)
    if callable(baseline):
        config = baseline()
        _console().print(f"recorded launch: grid {config.grid}, block {config.block}, shared_mem {config.shared_mem}")
    for line in contract_report(space):
        _console().print(line, highlight=False, markup=False)


def contract_report(space) -> list[str]:
    """What the kernel's launch contract removed from `space` and why, and what it noticed (notes)."""
    lines = list(space.contract_lines()) if hasattr(space, "contract_lines") else []
    contract = getattr(space, "contract", None)
    lines += [f"launch contract note: {note}" for note in (contract.notes if contract is not None else ())]
    return lines


def print_summary(summary: dict, *, title: str = "best configurations") -> None:
    counts = summary["counts"]
    failures = ", ".join(f"{k} {v}" for k, v in sorted(counts["failures"].items())) or "none"
    _console().print(
        f"study {summary['study']}: {counts['trials']} distinct configurations measured, "
        f"{counts.get('duplicates', counts['cached'])} duplicate proposals answered from the store, "
        f"{counts['infeasible']} infeasible skipped, {counts['interrupted']} interrupted; failures: "
        f"{failures}",
        highlight=False,
    )
    stop = summary.get("stop") or {}
    if stop.get("detail"):
        _console().print(stop["detail"], highlight=False)
    for note in summary.get("notes") or ():
        _console().print(f"note: {note}", highlight=False)
    baseline = summary["baseline"]
    _console().print(
        f"baseline (recorded configuration): {_fmt_time(baseline['time'])}"
        + (" (re-timed)" if baseline.get("retimed") else ""),
        highlight=False,
    )
    level = summary.get("table") or {}
    if level.get("statement"):  # what "faster"/"slower" means in this table
        title = f"{title}: {level['statement']}"
    table = Table(title=title)
    for column in (
        "rank",
        "trial",
        "time",
        "speedup [interval]",
        "verdict",
        "measured by",
        "changes from the recorded configuration",
    ):
        table.add_column(column, justify="right" if column in ("rank", "trial", "time") else "left")
    for c in summary["ranking"]:
        changes = (
            "(recorded configuration)"
            if c["baseline"]
            else (", ".join(f"{k}={_short(v)}" for k, v in c["changes"].items()) or "(same as recorded)")
        )
        trial = "-" if c["trial"] is None else str(c["trial"])
        interval = "1.00x" if c["baseline"] else _interval_text(c)
        table.add_row(
            str(c["rank"]), trial, _fmt_time(c["time"]), interval, c.get("verdict", ""), c.get("method", ""), changes
        )
    _console().print(table)
    if level.get("rejudged"):
        _console().print(
            f"note: {level['rejudged']} compared row(s) judged again from their stored pairs at "
            f"{100 * level['row_confidence']:.4g}% each (their comparison's level was looser, as in an earlier "
            "session that compared fewer rows, or not recorded), so that the table's verdicts hold together",
            highlight=False,
        )
    measurement = summary.get("measurement") or {}
    if measurement.get("max_pairs"):
        _console().print(
            f"comparison: at most {measurement['max_pairs']} pairs per candidate, past "
            f"{measurement['looks'][0]} only while its verdict is open (looks at {measurement['looks']}); "
            f"{measurement.get('extra_pairs', 0)} pairs made past the first look",
            highlight=False,
        )
    for note in measurement.get("notes") or ():
        _console().print(f"note: {note}", highlight=False)
    best = summary.get("best")
    if best:
        if best["baseline"]:
            _console().print(
                f"best: the recorded configuration ({_fmt_time(best['time'])}); {summary.get('decision')}",
                highlight=False,
            )
        else:
            _console().print(
                f"best: {_fmt_time(best['time'])}, {_interval_text(best)} vs the recorded configuration "
                f"({summary.get('decision')})",
                highlight=False,
            )


def _interval_text(c: dict) -> str:
    from mneme.core.tuning.stats import format_interval

    if c.get("speedup_ci"):
        low, high = c["speedup_ci"]
        return format_interval({"speedup": c["speedup"], "low": low, "high": high, "significant": c["significant"]})
    if c.get("speedup") is not None and c.get("method") == "search":
        return f"~{_fmt_speedup(c['speedup'])} (search estimate, no interval)"  # times taken apart: no verdict
    return _fmt_speedup(c.get("speedup"))


def _short(value) -> str:
    if isinstance(value, dict) and set(value) == {"x", "y", "z"}:
        return f"({value['x']},{value['y']},{value['z']})"
    return str(value)


@click.command("tune")
@click.option(
    "-rdb",
    "--record-db",
    "record_db",
    default=None,
    type=click.Path(exists=True),
    help="Recording database (a .json file, or a folder holding one); required unless --simulate.",
)
@click.option("-rid", "--record-id", "record_id", default=None, help="Kernel instance (dynamic hash or prefix).")
@click.option(
    "--space",
    default="quick",
    show_default=True,
    help="A built-in space (quick, standard, launch, compiler, full), a YAML/JSON file, or path.py:Class.",
)
@click.option(
    "-o",
    "--space-option",
    "space_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option of the space, e.g. axes=x, grid_stride=true, pipeline=4 (repeatable).",
)
@click.option(
    "--sampler",
    default=None,
    help="guided (the default: the recorded launch, a space-filling start, a local search), exhaustive, "
    "random, optuna:<tpe|cmaes|gp|nsga2|qmc|ClassName>, nevergrad:<NGOpt|OnePlusOne|...>.",
)
@click.option(
    "--sampler-option",
    "sampler_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keyword argument of the sampler's constructor (repeatable).",
)
@click.option(
    "--trials",
    type=int,
    default=20,
    show_default=True,
    help="Trials of the study in all (shared by every process of a shared study).",
)
@click.option("--timeout", type=float, default=None, help="Stop asking for new trials after this many seconds.")
@click.option("--devices", default=None, help="Device indices to use, e.g. 0,1 (default 0).")
@click.option("--workers-per-device", type=int, default=1, show_default=True)
@click.option(
    "--results",
    type=click.Path(file_okay=False),
    default=None,
    help="Results folder (default mneme-results/<kernel>-<instance>-<space>).",
)
@click.option("--resume", is_flag=True, help="Continue the run in --results (no experiment is lost or repeated).")
@click.option("--force", is_flag=True, help="Continue a study of a different kernel, space or environment anyway.")
@click.option(
    "--storage",
    default=None,
    help="Shared study storage: postgresql://user@host/db, sqlite:///path.db or journal:PATH.",
)
@click.option("--study", default=None, help="Study name in the storage (default derived from kernel and space).")
@click.option(
    "--heartbeat",
    type=float,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Refresh the lease of running trials this often; a process whose trials go unrefreshed for 3x "
    "this is taken for dead and its configurations run again (0: keep no lease).",
)
@click.option("--seed", type=int, default=None, help="Seed of the sampler.")
@click.option("--iterations", type=int, default=3, show_default=True, help="Timed runs per experiment.")
@click.option(
    "--cache",
    type=click.Choice(list(CACHE_STATES)),
    default="flushed",
    show_default=True,
    help="The cache each timed run starts from, as for `mneme replay --cache`.",
)
@click.option("--timer", default="auto", show_default=True, help="What times the runs, as for `mneme replay --timer`.")
@click.option(
    "--retime-top",
    type=int,
    default=3,
    show_default=True,
    help="Compare this many best configurations with the baseline at the end, by interleaved runs.",
)
@click.option(
    "--retime-repeats",
    type=int,
    default=2,
    show_default=True,
    help="Pairs of runs each comparison makes at least (at least 3 are made).",
)
@click.option(
    "--ci-target",
    type=float,
    default=0.02,
    show_default=True,
    help="A comparison stops once its speedup's interval is this narrow (relative half-width).",
)
@click.option(
    "--confidence",
    type=float,
    default=0.995,
    show_default=True,
    help="Level of the final table's verdicts together: the chance that any 'faster'/'slower' in it is false is "
    "at most 1 - this (each of the K compared candidates at 1 - (1 - this) / K). 0.95 is the common level for "
    "one comparison; lower claims smaller differences sooner and more false ones.",
)
@click.option(
    "--measure-time",
    type=float,
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="A comparison stops after this long, however wide its interval.",
)
@click.option(
    "--max-pairs",
    type=int,
    default=960,
    show_default=True,
    help="Pairs a comparison makes at most. Past the first 60, only while its verdict is open (the interval "
    "contains 1.0 and a speedup beyond --ci-target is still plausible), looked at after 120, 240, 480 ... "
    "pairs at a stricter level, so the repeated looks claim no more false differences; 60 turns that off.",
)
@click.option(
    "--accept-insignificant",
    is_flag=True,
    help="best.json takes the fastest candidate even when its interval includes 1.0 (no significant "
    "difference); by default it stays the recorded configuration then.",
)
@click.option(
    "--simulate",
    "simulate",
    type=click.Path(exists=True),
    default=None,
    metavar="STUDY",
    help="Replay a finished study or sweep (results folder or sweep .json) as an oracle: the sampler "
    "proposes, the stored measurements answer; no device is used.",
)
@click.option("--backend", default=None, help="Backend (default: the recorded one; host when that is not usable).")
@click.option(
    "--experiment-timeout",
    type=float,
    default=None,
    help="Seconds an experiment may run before its worker is killed (default derived from the baseline).",
)
@click.option("--print-space", is_flag=True, help="Show the search space and exit; nothing runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--layout",
    type=click.Choice(["mneme", "original", "both"]),
    default="mneme",
    show_default=True,
    help="Results layout: Mneme's; the original Mneme's (its tuner writes config.json, baseline.json, "
    "trials.jsonl, ...; its options --launch-dim, --warmup, --metric, --space-module imply it); or "
    "Mneme's run with the original's config.json, search_space.json, baseline.json and trials.jsonl "
    "written beside.",
)
def tune_command(
    record_db,
    record_id,
    space,
    space_options,
    sampler,
    sampler_options,
    trials,
    timeout,
    devices,
    workers_per_device,
    results,
    resume,
    force,
    storage,
    study,
    heartbeat,
    seed,
    iterations,
    cache,
    timer,
    retime_top,
    retime_repeats,
    ci_target,
    confidence,
    measure_time,
    max_pairs,
    accept_insignificant,
    simulate,
    backend,
    experiment_timeout,
    print_space,
    as_json,
    layout,
):
    """Autotune one recorded kernel launch: search a space of verified variants, keep every result.

    --trials counts distinct measured configurations. Exit codes: 0 done, 2 invalid options, 3 the
    recorded configuration does not verify, 130/143 stopped by Ctrl-C/SIGTERM (the trials are saved;
    the command to continue is printed), 1 other errors.
    """
    if sampler is None:  # the original's tuner has no guided sampler: its own default there
        from mneme.core.tuning.samplers import default_spec

        sampler = "optuna:tpe" if layout == "original" else default_spec()
    if simulate:
        from mneme.plugins.sampler_commands import run_simulation

        run_simulation(simulate, sampler, trials, seed, as_json)
        return
    from mneme.core.tuning.session import TuneOptions, TuningSession
    from mneme.core.tuning.space import parse_options

    if record_db is None:
        raise UsageError("mneme tune needs -rdb/--record-db RECORDING (or --simulate STUDY)")
    if layout == "original":
        from mneme.compat import tune_cli
        from mneme.plugins.tune_original_command import original_args

        click.get_current_context().exit(
            tune_cli.main(
                original_args(
                    record_db,
                    record_id,
                    space,
                    sampler,
                    trials,
                    seed,
                    results,
                    iterations,
                    _devices(devices),
                    resume,
                    study,
                    storage,
                    timeout,
                    print_space,
                )
            )
        )
    if results is None:
        results = str(default_results_dir(record_db, record_id, space))
    options = TuneOptions(
        record_db=record_db,
        record_id=record_id,
        space=space,
        space_options=parse_options(space_options),
        sampler=sampler,
        sampler_options=parse_options(sampler_options),
        trials=trials,
        timeout=timeout,
        devices=_devices(devices),
        workers_per_device=workers_per_device,
        results=results,
        resume=resume,
        force=force,
        storage=storage,
        study=study,
        seed=seed,
        iterations=iterations,
        cache=cache,
        timer=timer,
        retime_top=retime_top,
        retime_repeats=retime_repeats,
        ci_target=ci_target,
        confidence=confidence,
        measure_time=measure_time,
        max_pairs=max_pairs,
        accept_insignificant=accept_insignificant,
        backend=backend,
        experiment_timeout=experiment_timeout,
        heartbeat=heartbeat,
    )
    if print_space:
        session = TuningSession(options)
        session.prepare()
        show_space(session.space)
        return
    ctx = click.get_current_context(silent=True)
    quiet = bool(ctx is not None and isinstance(ctx.obj, dict) and ctx.obj.get("quiet"))  # `mneme -q`: results only
    live = (
        Live(console=_console(), auto_refresh=False, transient=False)
        if not as_json and not quiet and _console().is_terminal
        else None
    )

    def on_progress(progress):
        if live is not None:
            live.update(_progress_view(progress), refresh=True)
        elif progress.phase in ("baseline", "re-timing", "done"):
            log.info("%s: %d/%d trials", progress.phase, progress.trials, progress.budget)

    session = TuningSession(options, on_progress=on_progress)
    session.prepare()
    if not as_json and not quiet:
        for line in contract_report(session.space):
            _console(err=True).print(line, highlight=False, markup=False, soft_wrap=True)
    if live is not None:
        live.start()
    try:
        summary = session.run()
    except Interrupted as exc:
        if live is not None:
            live.stop()
            live = None
        _report_interruption(exc, session)
        raise
    finally:
        if live is not None:
            live.stop()
    if layout == "both":
        from mneme.compat import original_layout

        written = original_layout.write(
            session.results_dir,
            {
                "trials": trials,
                "seed": seed,
                "space": space,
                "workers": len(_devices(devices) or [0]) * workers_per_device,
            },
            iterations,
        )
        log.info(
            "wrote the original Mneme's layout beside: %d trials in %s",
            written,
            Path(session.results_dir) / "trials.jsonl",
        )
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
        return
    if live is None and not quiet:
        _console().print(_progress_view(session.progress))
    print_summary(summary)
    out = session.results_dir
    _console().print(
        f"results: {out} (best.json: `mneme replay -rdb {record_db} --config {out / 'best.json'}`; "
        f"Proteus: PROTEUS_TUNED_KERNELS={out / 'tuned-kernels.json'})"
    )
    _console().print(f"dashboard: optuna-dashboard {summary['storage']}")


def _report_interruption(exc, session) -> None:
    """How many trials are saved and the exact command that continues the run (on stderr)."""
    import shlex

    saved = getattr(exc, "saved", 0)
    folder = getattr(exc, "results_dir", session.results_dir)
    words = ["mneme", *sys.argv[1:]] if "tune" in sys.argv[1:] else ["mneme", "tune", "-rdb", session.options.record_db]
    if "--results" not in words and not any(w.startswith("--results=") for w in words):
        words += ["--results", str(folder)]
    if "--resume" not in words:
        words.append("--resume")
    err_console = _console(err=True)
    err_console.print(
        f"{exc}: {saved} trial{'s are' if saved != 1 else ' is'} saved in {folder}. Continue with:",
        highlight=False,
        soft_wrap=True,
    )
    err_console.print(f"  {shlex.join(words)}", highlight=False, soft_wrap=True, markup=False)


def default_results_dir(record_db: str, record_id: str | None, space: str) -> Path:
    """The results folder `mneme tune` uses without --results (sanitised names, inside mneme-results)."""
    from mneme.core.recording import load_recording
    from mneme.core.tuning.outcome import default_results_dir as folder_of

    rec = load_recording(record_db)
    return folder_of(rec, rec.select(record_id), space)


@click.command("results", epilog=EXIT_CODES_HELP)
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write every trial as CSV.")
@click.option(
    "--jsonl", "jsonl_path", type=click.Path(dir_okay=False), default=None, help="Write every trial as JSON lines."
)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write plots (history, importances, parallel coordinates, slices) here, as PNG and HTML.",
)
@click.option(
    "--plot-format",
    type=click.Choice(["png", "html", "both"]),
    default=None,
    help="Plot files to write: png (matplotlib), html (plotly) or both [default: both, as installed].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def results_command(results_dir, csv_path, jsonl_path, plots_dir, plot_format, as_json):
    """Re-print a tuning run's results; export them as CSV/JSONL; plot them."""
    from mneme.core.tuning import report

    if plot_format and not plots_dir:
        raise UsageError("--plot-format needs --plots DIR, the folder to write the plots to")
    if plots_dir:
        report.plot_formats(plot_format)  # a missing plots extra fails here, before anything is printed
    store, session = report.open_results(Path(results_dir))
    summary = report.load_summary(Path(results_dir), store, session)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        print_summary(summary)
    if csv_path:
        count = report.export_csv(store, Path(csv_path))
        _note(f"wrote {count} trials to {csv_path}", as_json)
    if jsonl_path:
        count = report.export_jsonl(store, Path(jsonl_path))
        _note(f"wrote {count} trials to {jsonl_path}", as_json)
    if plots_dir:
        # One plotly.min.js for every plot folder inside the results folder (its root holds it).
        inside = Path(plots_dir).resolve().is_relative_to(Path(results_dir).resolve())
        script_dir = Path(results_dir) if inside else Path(plots_dir)
        for path in report.write_plots(store, Path(plots_dir), plot_format, summary=summary, script_dir=script_dir):
            _note(f"wrote {path}", as_json)


def _note(message: str, as_json: bool) -> None:
    if as_json:
        print(message, file=sys.stderr)
    else:
        _console().print(message)
