"""The original Mneme's command-line spellings, accepted by `mneme` as aliases of its own.

One table: per subcommand, the original's option -> Mneme's option, or `DROP` for an
option the original accepted that changes nothing here (the value it took is dropped too
when `takes_value`). `rewrite(argv)` applies it before click parses the command line;
arguments after `--` (the application's, for `mneme record`) are never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)

DROP = None

#: subcommand -> {original option: (Mneme option or DROP, takes a value, why it is dropped)}
ALIASES: dict[str, dict[str, tuple[str | None, bool, str]]] = {
    "record": {
        "--record-db-dir": ("--rdb", True, ""),
        "--per-kernel-max-recordings": ("--max-recordings", True, ""),
        "--per-kernel-skip-recordings": ("--skip", True, ""),
        "-vass": (DROP, True, "the recorder reserves the address space it needs"),
        "--virtual-address-space-size": (DROP, True, "the recorder reserves the address space it needs"),
    },
    "replay": {
        "--record-database": ("--record-db", True, ""),
        "-cm": (DROP, True, "Mneme generates code one way per backend (the original's serial)"),
        "--codegen-method": (DROP, True, "Mneme generates code one way per backend (the original's serial)"),
    },
    "tune": {
        "--record-database": ("--record-db", True, ""),
        "--space-preset": ("--space", True, ""),
        "--results-dir": ("--results", True, ""),
        "--proteus-output": (DROP, False, "Mneme writes no Proteus tuned-kernel file"),
        "--no-proteus-output": (DROP, False, "Mneme writes no Proteus tuned-kernel file"),
    },
    "clean": {},
    "copy": {},
    "move": {},
    "config": {},
}


def _subcommand(argv: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return i
    return None


def rewrite(argv: Sequence[str]) -> list[str]:
    """`argv` with the original's option spellings of its subcommand replaced by Mneme's."""
    argv = list(argv)
    at = _subcommand(argv)
    if at is None or argv[at] not in ALIASES:
        return argv
    table = ALIASES[argv[at]]
    out, i = argv[: at + 1], at + 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out += argv[i:]
            break
        name, eq, value = arg.partition("=")
        if name not in table:
            out.append(arg)
            i += 1
            continue
        target, takes_value, why = table[name]
        if target is DROP:
            log.warning("mneme %s: %s is accepted and ignored: %s", argv[at], name, why)
            i += 1 + (1 if takes_value and not eq else 0)
            continue
        out.append(f"{target}={value}" if eq else target)
        i += 1
    return out
