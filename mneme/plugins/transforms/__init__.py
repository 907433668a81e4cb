"""Built-in IR transforms, each its own plugin (`registration`, hook `mneme_transforms`) like third-party ones.

A transform is a subclass of `mneme.core.pipeline.Transform` with a `name`, an `order`
(internalize 10, prune 20, remove_auto_init 30, specialize_args 40, specialize_dims 50/55,
set_launch_bounds 60, fast_math 70), `enabled(ctx)` reading `ctx.config`, and
`apply(module, variant_hash, ctx) -> (module, variant_hash)`; derive the new hash with
`mneme.core.ir.combine_hash(variant_hash, name, parameters...)`.
"""
