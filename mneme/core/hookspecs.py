"""Every extension point of Mneme, as pluggy hook specifications.

A plugin is a module or object registered under the entry-point group ``mneme`` that
implements some of these hooks with ``@mneme.core.hookspecs.hookimpl``. Each ``mneme_*``
hook returns a list of classes (or, for CLI commands, click commands); the plugin manager
collects them by their ``name`` attribute. Built-in plugins use the very same hooks.
"""

from __future__ import annotations

import pluggy

PROJECT = "mneme"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mneme_backends():
    """Return backend classes (subclasses of `mneme.core.backend.Backend`)."""


@hookspec
def mneme_transforms():
    """Return IR transform classes (each with a `name` and `apply(module, kernel, ...)`)."""


@hookspec
def mneme_samplers():
    """Return sampler classes (ask/tell search strategies, each with a `name`)."""


@hookspec
def mneme_spaces():
    """Return search-space classes (each with a `name`)."""


@hookspec
def mneme_ir_sources():
    """Return IR-source classes that find a kernel's LLVM IR (each with a `name`)."""


@hookspec
def mneme_cli_commands():
    """Return click commands to add to the `mneme` command line."""
