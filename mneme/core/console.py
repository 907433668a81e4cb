"""The console a command prints to: the one the `mneme` command puts in the click context.

Plugin commands call `current()` instead of making their own, so `mneme`'s options (width,
colour, quiet) reach their output; outside `mneme` (a command invoked from Python) a plain
rich console stands in.
"""

from __future__ import annotations

import click


def current(err: bool = False):
    """The `mneme` command's console (`err`: its stderr one), or a plain one outside `mneme`."""
    key = "err_console" if err else "console"
    ctx = click.get_current_context(silent=True)
    obj = ctx.obj if ctx is not None else None
    if isinstance(obj, dict) and key in obj:
        return obj[key]
    from mneme.core.logs import make_console  # never wraps into a pipe (docs/cli.md)

    return make_console(stderr=err)
