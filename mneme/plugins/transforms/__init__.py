"""Built-in IR transforms, registered as a plugin (hook `mneme_transforms`) like third-party ones."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_transforms():
    from mneme.plugins.transforms import auto_init, launch_bounds, linkage, math, specialize

    return [
        linkage.Internalize,
        linkage.Prune,
        auto_init.RemoveAutoInit,
        specialize.SpecializeArgs,
        specialize.SpecializeDims,
        specialize.SpecializeDimsAssume,
        launch_bounds.LaunchBounds,
        math.FastMath,
    ]
