"""What the `mneme` command prints besides results: consoles, log levels, third-party chatter.

-q shows only results and errors; the default shows warnings; -v adds INFO and the logs of
the libraries Mneme drives (Optuna's "A new study created", cmaes' warnings); -vv adds DEBUG.
Library users who never call `configure` keep their own logging untouched.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

# The libraries whose INFO lines and warnings are noise to a user of `mneme` unless -v.
THIRD_PARTY = ("optuna", "cmaes", "nevergrad", "matplotlib", "PIL", "urllib3")

_state: dict[str, int] = {}
_PIPE_WIDTH = 10_000  # columns of a console writing to a pipe or file
_QUIET_MODULES = re.compile(r"(optuna|cmaes|nevergrad)(\.|$)")


def make_console(*, stderr: bool = False):
    """A rich console that never wraps when its stream is not a terminal (pipes keep paths whole)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, soft_wrap=not tty)
    # Not a terminal: no width to fit, so tables take the width their cells need (no folded paths).
    return Console(stderr=stderr, soft_wrap=True, width=_PIPE_WIDTH)


def level_for(verbosity: int) -> int:
    """The logging level for a verbosity: -1 (-q) ERROR, 0 WARNING, 1 (-v) INFO, 2+ (-vv) DEBUG."""
    if verbosity < 0:
        return logging.ERROR
    return (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG


def configure(verbosity: int, console=None) -> None:
    """Set Mneme's log level for `verbosity` and quiet third-party libraries unless it is 1 or more."""
    from rich.logging import RichHandler

    _state["verbosity"] = verbosity
    handler = RichHandler(console=console) if console is not None else RichHandler()
    logging.basicConfig(level=level_for(verbosity), format="%(message)s", handlers=[handler], force=True)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(_third_party_level(verbosity))
    # cmaes and optuna report through `warnings` (400-character lines); -v shows them again.
    if verbosity < 1:
        warnings.filterwarnings("ignore", module=_QUIET_MODULES.pattern)
    else:  # a later configure(1) in the same process (tests, notebooks) shows them again
        warnings.filters[:] = [f for f in warnings.filters if not (f[0] == "ignore" and f[3] is not None
                                                                     and f[3].pattern == _QUIET_MODULES.pattern)]
        getattr(warnings, "_filters_mutated", lambda: None)()
    quiet_third_party()


def quiet_third_party() -> None:
    """Re-apply the level to Optuna's logger, which Optuna sets to INFO when it is first imported.

    The result store calls this before opening a study; it does nothing unless `configure` ran.
    (Only the `logging` logger is touched: the core imports Optuna in its store modules alone.)
    """
    verbosity = _state.get("verbosity")
    if verbosity is not None and "optuna" in sys.modules:
        logging.getLogger("optuna").setLevel(_third_party_level(verbosity))


def _third_party_level(verbosity: int) -> int:
    """Libraries' own warnings are silenced too unless -v: Mneme reports what matters itself."""
    return level_for(verbosity) if verbosity >= 1 else logging.ERROR
