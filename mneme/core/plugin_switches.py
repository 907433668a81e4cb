"""The switches the `mneme` command sets before any plugin loads: which plugins this process
leaves out (``-p no:NAME``, MNEME_DISABLE_PLUGINS) and whether hook calls are traced
(``--trace-plugins``, MNEME_TRACE_PLUGINS).

Kept apart from the plugin manager (`mneme.core.plugins`, which re-exports them) so that `mneme
--help`, which lists commands from the command index, imports neither pluggy nor attrs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from mneme.core import envvars

DISABLE_ENV = "MNEME_DISABLE_PLUGINS"
TRACE_ENV = "MNEME_TRACE_PLUGINS"

_disabled_by_cli: set[str] = set()


def disable(names: Iterable[str]) -> None:
    """Disable plugins by name in this process (``mneme -p no:NAME``), as if not installed."""
    _disabled_by_cli.update(n.strip() for n in names if n.strip())
    # Worker processes (tuning, parallel code generation) must see the same plugins.
    os.environ[DISABLE_ENV] = ",".join(sorted(disabled_names()))
    plugins = sys.modules.get("mneme.core.plugins")
    if plugins is not None:  # a plugin manager loaded before: forget it
        plugins.reset()


def disabled_names() -> set[str]:
    """Plugins disabled by ``-p no:NAME`` and the MNEME_DISABLE_PLUGINS variable (comma-separated)."""
    from_env = {n.strip() for n in (envvars.get(DISABLE_ENV) or "").split(",") if n.strip()}
    return _disabled_by_cli | from_env


def trace(target: str = "stderr") -> None:
    """Print every hook call with its arguments and results (``mneme --trace-plugins``), in this process and
    its workers; `target` is ``stderr`` or a file to append to."""
    os.environ[TRACE_ENV] = target  # worker processes load their own plugin manager
    if loaded():
        plugins = sys.modules["mneme.core.plugins"]
        plugins._trace(plugins.get_plugin_manager())


def loaded() -> bool:
    """Whether this process has loaded its plugin manager (an embedding application's, a command's)."""
    plugins = sys.modules.get("mneme.core.plugins")
    return plugins is not None and plugins.get_plugin_manager.cache_info().currsize > 0
