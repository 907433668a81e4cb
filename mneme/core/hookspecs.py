"""Every extension point of Mneme, as pluggy hook specifications.

A plugin is a module or object registered under the entry-point group ``mneme`` that
implements some of these hooks with ``@mneme.core.hookspecs.hookimpl``. The ``mneme_*``
hooks return lists; the plugin manager indexes what they return by its ``name``. A class may be
returned as a `mneme.core.plugins.Described` (name and "module:Class"), imported on first use,
so that listing plugins imports nothing heavy. Built-in
plugins use the very same hooks. A plugin may set ``mneme_replaces = ("NAME", ...)`` to take
the place of other plugins (by entry-point name); docs/design/interfaces.md (the plugin author's guide) has the details.
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
def mneme_recording_formats():
    """Return readers of other tools' recording databases (each with a `name`, `claims(data)` and `convert(path)`)."""


@hookspec
def mneme_parameters():
    """Return `mneme.core.params.Knob` declarations of the configuration parameters the plugin adds."""


@hookspec
def mneme_cli_commands(cli, registry):
    """Add click commands to the group `cli` (or return them); `registry` is `mneme.core.plugins.registry_view()`."""
