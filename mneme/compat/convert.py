"""`mneme.convert` of the original Mneme API: hand a tuned configuration to Proteus."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def jit_attribute(specializations: list[bool]) -> str:
    """The source annotation that makes Proteus specialize the same arguments (1-based indexes)."""
    indexes = ",".join(str(i + 1) for i, flag in enumerate(specializations) if flag)
    return f'__attribute__((annotate("jit", {indexes})))'


def convert_to_json(filename: str, recorded_execution, kernel_descr, config) -> dict:
    """Write Proteus's tuned-kernel JSON for `config` to `filename`; returns what it wrote.

    Prints how to use it: the annotation for the kernel and the `PROTEUS_TUNED_KERNELS` setting.
    """
    data = {
        kernel_descr.kernel_name: {
            "CodeGen": config.codegen_method,
            "LaunchBounds": config.set_launch_bounds,
            "SpecializeDims": config.specialize_dims,
            "SpecializeDimsRange": config.specialize_dims,
            "OptLevel": 1,
            "Pipeline": config.passes,
            "CodeGenOptLevel": config.codegen_opt,
            "TunedMaxThreads": config.max_threads,
            "MinBlocksPerSM": config.min_blocks_per_sm,
        }
    }
    Path(filename).write_text(json.dumps(data, indent=2))
    print(f"To use the tuned variant of '{recorded_execution.demangled_name}', annotate the kernel with\n"  # noqa: T201
          f"{jit_attribute(kernel_descr.specializations)}\nbuild the application with Proteus and run it with\n"
          f"export PROTEUS_TUNED_KERNELS={Path(filename).resolve()}")  # fmt: skip
    return data
