"""`set_launch_bounds`: the most threads per block and the fewest blocks per multiprocessor.

NVPTX (LLVM 22 reads function attributes, not `!nvvm.annotations`): "nvvm.maxntid"="N" and
"nvvm.minctasm"="M", printed as `.maxntid N` / `.minnctapersm M` in the PTX.
AMDGPU: "amdgpu-flat-work-group-size"="1,N" and, for M > 1, "amdgpu-waves-per-eu".
"""

from __future__ import annotations

import math

from mneme.core import ir
from mneme.core.errors import UsageError
from mneme.core.pipeline import Transform, TransformContext, module_target

MAX_THREADS = 1024
_NVPTX_KEYS = ("nvvm.maxntid", "nvvm.minctasm", "nvvm.reqntid", "nvvm.maxnreg")
_AMDGPU_KEYS = ("amdgpu-flat-work-group-size", "amdgpu-waves-per-eu")
# gfx9 (CDNA) compute units: 4 SIMDs, 64-wide waves, at most 8 waves per SIMD.
_SIMDS_PER_CU, _WAVE, _MAX_WAVES_PER_EU = 4, 64, 8


def set_launch_bounds(module, kernel_name: str, max_threads: int, min_blocks_per_sm: int = 1):
    """Return a new module whose kernel carries the launch bounds; raises UsageError when out of range."""
    if not isinstance(max_threads, int) or not 1 <= max_threads <= MAX_THREADS:
        raise UsageError(
            f"launch bounds for kernel {kernel_name!r}: max_threads must be 1..{MAX_THREADS}, not {max_threads!r}"
        )
    if not isinstance(min_blocks_per_sm, int) or min_blocks_per_sm < 1:
        raise UsageError(
            f"launch bounds for kernel {kernel_name!r}: min_blocks_per_sm must be >= 1, not {min_blocks_per_sm!r}"
        )
    ir.find_kernel(module, kernel_name)
    text = str(module)
    if module_target(module) == "amdgpu":
        add = {"amdgpu-flat-work-group-size": f"1,{max_threads}"}
        if min_blocks_per_sm > 1:
            waves = math.ceil(min_blocks_per_sm * math.ceil(max_threads / _WAVE) / _SIMDS_PER_CU)
            add["amdgpu-waves-per-eu"] = str(min(max(waves, 1), _MAX_WAVES_PER_EU))
        text = ir.set_function_attributes(text, kernel_name, add, _AMDGPU_KEYS)
    else:
        add = {"nvvm.maxntid": str(max_threads)}
        required = ir.function_attribute(text, kernel_name, "nvvm.reqntid")
        if required is not None:
            # The kernel fixes its block size (Triton: num_warps * 32); .maxntid may not join .reqntid.
            threads = math.prod(int(v) for v in required.split(","))
            if max_threads < threads:
                raise UsageError(
                    f"launch bounds for kernel {kernel_name!r}: it requires blocks of exactly "
                    f"{threads} threads, so max_threads {max_threads} is impossible"
                )
            add = {}
        if min_blocks_per_sm > 1:
            add["nvvm.minctasm"] = str(min_blocks_per_sm)
        text = ir.set_function_attributes(text, kernel_name, add, _NVPTX_KEYS[:2])
    return ir.reparse(text, f"kernel {kernel_name!r} with launch bounds")


class LaunchBounds(Transform):
    name = "set_launch_bounds"
    order = 60
    description = "max threads per block / min blocks per SM as the back end reads them"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.set_launch_bounds

    def apply(self, module, variant_hash, ctx):
        cfg = ctx.config
        new = set_launch_bounds(module, ctx.kernel_name, cfg.max_threads, cfg.min_blocks_per_sm)
        return new, ir.combine_hash(variant_hash, self.name, cfg.max_threads, cfg.min_blocks_per_sm)
