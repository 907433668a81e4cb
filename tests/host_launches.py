"""The host backend's tests: a kernel's IR as the backend prepares it before choosing a form, and a launch of
it on a fresh host device."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np

from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import backend as host_backend
from mneme.plugins.backends.host import machine, retarget
from mneme.plugins.backends.host.backend import HostBackend

SPACING = 16 << 20  # the buffers of a launch lie this far apart


def retargeted(text: str, kernel: str):
    """`kernel` of module `text` pruned, checked and retargeted to this host (`retarget.retarget`'s result)."""
    tm = machine.pipeline_machine(3)
    pruned, _ = host_backend.pruned_and_checked(llvm.parse_assembly(text), kernel, tm)
    return retarget.retarget(pruned, kernel, llvm.get_process_triple(), str(tm.target_data))


def launch(
    text: str, kernel: str, grid, block, buffers: list[np.ndarray], args: bytes, base: int
) -> tuple[str, list[np.ndarray]]:
    """Launch `kernel` on a fresh device with `buffers` at `base` + k * SPACING: (the runtime's mode for it,
    the buffers' contents afterwards)."""
    binary = HostBackend().compile(
        llvm.parse_assembly(text), kernel, ExperimentConfiguration(grid=1, block=1), "x86_64"
    )
    dev = HostBackend().open_device(0)
    try:
        dev.reserve(base, 1 << 28)
        loaded = dev.load(binary)
        for k, data in enumerate(buffers):
            dev.map(base + k * SPACING, data.nbytes)
            dev.write(base + k * SPACING, data.tobytes())
        dev.launch(loaded, grid, block, 0, args)
        out = [np.frombuffer(dev.read(base + k * SPACING, d.nbytes), d.dtype).copy() for k, d in enumerate(buffers)]
        return loaded.mode, out
    finally:
        dev.close()
