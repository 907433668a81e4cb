"""The original Mneme's command-line spellings, accepted by `mneme` as aliases of its own.

One table: per subcommand, the original's option -> an `Alias`: Mneme's option (with the
value translated where the original's values differ), `DROP` for an option that changes
nothing here (with its value), or `REFUSE` for one whose meaning Mneme spells differently
(an error that names Mneme's way, never a silently different run). `rewrite(argv)` applies
it before click parses the command line; arguments after `--` (the application's, for
`mneme record`) are never touched. The original's spellings come from its command-line
source (`commands.py`, `tuning/cli.py`), since its API reference does not document the CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

log = logging.getLogger(__name__)

DROP = None
REFUSE = ""
#: An option's value: none, one, or one only when the next word is not an option.
FLAG, VALUE, OPTIONAL = 0, 1, 2


class Alias(NamedTuple):
    target: str | None
    takes: int = VALUE
    why: str = ""  # why it is dropped, or what to use instead when refused
    value: Callable[[str], str] | None = None  # the original's value -> Mneme's


def _devices(workers: str) -> str:
    # the original's workers run one per device index, worker i on device i
    return ",".join(str(i) for i in range(max(int(workers), 1)))


_SAMPLERS = {"tpe": "optuna:tpe", "grid": "exhaustive"}
_CODEGEN_METHOD = "Mneme generates code one way per backend (the original's serial)"

#: Options only the original's `mneme tune` has: given one, `mneme tune` runs the original's tuner
#: and results layout (`mneme tune-original`, `mneme.compat.tune_cli`), as `--layout original` does.
ORIGINAL_TUNE_OPTIONS = frozenset(
    {
        "--space-module",
        "--space-arg",
        "--metric",
        "--objective",
        "--warmup",
        "--fail-fast",
        "--keep-going",
        "--rerun-baseline",
        "--baseline-only",
        "--pruner",
        "--config",
        "--dump-config",
        "--proteus-output",
        "--no-proteus-output",
        "--quiet",
        "--codegen-method",
        "--launch-dim",
        "--launch-safety",
        "--passes",
        "--fixed-passes",
        "--pipeline-file",
        "--codegen-opt-range",
        "--fixed-codegen-opt",
        "--specialize-space",
        "--specialize-dims-space",
        "--launch-bounds-space",
        "--min-blocks-per-sm-range",
        "--fixed-min-blocks-per-sm",
        "--max-threads-range",
        "--max-threads-policy",
        "--adaptive-invalid-ban",
        "--no-adaptive-invalid-ban",
    }
)

ALIASES: dict[str, dict[str, Alias]] = {
    "record": {
        "--record-db-dir": Alias("--rdb"),
        "--per-kernel-max-recordings": Alias("--max-recordings"),
        "-mr": Alias("--max-recordings"),
        "--per-kernel-skip-recordings": Alias("--skip"),
        "-sr": Alias("--skip"),
        "-rr": Alias("--record-ranks"),
        "-vass": Alias(DROP, VALUE, "the recorder reserves the address space it needs"),
        "--virtual-address-space-size": Alias(DROP, VALUE, "the recorder reserves the address space it needs"),
    },
    "replay": {
        "--record-database": Alias("--record-db"),
        "-record-id": Alias("--record-id"),
        **{f"-{k}id{a}": Alias(f"--{kind}-dim-{a}") for k, kind in (("g", "grid"), ("b", "block")) for a in "xyz"},
        "-shem": Alias("--shared-mem"),
        "-slb": Alias("--set-launch-bounds", FLAG),
        "--min-threads-per-block": Alias("--min-blocks-per-sm"),  # the original's spelling of min_blocks_per_sm
        "-sdims": Alias("--specialize-dims", FLAG),
        "-co": Alias("--codegen-opt"),
        "-it": Alias("--iterations"),
        "-ol": Alias("--output-ll"),
        "-cm": Alias(DROP, VALUE, _CODEGEN_METHOD),
        "--codegen-method": Alias(DROP, VALUE, _CODEGEN_METHOD),
    },
    "tune": {  # the spellings both tuners share; ORIGINAL_TUNE_OPTIONS select the original's tuner instead
        "--record-database": Alias("--record-db"),
        "--space-preset": Alias("--space"),
        "--results-dir": Alias("--results"),
        "--study-name": Alias("--study"),
        "--optuna-storage": Alias("--storage"),
        "--sampler": Alias("--sampler", VALUE, "", lambda v: _SAMPLERS.get(v, v)),
        "--workers": Alias("--devices", VALUE, "", _devices),
        "--dry-run": Alias("--print-space", FLAG),
    },
    "clean": {},
    "copy": {},
    "move": {},
    "config": {},  # `mneme config KEY` takes the original's keys (mneme.compat.config_keys)
}


def _subcommand(argv: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return i
    return None


def rewrite(argv: Sequence[str]) -> list[str]:
    """`argv` with the original's option spellings of its subcommand replaced by Mneme's.

    Raises `UsageError` for an original option whose meaning Mneme spells differently.
    """
    argv = list(argv)
    at = _subcommand(argv)
    if at is None or argv[at] not in ALIASES:
        return argv
    if argv[at] == "tune":
        routed = _original_tuner(argv, at)
        if routed is not None:
            return routed
    command, table = argv[at], ALIASES[argv[at]]
    out, i = argv[: at + 1], at + 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out += argv[i:]
            break
        name, eq, value = arg.partition("=")
        alias = table.get(name)
        if alias is None:
            out.append(arg)
            i += 1
            continue
        follows = i + 1 < len(argv) and argv[i + 1] != "--"
        if alias.takes == OPTIONAL:
            follows = follows and not argv[i + 1].startswith("-")
        takes_next = not eq and alias.takes != FLAG and follows
        if not eq and alias.takes != FLAG and follows:
            value = argv[i + 1]
        if alias.target is REFUSE:
            from mneme.core.errors import UsageError

            raise UsageError(f"mneme {command}: the original Mneme's {name} has no Mneme equivalent; {alias.why}")
        if alias.target is DROP:
            log.warning("mneme %s: %s is accepted and ignored: %s", command, name, alias.why)
        elif alias.takes == FLAG:
            out.append(alias.target)
        else:
            value = alias.value(value) if alias.value is not None and (eq or takes_next) else value
            out += [f"{alias.target}={value}"] if eq else [alias.target] + ([value] if takes_next else [])
        i += 1 + (1 if takes_next else 0)
    return out


def _original_tuner(argv: list[str], at: int) -> list[str] | None:
    """`mneme tune-original ARGS` when `mneme tune ARGS` asks for the original's tuner; else None."""
    layout, rest, i = None, [], at + 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name == "--layout":
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            layout = value
        else:
            rest.append(argv[i])
        i += 1
    own = sorted({a.partition("=")[0] for a in rest} & ORIGINAL_TUNE_OPTIONS)
    if layout == "original" or (own and layout is None):
        if own:
            log.info("mneme tune: %s select the original Mneme's tuner and results layout", ", ".join(own))
        return [*argv[:at], "tune-original", *rest]
    if own and layout in ("mneme", "both"):
        from mneme.core.errors import UsageError

        raise UsageError(
            f"mneme tune: {', '.join(own)} belong to the original Mneme's tuner; use --layout original "
            f"(or leave --layout out), or Mneme's own options with --layout {layout}"
        )
    return None
