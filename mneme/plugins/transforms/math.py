"""`fast_math`: let the code generator trade IEEE exactness for speed (the configuration's `fast_math`).

Adds the `fast` flags to every floating-point operation and flushes f32 denormals to zero
(NVPTX then emits `.ftz` and approximate division/square root).
"""

from __future__ import annotations

import re

from mneme.core import ir
from mneme.core.pipeline import Transform, TransformContext

_FP_OP = re.compile(r"(= (?:fadd|fsub|fmul|fdiv|frem|fneg|fcmp) )(?!fast )")
_FP_ATTRS = {
    "denormal-fp-math-f32": "preserve-sign,preserve-sign",
    "no-signed-zeros-fp-math": "true",
    "no-nans-fp-math": "true",
    "no-infs-fp-math": "true",
    "approx-func-fp-math": "true",
}


def fast_math(module, label: str = "module"):
    text = str(module)
    for name, _start, _body, _end in ir.defined_function_spans(text):
        text = ir.set_function_attributes(text, name, _FP_ATTRS)
    spans = ir.defined_function_spans(text)
    out, last = [], 0
    for _name, start, body, end in spans:
        out.append(text[last:body])
        out.append(
            "\n".join(
                ir.sub_outside_strings(_FP_OP, lambda m: m.group(1) + "fast ", line)
                for line in text[body:end].split("\n")
            )
        )
        last = end
    out.append(text[last:])
    return ir.reparse("".join(out), f"{label} with fast math")


class FastMath(Transform):
    name = "fast_math"
    order = 70
    description = "fast-math flags on floating-point operations, f32 denormals flushed to zero"

    def enabled(self, ctx: TransformContext) -> bool:
        return bool(getattr(ctx.config, "fast_math", False)) or super().enabled(ctx)

    def apply(self, module, variant_hash, ctx):
        return fast_math(module, f"kernel {ctx.kernel_name!r}"), ir.combine_hash(variant_hash, self.name)
