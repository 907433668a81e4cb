"""Built-in search spaces, registered through the `mneme_spaces` hook like third-party ones."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described

# Described, not imported: listing the spaces must not import the tuning core (Optuna, numpy).
_SPACES = {
    "quick": "QuickSpace",
    "launch": "LaunchSpace",
    "compiler": "CompilerSpace",
    "standard": "StandardSpace",
    "full": "FullSpace",
}


@hookimpl
def mneme_spaces():
    return [Described(name, f"mneme.plugins.spaces.builtin:{cls}") for name, cls in _SPACES.items()]
