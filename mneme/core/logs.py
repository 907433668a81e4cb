"""What the `mneme` command logs: log levels, the handler, third-party chatter.

-q shows only results and errors; the default shows warnings; -v adds INFO and the logs of
the libraries Mneme drives (the result store's "A new study created", a sampler library's
warnings); -vv adds DEBUG. Those libraries are named by the modules that drive them
(`third_party`), the core names none of its plugins' libraries.
Library users who never call `configure` keep their own logging untouched.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import warnings
from collections.abc import Iterator

# The libraries whose INFO lines and warnings are noise to a user of `mneme` unless -v; the
# modules that drive a library add it with `third_party` (the result store, sampler plugins).
THIRD_PARTY = ["matplotlib", "PIL", "urllib3"]
# Of those, the ones that report through `warnings` (400-character lines); -v shows them again.
_WARNERS: list[str] = []

_state: dict[str, int] = {}
_patterns: set[str] = set()  # the warnings filters `configure` added
_held: dict[str, int] = {}  # library logger -> the level a collector holds it at (`holding_level`)


def third_party(*names: str, warns: bool = False) -> None:
    """Quiet the loggers (and with `warns`, the warnings) of libraries `names` unless -v.

    Called by the module that drives them, at import; applies at once when `configure` ran.
    """
    THIRD_PARTY.extend(n for n in names if n not in THIRD_PARTY)
    if warns:
        _WARNERS.extend(n for n in names if n not in _WARNERS)
    verbosity = _state.get("verbosity")
    if verbosity is not None:
        for name in names:
            logging.getLogger(name).setLevel(_third_party_level(verbosity, name))
        if warns:
            _filter_warnings(verbosity)


def _quiet_pattern() -> str:
    return "(" + "|".join(map(re.escape, _WARNERS)) + r")(\.|$)"


def _filter_warnings(verbosity: int) -> None:
    warnings.filters[:] = [
        f for f in warnings.filters if not (f[0] == "ignore" and f[3] is not None and f[3].pattern in _patterns)
    ]
    if verbosity < 1 and _WARNERS:
        pattern = _quiet_pattern()
        warnings.filterwarnings("ignore", module=pattern)
        _patterns.add(pattern)
    getattr(warnings, "_filters_mutated", lambda: None)()


def level_for(verbosity: int) -> int:
    """The logging level for a verbosity: -1 (-q) ERROR, 0 WARNING, 1 (-v) INFO, 2+ (-vv) DEBUG."""
    if verbosity < 0:
        return logging.ERROR
    return (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG


def configure(verbosity: int, console=None) -> None:
    """Set Mneme's log level for `verbosity` and quiet third-party libraries unless it is 1 or more.

    Records go to `console` (a rich console), else to the running command's stderr console on a
    terminal and as plain lines to stderr elsewhere.
    """
    _state["verbosity"] = verbosity
    from mneme.core.printable import EscapingFilter

    handler = _handler(console)
    handler.addFilter(EscapingFilter())  # names from recordings reach log messages as arguments
    logging.basicConfig(level=level_for(verbosity), handlers=[handler], force=True)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(_third_party_level(verbosity, name))
    # A later configure(1) in the same process (tests, notebooks) shows the warnings again.
    _filter_warnings(verbosity)


def _handler(console=None) -> logging.Handler:
    """Rich's handler on a terminal; plain lines elsewhere.

    Rich lays a record out as a table as wide as its console, its source column right-aligned:
    through a pipe (a console as wide as `mneme.core.console.PIPE_WIDTH`) every line would be
    padded to that width. Without a console and a terminal, rich is not imported at all.
    """
    if console is None:
        if not _isatty(sys.stderr):
            return _plain(lambda: sys.stderr)
        from mneme.core.console import current

        console = current(err=True)
    if console.is_terminal:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=console)
        handler.setFormatter(logging.Formatter("%(message)s"))
        return handler
    return _plain(lambda: console.file)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _plain(stream) -> logging.Handler:
    handler = _StreamLines(stream)
    handler.setFormatter(logging.Formatter("%(levelname)-8s %(message)s"))
    return handler


class _StreamLines(logging.StreamHandler):
    """Plain log lines to the stream `stream()` returns when a record comes (a test runner may swap
    sys.stderr after configure)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        super().__init__()

    @property
    def stream(self):
        return self._stream()

    @stream.setter
    def stream(self, value) -> None:
        pass  # the getter decides


def quiet_third_party(name: str) -> None:
    """Re-apply the level to library `name`'s logger, for a library that resets it when imported.

    The result store calls this before opening a study; it does nothing unless `configure` ran.
    """
    verbosity = _state.get("verbosity")
    if verbosity is not None and name in sys.modules:
        logging.getLogger(name).setLevel(_third_party_level(verbosity, name))


def _third_party_level(verbosity: int, name: str | None = None) -> int:
    """Libraries' own warnings are silenced too unless -v: Mneme reports what matters itself (or a caller
    collecting `name`'s records holds its level: `holding_level`)."""
    if name in _held:
        return _held[name]
    return level_for(verbosity) if verbosity >= 1 else logging.ERROR


@contextlib.contextmanager
def holding_level(names: tuple[str, ...], level: int) -> Iterator[None]:
    """While inside, the loggers of libraries `names` stay at `level`, whatever -q/-v say and whoever
    re-applies them (a library imported meanwhile, a sampler re-quieting its logger): for a caller that
    collects their records instead of printing them (`mneme samplers compare`). Restored on exit."""
    saved = {name: (logging.getLogger(name).level, _held.get(name)) for name in names}
    for name in names:
        _held[name] = level
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, (before, held) in saved.items():
            if held is None:
                _held.pop(name, None)
            else:
                _held[name] = held
            logging.getLogger(name).setLevel(before)
