"""The HIP backend: compiles kernel IR for AMD GPUs (gfxNNN) and runs it through hip-python."""

from __future__ import annotations

from typing import Any

import attrs

from mneme.core.backend import Availability, Backend, DeviceBinary
from mneme.core.envvars import EnvVar
from mneme.core.errors import BackendUnavailable
from mneme_hip import codegen, hipapi, rocprof


class HipBackend(Backend):
    """AMD GPUs: code generation through LLVM's AMDGPU back end and ld.lld; devices through hip-python."""

    name = "hip"
    target = "amdgpu"
    ir_targets = {"amdgpu": ("amdgcn",)}
    thread_range_attributes = ("amdgpu-flat-work-group-size",)  # __launch_bounds__ as clang writes it
    default_triple = codegen.TRIPLE
    kernel_marks = ("amdgpu_kernel", "@llvm.amdgcn.")
    elf_machines = (224,)  # EM_AMDGPU: code objects (hsaco)
    environment = (
        EnvVar("MNEME_LLD", "ld.lld-19", "ld.lld used to link AMDGPU code objects", "hip"),
        EnvVar("MNEME_HIP_RECORDER", "", "path of the HIP recorder library to preload", "hip"),
        EnvVar("MNEME_ROCPROFILER_SDK_LIB", "", "librocprofiler-sdk for the kernel timer", "hip"),
    )
    priority = 20
    emits = codegen.EMITS
    #: replay modes besides "ir": the recorded code object (launch-geometry tuning without IR)
    image_kinds = ("hsaco",)
    timers = rocprof.TIMERS

    def availability(self) -> Availability:
        return hipapi.availability()

    def device_count(self) -> int:
        if not self.availability().usable:
            return 0
        hip = hipapi.bindings()
        return int(hipapi.call("hipGetDeviceCount", hip.hipGetDeviceCount()))

    def _require(self, what: str) -> None:
        availability = self.availability()
        if not availability.usable:
            raise BackendUnavailable(f"the hip backend cannot {what}: {availability.reason}")

    def arch(self, index: int = 0) -> str:
        """The device's code generation target (``gfx90a``); its features are in `DeviceInfo.arch`."""
        from mneme_hip.device import base_arch, device_arch

        self._require(f"query device {index}")
        return base_arch(device_arch(hipapi.bindings(), index))

    def claims(self, arch: str) -> bool:
        return codegen.claims(arch.split(":", 1)[0])

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return codegen.target_machine(arch.split(":", 1)[0], opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        return {**super().toolchain(arch), "lld": codegen.lld_version()}

    def compile(
        self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None
    ) -> DeviceBinary:
        """Optimize and generate a code object (or the object file or assembly before linking).

        `module` is optimized in place when it names `arch` already; IR written for another gfx is
        retargeted into a new module first (`codegen.retarget`), and `module` is left as it was.
        """
        arch = arch.split(":", 1)[0]
        emit = self.check_emit(emit, arch)
        module = codegen.retarget(module, codegen.check_arch(arch))  # optimized for the architecture it is built for
        opt_seconds = self.optimize(module, config, arch)
        binary = codegen.codegen(module, kernel_name, config, arch, emit=emit)
        return attrs.evolve(binary, stage_times={"optimize": opt_seconds, **binary.stage_times})

    def open_device(self, index: int = 0):
        from mneme_hip.device import HipDevice

        self._require(f"open device {index}")
        return HipDevice(index)
