"""Remove the automatic variable initialization that clang inserts under `-ftrivial-auto-var-init`.

clang marks every store and memset it inserts for this with `!annotation !{!"auto-init"}`;
only instructions carrying that mark are removed, nothing the program wrote itself.
"""

from __future__ import annotations

import re

from mneme.core import ir
from mneme.core.pipeline import Transform, TransformContext

_ANNOTATION_NODE = re.compile(r'^(![0-9]+) = !\{!"auto-init"\}$', re.MULTILINE)


def remove_auto_init(module, label: str = "module"):
    """Return (module, number of instructions removed); a new module when something was removed."""
    text = str(module)
    nodes = _ANNOTATION_NODE.findall(text)
    if not nodes:
        return module, 0
    marks = re.compile(r"!annotation (?:" + "|".join(re.escape(n) for n in nodes) + r")(?![0-9])")
    kept, removed = [], 0
    for line in text.split("\n"):
        stripped = line.lstrip()
        # stores and memset calls have no result: dropping them leaves no dangling use
        if marks.search(line) and (
            stripped.startswith("store ") or re.match(r"(tail |notail )?call void @llvm\.mem(set|cpy)", stripped)
        ):
            removed += 1
            continue
        kept.append(line)
    if not removed:
        return module, 0
    return ir.reparse("\n".join(kept), f"{label} without auto-init stores"), removed


class RemoveAutoInit(Transform):
    name = "remove_auto_init"
    order = 30
    description = "remove stores clang marked as automatic variable initialization (-ftrivial-auto-var-init)"

    def enabled(self, ctx: TransformContext) -> bool:
        return bool(getattr(ctx.config, "remove_auto_init", False)) or super().enabled(ctx)

    def apply(self, module, variant_hash, ctx):
        module, _ = remove_auto_init(module, f"kernel {ctx.kernel_name!r}")
        return module, ir.combine_hash(variant_hash, self.name)
