"""`mneme.tuning.cli` of the original Mneme API: the original's `mneme tune` command line.

`mneme tune` runs it (instead of Mneme's own tuner) for `--layout original` or when an option
only the original has is given (`mneme.compat.cli_aliases.ORIGINAL_TUNE_OPTIONS`). The options,
their choices and defaults are the original's; Mneme's spellings of the shared ones
(`--record-db`, `--results`) are accepted too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from mneme.compat.tune_options import METRICS, SAMPLERS, TuneOptions, merge_config_and_args
from mneme.compat.tuning_session import EXIT_INVALID_CONFIGURATION, TuningSession

_SPACE_MODES = ["fixed", "on", "off", "on-off"]


def add_tune_args(parser: argparse.ArgumentParser) -> None:
    """The original's tune options (every default None: a `--config` file fills what the line leaves out)."""
    add = parser.add_argument
    add("-rdb", "--record-database", "--record-db", dest="record_database", help="the recording database to tune")
    add("-rid", "--record-id", dest="record_id", help="the kernel instance (default: the database's only one)")
    add("--space-preset", choices=["quick", "standard", "launch", "compiler", "full"])
    add("--sampler", choices=list(SAMPLERS))
    add("--trials", type=int)
    add("--timeout", type=float)
    add("--seed", type=int)
    add("--metric", choices=list(METRICS), help="timing statistic that ranks candidates")
    add("--objective", choices=["time", "speedup"])
    add("--iterations", type=int, help="timed replays per candidate")
    add("--warmup", type=int, help="untimed replays before the timed ones")
    add("--workers", type=int, help="worker processes, worker i on device i")
    add("--fail-fast", action="store_true", default=None)
    add("--keep-going", dest="fail_fast", action="store_false", default=None)
    add("--results-dir", "--results", dest="results_dir")
    add("--resume", action="store_true", default=None)
    add("--rerun-baseline", action="store_true", default=None)
    add("--print-space", action="store_true", default=None)
    add("--dry-run", action="store_true", default=None)
    add("--baseline-only", action="store_true", default=None)
    add("--quiet", action="store_true", default=None)
    add("--proteus-output")
    add("--no-proteus-output", dest="proteus_enabled", action="store_false", default=None)
    add("--study-name")
    add("--optuna-storage")
    add("--pruner", choices=["none", "median"])
    add("--launch-dim", choices=["none", "auto", "x", "xy", "xyz"], help="launch axes whose block size may vary")
    add("--launch-safety", choices=["conservative", "balanced", "aggressive"])
    add("--adaptive-invalid-ban", action=argparse.BooleanOptionalAction, default=None)
    add("--passes", nargs="+", help="candidate pipelines (LLVM's syntax)")
    add("--fixed-passes")
    add("--pipeline-file")
    add("--codegen-opt-range")
    add("--fixed-codegen-opt", type=int)
    add("--codegen-method")
    add("--specialize-space", choices=_SPACE_MODES)
    add("--specialize-dims-space", choices=_SPACE_MODES)
    add("--launch-bounds-space", choices=_SPACE_MODES)
    add("--min-blocks-per-sm-range")
    add("--fixed-min-blocks-per-sm", type=int)
    add("--max-threads-range")
    add("--max-threads-policy", choices=["recorded", "block-threads", "powers-of-two", "hardware"])
    add("--space-module", help="a user's SearchSpace of the original API: MODULE_OR_PATH:CLASS")
    add("--space-arg", action="append", metavar="KEY=VALUE")
    add("--config", help="JSON or YAML options file; the command line wins")
    add("--dump-config", help="write the resolved options to this file and exit")


def options_from_mapping(data: dict[str, Any]) -> TuneOptions:
    """`TuneOptions` of merged options; unknown keys are ignored, a missing recording raises `ValueError`."""
    valid = {f.name for f in dataclasses.fields(TuneOptions)}
    kwargs = {k: v for k, v in data.items() if k in valid}
    if not kwargs.get("record_database"):
        raise ValueError("Missing required tune option: record_database (-rdb/--record-database)")
    kwargs["space_arg"] = kwargs.get("space_arg") or []
    return TuneOptions(**kwargs)


def run_tune(args: argparse.Namespace) -> int:
    """Run the original's tuner for parsed arguments; returns its exit code."""
    try:
        options = options_from_mapping(merge_config_and_args(args))
    except (ValueError, OSError) as exc:
        print(f"Invalid tuning configuration: {exc}")  # noqa: T201 - the original's message and exit code
        return EXIT_INVALID_CONFIGURATION
    if options.dump_config:
        with open(options.dump_config, "w") as out:
            out.write(json.dumps(options.to_config_dict(), indent=2) + "\n")
        return 0
    return TuningSession(options).run()


def main(argv: Sequence[str]) -> int:
    """`mneme tune ARGS` as the original parses and runs it."""
    parser = argparse.ArgumentParser(
        prog="mneme tune",
        description="The original Mneme's tuner and results layout (mneme tune --layout original).",
        epilog="Exit codes: 0 done; 1 the baseline did not verify; 2 invalid options; 3 invalid tuning "
        "configuration; 4 the recording did not load; 5 internal tuner error.",
    )
    add_tune_args(parser)
    return run_tune(parser.parse_args(list(argv)))
