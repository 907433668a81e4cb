"""The built-in command plugins, one registration each, importing their commands only when asked.

Loading the plugins (every command does) then costs no command module: running `mneme plugins`
imports none of them, running `mneme ir ...` only `mneme.plugins.ir_commands`. The hook of each
module is the one a directly registered module would provide.
"""

from __future__ import annotations

import importlib
import inspect

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


class _Commands:
    def __init__(self, module: str):
        self._module = module

    @hookimpl
    def mneme_cli_commands(self, cli, registry):
        hook = importlib.import_module(self._module).mneme_cli_commands
        offered = {"cli": cli, "registry": registry}
        return hook(**{name: offered[name] for name in inspect.signature(hook).parameters})


ir = _Commands("mneme.plugins.ir_commands")
replay = _Commands("mneme.plugins.replay_commands")
tune = _Commands("mneme.plugins.tune_commands")
snapshot = _Commands("mneme.plugins.snapshot_commands")


class _OriginalMneme(_Commands):
    """The original Mneme's commands, and its recording databases read wherever Mneme reads a database."""

    @hookimpl
    def mneme_recording_formats(self):
        return [
            Described(
                "original",
                "mneme.compat.original_format:OriginalFormat",
                description="databases and snapshots of the original Mneme, every layout",
            )
        ]


original = _OriginalMneme("mneme.plugins.original_commands")
