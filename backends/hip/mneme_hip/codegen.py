"""AMDGPU code generation: LLVM's AMDGPU back end -> relocatable object -> code object (.hsaco, ld.lld).

Resource usage comes from the code object's AMDGPU metadata note (`mneme_hip.metadata`).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import envvars, ir, llvm_cpus
from mneme.core.backend import DeviceBinary, Resources
from mneme.core.errors import IRError, UsageError
from mneme.core.native import tool_version
from mneme.core.pipeline import check_codegen_opt, prepare_codegen
from mneme.core.types import ExperimentConfiguration
from mneme_hip.metadata import hsaco_resources

log = logging.getLogger(__name__)

TRIPLE = "amdgcn-amd-amdhsa"
EMITS = ("hsaco", "object", "asm")


def lld() -> str:
    """The ld.lld to link with (MNEME_LLD, read when used: the backend declares the variable)."""
    return envvars.get("MNEME_LLD") or "ld.lld-19"


_ARCH = re.compile(r"gfx[0-9a-f]+")


def claims(arch: str) -> bool:
    return bool(_ARCH.fullmatch(arch or ""))


def check_arch(arch: str | None) -> str:
    if not arch or not claims(arch):
        raise UsageError(f"AMDGPU needs an architecture like gfx90a, not {arch!r}")
    if not llvm_cpus.recognized(TRIPLE, arch):
        raise UsageError(
            f"unknown architecture {arch!r}: this LLVM's AMDGPU target does not know it; give one it does, like gfx90a"
        )
    return arch


def _major(cpu: str) -> int:
    """The generation of a gfx name: 9 for gfx90a and gfx9-4-generic, 11 for gfx1100 and gfx11-generic."""
    name = cpu.split(":", 1)[0]
    generic = re.fullmatch(r"gfx(\d+)(?:-\d+)?-generic", name)
    if generic:
        return int(generic.group(1))
    if not re.fullmatch(r"gfx\d+[0-9a-f]{2}", name):
        raise IRError(f"cannot tell the generation of AMD GPU {cpu!r}; expected a name like gfx90a or gfx1100")
    return int(name[3:-2])


def wavefront_size(cpu: str, features: list[str] | tuple[str, ...] = ()) -> int:
    """The wavefront size code for `cpu` runs with: the explicit feature, else the architecture's default
    (64 up to gfx9, the CDNA and GCN parts; 32 from gfx10 on, the RDNA parts, which can also run wave64)."""
    if "+wavefrontsize32" in features:
        return 32
    if "+wavefrontsize64" in features:
        return 64
    return 32 if _major(cpu) >= 10 else 64


def retarget(module: llvm.ModuleRef, arch: str) -> llvm.ModuleRef:
    """`module` with every function's `target-cpu` naming `arch` (and its features left to `arch`).

    Clang writes the architecture into each function (`"target-cpu"="gfx90a"` and that chip's
    feature list), and LLVM's AMDGPU back end generates each function for it: gfx90a IR compiled for
    gfx1100 gave gfx90a machine code inside a gfx1100 code object. Each function keeps its
    wavefront size (the front end may have folded it into the code: `warpSize`), written as a
    feature; IR that `arch` cannot run at its wavefront size (wave32 IR on a gfx9 part) is refused.
    The module itself is returned when nothing names another architecture.
    """
    targets = ir.function_targets(module)
    foreign = {cpu for cpu, _ in targets if cpu and cpu.split(":", 1)[0] != arch}
    if not foreign:
        return module
    for cpu, features in targets:
        if cpu and wavefront_size(cpu, features) == 32 and _major(arch) < 10:
            raise IRError(
                f"the IR of module {module.name!r} was built for {cpu} with wavefront size 32, which "
                f"{arch} (wavefront size 64 only) cannot run: its code may rely on the wavefront size; "
                f"build the IR for {arch} (hipcc --offload-arch={arch} under mneme-cc)"
            )
    sizes = {wavefront_size(cpu, features) for cpu, features in targets if cpu}
    if len(sizes) > 1:
        raise IRError(
            f"the functions of module {module.name!r} were built for different wavefront sizes "
            f"({', '.join(map(str, sorted(sizes)))}); build the IR for {arch}"
        )
    wave = sizes.pop()
    return ir.retarget_functions(
        module, arch, lambda _features: [f"+wavefrontsize{wave}"], f"module {module.name!r} retargeted to {arch}"
    )


def target_machine(arch: str | None, opt: int = 3) -> llvm.TargetMachine:
    """A cached llvmlite AMDGPU target machine (cpu=gfxNNN, position-independent code)."""
    check_codegen_opt(opt)
    return ir.target_machine(TRIPLE, check_arch(arch), "", opt, reloc="pic")


def codegen(
    module: llvm.ModuleRef, kernel_name: str, config: ExperimentConfiguration, arch: str, *, emit: str = "hsaco"
) -> DeviceBinary:
    """Generate code for an optimized AMDGPU module. `emit`: "hsaco", "object" or "asm".

    `config.codegen_opt` (0..3, else ValueError) is LLVM's codegen level.
    """
    check_codegen_opt(config.codegen_opt)
    if emit not in EMITS:
        raise UsageError(f"cannot emit {emit!r} for {arch}; choose one of {', '.join(EMITS)}")
    arch = check_arch(arch)
    tm = target_machine(arch, config.codegen_opt)
    module = retarget(module, arch)  # IR written for another gfx: its functions now name `arch`
    prepare_codegen(module, kernel_name, "amdgpu", tm)
    times: dict[str, float] = {}
    start = time.perf_counter()
    if config.codegen_method == "parallel":
        # a call into another object makes the AMDGPU back end assume the worst registers and stack for it
        log.info(
            "codegen_method=parallel: kernel %r is generated serially (AMDGPU partitions would lose "
            "the callees' resource usage)",
            kernel_name,
        )
    if emit == "asm":
        data = tm.emit_assembly(module).encode()
        times["codegen"] = time.perf_counter() - start
        return DeviceBinary("hip", arch, "asm", kernel_name, data, Resources(), times)
    obj = tm.emit_object(module)
    times["codegen"] = time.perf_counter() - start
    if emit == "object":
        return DeviceBinary("hip", arch, "object", kernel_name, obj, Resources(), times)
    start = time.perf_counter()
    hsaco = link_hsaco(obj, kernel_name)
    times["link"] = time.perf_counter() - start
    start = time.perf_counter()
    resources = hsaco_resources(hsaco, kernel_name)
    times["resources"] = time.perf_counter() - start
    return DeviceBinary("hip", arch, "hsaco", kernel_name, hsaco, resources, times)


def link_hsaco(obj: bytes, kernel_name: str) -> bytes:
    """Link an AMDGPU relocatable object into a code object (.hsaco) with ld.lld."""
    linker = lld()
    if shutil.which(linker) is None:
        raise IRError(f"{linker} not found: install lld-19 (apt-get install lld-19) or set MNEME_LLD")
    with tempfile.TemporaryDirectory(prefix="mneme-lld-") as tmp:
        src, out = Path(tmp, "kernel.o"), Path(tmp, "kernel.hsaco")
        src.write_bytes(obj)
        proc = subprocess.run(
            [linker, "-shared", "--no-undefined", str(src), "-o", str(out)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise IRError(f"{linker} could not link the code object of kernel {kernel_name!r}: {proc.stderr.strip()}")
        return out.read_bytes()


def lld_version() -> str:
    """The linker's `--version` line ("missing" when it is not installed)."""
    return tool_version(lld())
