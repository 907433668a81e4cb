"""The HIP backend: compiles kernel IR for AMD GPUs (gfxNNN); it cannot open a device yet."""

from __future__ import annotations

from typing import Any

import attrs

from mneme.core.backend import Availability, Backend, Device, DeviceBinary
from mneme.core.errors import BackendUnavailable
from mneme_hip import codegen

#: Why the backend cannot run kernels here, on any machine, until its device layer exists.
NO_DEVICE_LAYER = ("the HIP device layer (memory at fixed addresses, launch, timing) is not built yet; "
                   "this backend only compiles for gfxNNN (mneme ir compile --arch gfx90a)")  # fmt: skip


class HipBackend(Backend):
    """AMD GPUs: code generation through LLVM's AMDGPU back end and ld.lld."""

    name = "hip"
    target = "amdgpu"
    priority = 20
    emits = codegen.EMITS

    def availability(self) -> Availability:
        return Availability(False, NO_DEVICE_LAYER)

    def device_count(self) -> int:
        return 0

    def arch(self, index: int = 0) -> str:
        raise BackendUnavailable(f"the hip backend cannot query device {index}: {NO_DEVICE_LAYER}")

    def claims(self, arch: str) -> bool:
        return codegen.claims(arch)

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return codegen.target_machine(arch, opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        return {**super().toolchain(arch), "lld": codegen.lld_version()}

    def compile(self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None) -> DeviceBinary:
        """Optimize in place and generate a code object (or the object file or assembly before linking)."""
        emit = self.check_emit(emit, arch)
        opt_seconds = self.optimize(module, config, arch)
        binary = codegen.codegen(module, kernel_name, config, arch, emit=emit)
        return attrs.evolve(binary, stage_times={"optimize": opt_seconds, **binary.stage_times})

    def open_device(self, index: int = 0) -> Device:
        raise BackendUnavailable(f"the hip backend cannot open device {index}: {NO_DEVICE_LAYER}")
