"""`mneme samplers compare|export` and `mneme tune --simulate`: search strategies tried on recorded sweeps."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click

from mneme.core import logs
from mneme.core.errors import EXIT_CODES_HELP, UsageError

DEFAULT_SAMPLERS = "guided,optuna:tpe,nevergrad:NGOpt,random"
# The loggers of the sampler libraries, whose warnings `compare` counts instead of streaming.
THIRD_PARTY_LOGGERS = ("optuna", "nevergrad", "cmaes")
log = logging.getLogger(__name__)


class _Collect(logging.Handler):
    def __init__(self, counts: Counter):
        super().__init__(logging.WARNING)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[(record.name.split(".")[0], record.getMessage())] += 1


@contextlib.contextmanager
def collected_warnings() -> Iterator[Counter]:
    """Count, instead of printing, what the sampler libraries warn about: Python warnings and their
    loggers' warnings; the Counter maps (source, message) to how often it came."""
    counts: Counter = Counter()
    handler = _Collect(counts)
    saved = []
    for name in THIRD_PARTY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        for h in list(logger.handlers):
            logger.removeHandler(h)
        logger.addHandler(handler)
        logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught, logs.holding_level(THIRD_PARTY_LOGGERS, logging.WARNING):
            warnings.simplefilter("always")
            yield counts
        for w in caught:
            if issubclass(
                w.category, ResourceWarning
            ):  # a finalizer's, of whatever the collector ran: not the samplers'
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
                continue
            counts[(w.category.__name__, str(w.message))] += 1
    finally:
        for logger, handlers, propagate in saved:
            logger.removeHandler(handler)
            for h in handlers:
                logger.addHandler(h)
            logger.propagate = propagate


def summarize_warnings(counts: Counter) -> dict[str, int]:
    """One entry per distinct message (numbers such as trial indices and parameter names folded
    together), with how often it came: ``"optuna: The parameter `*` in Trial#N ..." -> 400``."""
    distinct: Counter = Counter()
    for (source, message), n in counts.items():
        folded = re.sub(r"(parameter|param) `[^`]*`", r"\1 `*`", re.sub(r"\d+(\.\d+)?", "N", message))
        distinct[f"{source}: {folded}"] += n
    return dict(distinct.most_common())


def compare_each(sweep, names: list[str], budgets: list[str], repeats: int, noise: bool) -> list[dict]:
    """`simulate.compare` sampler by sampler: one that cannot load or run is a row with the reason and
    the others go on; each row counts the warnings its libraries gave (``warnings``), none printed."""
    from mneme.core.tuning.simulate import compare

    rows = []
    for name in names:
        with collected_warnings() as counts:
            try:
                found = compare(sweep, [name], budgets, repeats, noise=noise)
            except Exception as exc:  # noqa: BLE001 - a library missing (optuna:gp needs torch) or failing: a row
                reason = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(("sampler", "unknown")) else str(exc)
                found = [{"sampler": name, "budget": text, "trials": None, "error": reason} for text in budgets]
        summary = summarize_warnings(counts)
        for row in found:
            row["warnings"] = summary
        rows.extend(found)
    return rows


def _print(*args, **kwargs) -> None:
    from mneme.core.console import current as _console

    _console().print(*args, **kwargs)


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} us"


def run_simulation(study: str, sampler: str, trials: int, seed: int | None, as_json: bool) -> None:
    """`mneme tune --simulate STUDY`: one sampler against a sweep, no device."""
    from mneme.core.tuning.simulate import simulate
    from mneme.core.tuning.sweep import Sweep

    sweep = Sweep.load(study)
    run = simulate(sweep, sampler, trials, seed or 0)
    if as_json:
        click.echo(
            json.dumps(
                {**run.to_dict(), "optimum": sweep.optimum, "baseline": sweep.baseline.value}, indent=2, sort_keys=True
            )
        )
        return
    _print(
        f"simulated {sampler} on {study} ({len(sweep.points)} measured configurations, no device): "
        f"{run.trials} distinct trials, {run.duplicates} duplicate proposals, {run.infeasible} infeasible; "
        f"stopped: {run.stop}",
        highlight=False,
    )
    speedup = sweep.baseline.value / run.pick_time if run.pick_time and sweep.baseline.value else None
    _print(
        f"best.json would hold {run.pick[:12]}: {_time(run.pick_time)} (true median), "
        f"{'-' if speedup is None else f'{speedup:.2f}x'} vs the recorded configuration; "
        f"{100 * run.fraction:.1f}% of the optimum ({_time(sweep.optimum)}); "
        + (f"within 5% of it after {run.reached_at} trials" if run.reached_at is not None else "never within 5% of it"),
        highlight=False,
    )
    _print(
        f"decision: {run.decision} ({run.compared} candidate(s) compared, {run.pairs} interleaved pairs, "
        f"{run.extra_pairs} of them past the first looks); the "
        f"search's fastest by its own times: {100 * run.search_fraction:.1f}% of the optimum",
        highlight=False,
    )


@click.group("samplers")
def samplers_group():
    """Search strategies tried offline on recorded sweeps (no device)."""


@samplers_group.command("compare", epilog=EXIT_CODES_HELP)
@click.option(
    "--study",
    "study",
    required=True,
    type=click.Path(exists=True),
    help="A finished study: a results folder, or a sweep file (`mneme samplers export`).",
)
@click.option("--samplers", default=DEFAULT_SAMPLERS, show_default=True, help="Comma-separated sampler names.")
@click.option(
    "--budget",
    default="10%,20%,50%",
    show_default=True,
    help="Comma-separated budgets: distinct trials, or percentages of the sweep's points.",
)
@click.option("--repeats", type=int, default=20, show_default=True, help="Seeds per sampler and budget.")
@click.option("--no-noise", is_flag=True, help="Answer with each point's median, not with its measured spread.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def compare_command(study, samplers, budget, repeats, no_noise, as_json):
    """Per sampler and budget: the fraction of the optimum reached and the trials it took, with 95% intervals."""
    from mneme.core.tuning.simulate import NEAR
    from mneme.core.tuning.sweep import Sweep

    sweep = Sweep.load(study)
    names = [s.strip() for s in samplers.split(",") if s.strip()]
    budgets = [b.strip() for b in budget.split(",") if b.strip()]
    if not names or not budgets:
        raise UsageError("--samplers and --budget each need at least one entry")
    rows = compare_each(sweep, names, budgets, repeats, noise=not no_noise)
    for name in names:  # one summary line per distinct third-party warning, on stderr through logging
        summary = next((r["warnings"] for r in rows if r["sampler"] == name), {})
        for message, n in summary.items():
            log.warning("%s: %d warning%s: %s", name, n, "s" if n != 1 else "", message[:300])
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    _print(
        f"sweep {study}: {len(sweep.points)} measured configurations, optimum {_time(sweep.optimum)}, "
        f"recorded configuration {_time(sweep.baseline.value)}; {repeats} seeds each"
        + ("" if no_noise else ", answers drawn from each point's measured times")
        + f"; each run ends as `mneme tune` does by default: {_protocol()}",
        highlight=False,
    )
    _print(markdown_table(rows, NEAR), highlight=False, soft_wrap=True, markup=False)


def _protocol() -> str:
    from mneme.core.tuning.simulate import Protocol

    p = Protocol()
    return (
        f"the {p.retime_top} leading candidates compared with the recorded configuration in interleaved pairs "
        f"(--retime-top {p.retime_top}, --ci-target {p.ci_target:g}, --max-pairs {p.max_pairs}, "
        f"--confidence {p.confidence:g} for the table, "
        f"--iterations {p.iterations}), "
        "best.json the fastest significantly faster one, else the recorded configuration"
    )


def markdown_table(rows: list[dict], near: float = 0.95) -> str:
    """The comparison as a Markdown table (as the README shows it).

    "fraction of optimum" is the pick's: the configuration best.json would hold after `mneme tune`'s final
    comparison; "search's best" the fastest configuration by search time alone; "recorded kept" the share
    of runs whose best.json stays the recorded configuration (no candidate significantly faster)."""
    head = (
        f"| sampler | budget | fraction of optimum (95% CI) | median | search's best (median) | recorded kept | "
        f"within {100 * (1 - near):.0f}% of optimum (95% CI) | trials needed (median, range) | duplicates/run |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        budget = (
            f"{r['budget']} ({r['trials']})"
            if r["trials"] is not None and r["budget"] != str(r["trials"])
            else r["budget"]
        )
        if "error" in r:
            lines.append(f"| {r['sampler']} | {budget} | unavailable: {r['error'][:120]} | | | | | | |")
            continue
        low, high = r["fraction_ci"]
        hit_low, hit_high = r["reached_ci"]
        needed = (
            "-"
            if r["trials_needed"] is None
            else (f"{r['trials_needed']:g} ({r['trials_needed_range'][0]}-{r['trials_needed_range'][1]})")
        )
        lines.append(
            f"| {r['sampler']} | {budget} | {r['fraction']:.3f} [{low:.3f}, {high:.3f}] | "
            f"{r['fraction_median']:.3f} | {r['search_fraction_median']:.3f} | {100 * r['recorded_picked']:.0f}% | "
            f"{100 * r['reached']:.0f}% [{100 * hit_low:.0f}, "
            f"{100 * hit_high:.0f}] | {needed} | {r['duplicates']:.1f} |"
        )
    return "\n".join(lines)


@samplers_group.command("export", epilog=EXIT_CODES_HELP)
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="The sweep file to write (JSON; the recording's path is stored relative to it).",
)
def export_command(results_dir, output):
    """Write a finished study's measurements as a sweep file (a fixture for `compare` and `tune --simulate`)."""
    from mneme.core.tuning.report import write_json
    from mneme.core.tuning.sweep import export_sweep

    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = export_sweep(Path(results_dir), relative_to=out.parent)
    write_json(out, data)
    _print(f"wrote {len(data['points'])} measured configurations to {out}")
