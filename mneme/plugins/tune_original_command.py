"""`mneme tune` with the original Mneme's tuner and results layout (`--layout original`), as a hidden command.

`mneme tune` reaches it through `mneme.compat.cli_aliases`: `--layout original`, or any option
only the original's `mneme tune` has (`--launch-dim`, `--warmup`, `--metric`, `--space-module`,
...), runs the original's command line (`mneme.compat.tune_cli`) on the same arguments.
"""

from __future__ import annotations

import click

from mneme.core.errors import UsageError

LAYOUTS = ("mneme", "original", "both")


@click.command(
    "tune-original",
    hidden=True,
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def tune_original_command(ctx, args) -> None:
    """The original Mneme's `mneme tune` (see `mneme tune --layout original`)."""
    from mneme.compat import tune_cli

    ctx.exit(tune_cli.main(args))


def original_args(
    record_db,
    record_id,
    space,
    sampler,
    trials,
    seed,
    results,
    iterations,
    devices,
    resume,
    study,
    storage,
    timeout,
    print_space,
) -> list[str]:
    """The original's command line for `mneme tune --layout original` given Mneme's options."""
    samplers = {"random": "random", "exhaustive": "exhaustive", "optuna:tpe": "tpe", "tpe": "tpe", "grid": "grid"}
    if sampler not in samplers:
        raise UsageError(
            f"--layout original runs the original's tuner, whose samplers are random, tpe and "
            f"exhaustive/grid; {sampler!r} is Mneme's (use --layout mneme or both)"
        )
    args = ["--record-database", record_db, "--sampler", samplers[sampler], "--iterations", str(iterations)]
    if space.endswith(".py") or ".py:" in space:
        args += ["--space-module", space]
    elif space in ("quick", "standard", "launch", "compiler", "full"):
        args += ["--space-preset", space]
    else:
        raise UsageError(
            f"--layout original runs the original's tuner: --space must be one of its presets "
            f"(quick, standard, launch, compiler, full) or path.py:Class, not {space!r}"
        )
    if samplers[sampler] in ("random", "tpe"):
        args += ["--trials", str(trials)]
    for flag, value in (
        ("--record-id", record_id),
        ("--seed", seed),
        ("--results-dir", results),
        ("--study-name", study),
        ("--optuna-storage", storage),
        ("--timeout", timeout),
    ):
        if value is not None:
            args += [flag, str(value)]
    if devices:
        args += ["--workers", str(len(devices))]
    args += ["--resume"] if resume else []
    args += ["--print-space"] if print_space else []
    return args
