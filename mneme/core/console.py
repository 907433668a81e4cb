"""The one way to get a console: `current()` for what a command prints, `make()` for a new one.

Every command, built-in or a plugin's, prints through `current()`, so that `mneme`'s choices
(width, colour, a pipe's layout) reach its output and a command invoked from Python (click's
test runner) prints to the streams of that invocation. Rich is imported only when a console is
asked for: `mneme --help` and a piped `mneme plugins` never build one (start-up).
"""

from __future__ import annotations

import os
import sys

# Columns of a console writing to a pipe or file: no width to fit, so lines and tables keep paths whole.
PIPE_WIDTH = 10_000


def make(*, stderr: bool = False):
    """A new rich console that never wraps when its stream is not a terminal (pipes keep paths whole)."""
    from rich.console import Console

    if piped(err=stderr):
        return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)
    return Console(stderr=stderr, soft_wrap=not _isatty(sys.stderr if stderr else sys.stdout))


def piped(err: bool = False) -> bool:
    """Whether stdout (`err`: stderr) is no terminal and no width is asked for (COLUMNS): plain text is
    what a console would print there, so a caller may write it without building one."""
    return not _isatty(sys.stderr if err else sys.stdout) and not os.environ.get("COLUMNS")


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def current(err: bool = False):
    """The console of the running `mneme` command (`err`: its stderr one), made on first use.

    Within one invocation every call returns the same console (kept in the root click
    context); outside a click context each call makes a new one.
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return make(stderr=err)
    root = ctx.find_root()
    if root.obj is None:
        root.obj = {}
    if not isinstance(root.obj, dict):
        return make(stderr=err)
    key = "_mneme_err_console" if err else "_mneme_console"
    if key not in root.obj:
        root.obj[key] = make(stderr=err)
    return root.obj[key]


def echo(text: str, err: bool = False) -> None:
    """Print `text` as one plain line (no markup, no highlighting) to the command's console (`err`: stderr);
    through a pipe it is written directly, without building a console (start-up)."""
    if piped(err=err):
        stream = sys.stderr if err else sys.stdout
        stream.write(text + "\n")
        stream.flush()
        return
    current(err=err).print(text, markup=False, highlight=False, soft_wrap=True)
