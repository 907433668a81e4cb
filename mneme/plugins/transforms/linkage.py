"""`internalize` (every function but the kernel becomes internal) and `prune` (drop the unreachable)."""

from __future__ import annotations

from mneme.core import ir
from mneme.core.pipeline import Transform, TransformContext


class Internalize(Transform):
    name = "internalize"
    order = 10
    description = "every function but the kernel becomes internal (device globals keep their linkage)"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.internalize or super().enabled(ctx)

    def apply(self, module, variant_hash, ctx):
        ir.internalize_module(module, ctx.kernel_name)
        return module, ir.combine_hash(variant_hash, self.name, ctx.kernel_name)


class Prune(Transform):
    name = "prune"
    order = 20
    description = "drop the functions and declarations the kernel cannot reach"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.prune or super().enabled(ctx)

    def apply(self, module, variant_hash, ctx):
        ir.prune_module(module, ctx.kernel_name)
        return module, ir.combine_hash(variant_hash, self.name, ctx.kernel_name)
