"""Built-in IR transforms, registered as a plugin (hook `mneme_transforms`) like third-party ones.

A transform is a subclass of `mneme.core.pipeline.Transform` with a `name`, an `order`
(internalize 10, prune 20, remove_auto_init 30, specialize_args 40, specialize_dims 50/55,
set_launch_bounds 60, fast_math 70), `enabled(ctx)` reading `ctx.config`, and
`apply(module, variant_hash, ctx) -> (module, variant_hash)`; derive the new hash with
`mneme.core.ir.combine_hash(variant_hash, name, parameters...)`.
"""

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
