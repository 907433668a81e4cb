"""Built-in search spaces, registered through the `mneme_spaces` hook like third-party ones."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_spaces():
    from mneme.plugins.spaces.builtin import SPACES

    return SPACES
