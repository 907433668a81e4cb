"""The CUDA backend: NVIDIA GPUs through the driver API of `cuda-bindings`.

One primary context per device and process. `CudaDevice` (`mneme_cuda.device`, imported when a
device is opened) is its lifetime and verification (a compare kernel on the device) plus three parts: device memory at the recorded virtual addresses
and the restore of snapshots through pinned staging buffers on one stream (`mneme_cuda.restore`),
kernels from cubin (`mneme_cuda.codegen`: NVPTX -> PTX -> nvJitLink or ptxas) or PTX (driver
JIT) and their launches (`mneme_cuda.kernel`), and timing by the kernel's own CUPTI timestamps
(`mneme_cuda.cupti`) or CUDA events with an L2 flush before each timed run (`mneme_cuda.timing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from mneme.core.backend import Availability, Backend, DeviceBinary
from mneme.core.envvars import EnvVar
from mneme.core.errors import UsageError
from mneme_cuda import codegen, cupti
from mneme_cuda import target as nvptx
from mneme_cuda.driver import format_version, kernel_module_version, probe
from mneme_cuda.properties import compute_capability, device_handle, device_name

if TYPE_CHECKING:
    from mneme_cuda.device import CudaDevice


class CudaBackend(Backend):
    """NVIDIA GPUs through the CUDA driver (`cuda-bindings`)."""

    name = "cuda"
    target = "nvptx"
    ir_targets = {"nvptx": ("nvptx",)}
    default_triple = nvptx.TRIPLE  # Triton writes its NVPTX IR (.llir) without a triple
    kernel_marks = ("ptx_kernel", "@llvm.nvvm.")
    elf_machines = (190,)  # EM_CUDA: cubins
    environment = (
        EnvVar("MNEME_CUDA_RECORDER", "", "path of the CUDA recorder library to preload", "cuda"),
        EnvVar(
            "MNEME_CUDA_RESTORE_DECODE", "auto", "where LZ4 regions decode on restore: auto, device or host", "cuda"
        ),
        EnvVar("MNEME_CUPTI_LIB", "", "path of libcupti (default: the CUDA toolkit's)", "cuda"),
        EnvVar("MNEME_CUPTI_DEBUG", "", "1: the CUPTI timer logs every record and lookup to stderr", "cuda"),
        EnvVar(
            "MNEME_CUPTI_MATCH",
            "windows",
            "how the replay finds a timed launch's CUPTI record: windows (as the recorder) or tags (correlation ids)",
            "cuda",
        ),
        EnvVar("MNEME_CODEGEN_JOBS", "", "processes of parallel code generation (default: the CPUs)", "cuda"),
        EnvVar("MNEME_PTX_ASSEMBLER", "", "ptxas: assemble PTX with ptxas instead of nvJitLink", "cuda"),
        EnvVar("MNEME_MALLOC_TUNING", "1", "0: leave glibc's malloc settings during code generation", "cuda"),
        EnvVar(
            "MNEME_CUDA_EXTRA_STREAMS",
            "0",
            "streams the CUDA device holds besides its own while it times, each with a finished memset (a diagnosis "
            "of how an application's own streams move a replay's time)",
            "cuda",
        ),
        EnvVar(
            "MNEME_CUDA_BEFORE_FLUSH",
            "",
            "read or rewrite: a flushed timed run first reads (or rewrites in place) the recorded ranges through the "
            "SMs, as the application's kernels last touched them",
            "cuda",
        ),
        EnvVar(
            "MNEME_CUDA_MAP_GRANULARITY",
            "minimum",
            "granularity replay maps recorded ranges at: minimum (as recorded) or the driver's recommended",
            "cuda",
        ),
    )
    timers = cupti.TIMERS
    priority = 30
    emits = codegen.EMITS
    image_kinds = ("cubin", "fatbin", "elf", "ptx")

    def availability(self) -> Availability:
        found = probe()
        return Availability(found.usable, found.reason)

    def device_count(self) -> int:
        found = probe()
        return found.device_count if found.usable else 0

    def arch(self, index: int = 0) -> str:
        major, minor = compute_capability(device_handle(index))
        return f"sm_{major}{minor}"

    def claims(self, arch: str) -> bool:
        return nvptx.claims(arch)

    def runs_on(self, target: str, device_arch: str) -> bool:
        return nvptx.runs_on(target, device_arch)

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return nvptx.target_machine(arch, opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        # "resources": how the binary's resources are read (a cached build from an older reader is not reused)
        return {**super().toolchain(arch), "ptxas": codegen.ptxas_version(), "resources": "cubin-1"}

    def compile(
        self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None
    ) -> DeviceBinary:
        """Optimize and generate a cubin or PTX (LLVM's NVPTX back end, then nvJitLink or ptxas).

        `module` is optimized in place when it names `arch` already; IR written for another sm_XX is
        retargeted into a new module first (`target.retarget`), and `module` is left as it was.
        """
        emit = self.check_emit(emit, arch)
        module = nvptx.retarget(module, nvptx.check_arch(arch))  # optimized for the architecture it is compiled for
        opt_seconds = self.optimize(module, config, arch)
        binary = codegen.codegen(module, kernel_name, config, arch, emit=emit)
        return attrs.evolve(binary, stage_times={"optimize": opt_seconds, **binary.stage_times})

    def intermediate(self, config: Any) -> str | None:
        # PTX, which ptxas then assembles; parallel code generation links its partitions in the assembler
        return None if config.codegen_method == "parallel" else "ptx"

    def assemble(self, binary: DeviceBinary, config: Any, arch: str, *, emit: str) -> DeviceBinary:
        if emit != "cubin":
            raise UsageError(f"the cuda backend assembles PTX into a cubin, not {emit!r}")
        return codegen.assemble(binary, config, arch)

    def open_device(self, index: int = 0) -> CudaDevice:
        # the device half (numpy, snapshots, CUPTI) is imported only here: compiling needs none of it
        from mneme_cuda.device import CudaDevice

        return CudaDevice(index)

    def fingerprint(self) -> dict[str, str]:
        info = {"backend": self.name}
        try:
            from cuda import bindings

            info["cuda-bindings"] = getattr(bindings, "__version__", "")
        except ImportError:
            return info
        found = probe()
        if found.usable:
            info["cuda-driver"] = format_version(found.driver_version)
            info["nvidia-driver"] = kernel_module_version()
            info["device"] = device_name(device_handle(0))
        return info
