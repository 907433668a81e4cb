"""NVPTX code generation: LLVM's NVPTX back end -> PTX -> cubin (nvJitLink in process, or ptxas).

Resource usage is read from the cubin itself (`mneme_cuda.cubin`), spills from the assembler's log. `codegen_method="parallel"`
generates the PTX of partitions of the module in worker processes (`mneme_cuda.parallel_codegen`)
and links them with nvJitLink.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import envvars, ir
from mneme.core.backend import DeviceBinary, Resources
from mneme.core.errors import IRError, UsageError
from mneme.core.pipeline import check_codegen_opt, prepare_codegen
from mneme.core.types import ExperimentConfiguration
from mneme_cuda.cubin import resources as cubin_resources
from mneme_cuda.target import check_arch, raise_ptx_version, required_ptx, retarget, target_machine

log = logging.getLogger(__name__)

EMITS = ("cubin", "ptx")


_DEBUG_TARGET = re.compile(r"^(\.target\s+\w+), debug$", re.MULTILINE)


def codegen(
    module: llvm.ModuleRef, kernel_name: str, config: ExperimentConfiguration, arch: str, *, emit: str = "cubin"
) -> DeviceBinary:
    """Generate code for an optimized NVPTX module. `emit`: "ptx" or "cubin".

    `config.codegen_opt` (0..3, else ValueError) is LLVM's codegen level; for cubin
    `ptxas_opt`, `max_registers`, `cache_mode` and `ptxas_whole_program` go to the PTX assembler.
    """
    check_codegen_opt(config.codegen_opt)
    if emit not in EMITS:
        raise UsageError(f"cannot emit {emit!r} for {arch}; choose one of {', '.join(EMITS)}")
    arch = check_arch(arch)
    tm = target_machine(arch, config.codegen_opt, config.nvptx_sched4reg)
    targets = ir.function_targets(module)  # read once: retargeting keeps each function's +ptxNN
    module = retarget(module, arch, targets)  # IR written for another sm_XX: its functions now name `arch`
    prepare_codegen(module, kernel_name, "nvptx", tm)
    ptx_version = required_ptx(module, targets)
    times: dict[str, float] = {}
    start = time.perf_counter()
    if emit == "cubin" and config.codegen_method == "parallel" and _parallel_possible(module, kernel_name):
        from mneme_cuda import parallel_codegen  # worker processes: imported only for this method

        ptx = parallel_codegen.emit_partitions(module, kernel_name, arch, config.codegen_opt)
    else:
        ptx = tm.emit_assembly(module)
    # Line tables (Triton's IR carries them) make LLVM mark the target ", debug", which ptxas
    # refuses at any optimization level; the .loc lines alone give profilers their line info.
    ptx = [
        raise_ptx_version(_DEBUG_TARGET.sub(r"\1", part), ptx_version)
        for part in ([ptx] if isinstance(ptx, str) else ptx)
    ]
    times["codegen"] = time.perf_counter() - start
    if emit == "ptx":
        return DeviceBinary("cuda", arch, "ptx", kernel_name, ptx[0].encode(), Resources(), times)
    return _assembled(ptx, kernel_name, config, arch, times)


def assemble(binary: DeviceBinary, config: ExperimentConfiguration, arch: str) -> DeviceBinary:
    """The cubin of a PTX `binary` (`codegen(..., emit="ptx")`): the one `codegen(..., emit="cubin")` makes.

    Only the assembler's fields of `config` (`ptxas_opt`, `max_registers`, `cache_mode`, `ptxas_whole_program`)
    matter here.
    """
    if binary.kind != "ptx":
        raise UsageError(f"cannot assemble a {binary.kind} binary of kernel {binary.kernel_name!r}; it takes PTX")
    return _assembled([binary.data.decode()], binary.kernel_name, config, check_arch(arch), {})


def _assembled(
    ptx: list[str], kernel_name: str, config: ExperimentConfiguration, arch: str, times: dict[str, float]
) -> DeviceBinary:
    start = time.perf_counter()
    threads = 1
    if len(ptx) > 1:
        from mneme_cuda import parallel_codegen

        threads = parallel_codegen.codegen_jobs()
    cubin, report, tool = assemble_ptx(
        ptx[0] if len(ptx) == 1 else ptx, arch, config, name=kernel_name, threads=threads
    )
    times = {**times, "assemble": time.perf_counter() - start}
    _check_register_floor(report, config, arch)
    resources = cubin_resources(cubin, kernel_name, report, tool)
    log.debug("assembled %s with %s: %s", kernel_name, tool, resources)
    return DeviceBinary("cuda", arch, "cubin", kernel_name, cubin, resources, times)


_REGISTER_FLOOR = re.compile(r"adjusting per thread register count of (\d+) to lower bound of (\d+)")


def _check_register_floor(report: str, config: ExperimentConfiguration, arch: str) -> None:
    """Refuse a `max_registers` below the architecture's minimum: the assembler silently raises it."""
    found = _REGISTER_FLOOR.search(report)
    if found and config.max_registers:
        raise UsageError(
            f"max_registers={config.max_registers} is below {arch}'s minimum of {found.group(2)} "
            f"registers per thread (the PTX assembler would raise it to {found.group(2)}); "
            f"use --max-registers {found.group(2)} or more"
        )


def _parallel_possible(module: llvm.ModuleRef, kernel_name: str) -> bool:
    """Parallel NVPTX code generation needs nvJitLink: it links the partitions."""
    if _nvjitlink() is None:
        log.warning(
            "codegen_method=parallel for kernel %r needs nvJitLink to link the partitions "
            "(pip install nvidia-nvjitlink cuda-bindings); generating it serially",
            kernel_name,
        )
        return False
    return True


# -- PTX -> cubin ------------------------------------------------------------------------------


def ptxas_path() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    cuda = Path(os.environ.get("CUDA_PATH", "/usr/local/cuda")) / "bin" / "ptxas"
    return str(cuda) if cuda.exists() else None


@functools.lru_cache(maxsize=1)
def _nvjitlink():
    """cuda.bindings.nvjitlink when it loads here (libnvJitLink from the nvidia-nvjitlink wheel), else None."""
    if envvars.get("MNEME_PTX_ASSEMBLER") == "ptxas":
        return None
    try:
        from cuda.bindings import nvjitlink  # optional: the nvidia-nvjitlink wheel may be absent

        nvjitlink.version()
        _keep_freed_heap()
        return nvjitlink
    except Exception as exc:  # noqa: BLE001 - not installed, or the shared library is missing
        log.debug("nvJitLink not usable (%s); using the ptxas executable", exc)
        return None


# glibc mallopt parameters and the values that keep nvJitLink's per-handle working memory (about 5 MB
# for a small kernel) mapped between builds: without them every handle re-faults it page by page.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MALLOC_TUNING = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 64 << 20), (_M_TOP_PAD, 16 << 20))


def _keep_freed_heap() -> bool:
    """Let this process keep up to 64 MiB of freed heap instead of returning it to the kernel at once.

    Halves nvJitLink's fixed cost per small kernel (docs/design/internals.md, "Keeping nvJitLink's freed heap");
    the generated code is unchanged. MNEME_MALLOC_TUNING=0 leaves glibc's defaults; not glibc: no-op.
    """
    if envvars.get("MNEME_MALLOC_TUNING") == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in _MALLOC_TUNING)


def ptx_assembler() -> str:
    """Which PTX assembler `assemble_ptx` uses: "nvjitlink" (in process) or "ptxas" (subprocess)."""
    return "nvjitlink" if _nvjitlink() is not None else "ptxas"


def ptxas_options(arch: str, config: ExperimentConfiguration) -> list[str]:
    opts = [f"-arch={arch}", f"-O{config.ptxas_opt}", "--verbose"]
    if config.max_registers:
        opts.append(f"-maxrregcount={config.max_registers}")
    if config.cache_mode:
        opts.append(f"--def-load-cache={config.cache_mode}")
    return opts


def nvjitlink_options(arch: str, config: ExperimentConfiguration, threads: int = 1) -> list[str]:
    """nvJitLink's options for `assemble_ptx`: the ptxas options passed through, `-split-compile` for `threads` > 1.

    -no-cache: where the CUDA driver is loaded, nvJitLink otherwise keeps each assembled PTX in the driver's
    JIT cache, and answers a build from there without the assembler's report (no spills, no register-floor
    warning), and fills the user's cache with tuning variants. Mneme's build cache keeps its builds
    (docs/design/internals.md, "nvJitLink and the driver's JIT cache").
    """
    opts = [f"-arch={arch}", "-no-cache"] + [f"-Xptxas={o}" for o in ptxas_options(arch, config)[1:]]
    return opts + [f"-split-compile={threads}"] if threads > 1 else opts


def assemble_ptx(
    ptx: str | Sequence[str],
    arch: str,
    config: ExperimentConfiguration,
    name: str = "kernel",
    assembler: str | None = None,
    threads: int = 1,
) -> tuple[bytes, str, str]:
    """PTX -> cubin. Returns (cubin, the assembler's verbose report, "nvjitlink"|"ptxas").

    `assembler` forces "nvjitlink" or "ptxas"; by default nvJitLink when it loads, else ptxas.
    Several PTX texts (the partitions of parallel code generation) are linked: nvJitLink only.
    `threads` > 1 lets nvJitLink compile functions on that many threads (-split-compile; same cubin).
    `config.ptxas_whole_program` assembles one PTX with the ptxas executable where it is found: whole-program
    code, as nvcc makes an application's without -rdc. nvJitLink compiles PTX only as relocatable code, which
    guards warp shuffles and aligned barriers against a diverged warp (`BRA.DIV`, `WARPSYNC`) and may hold
    more registers (docs/design/investigations/ir-vs-nvcc-2026-12-06.md).
    """
    if assembler not in (None, "nvjitlink", "ptxas"):
        raise UsageError(f"unknown PTX assembler {assembler!r}; use nvjitlink or ptxas")
    parts = [ptx] if isinstance(ptx, str) else list(ptx)
    if getattr(config, "ptxas_whole_program", False) and len(parts) == 1 and assembler is None:
        if ptxas_path() is not None:
            return _ptxas_subprocess(parts[0], arch, config, name) + ("ptxas",)
        _warn_no_whole_program()
    nvjitlink = None if assembler == "ptxas" else _nvjitlink()
    if (assembler == "nvjitlink" or len(parts) > 1) and nvjitlink is None:
        raise IRError(
            f"nvJitLink is not usable here (needed to {'link the PTX partitions of' if len(parts) > 1 else 'assemble'} "
            f"kernel {name!r}): pip install nvidia-nvjitlink cuda-bindings"
        )
    if nvjitlink is not None:
        opts = nvjitlink_options(arch, config, threads)
        handle = nvjitlink.create(len(opts), opts)
        try:
            try:
                for i, part in enumerate(parts):
                    data = part.encode()
                    label = f"{name}.ptx" if len(parts) == 1 else f"{name}.{i}.ptx"
                    nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), label)
                nvjitlink.complete(handle)
            except nvjitlink.nvJitLinkError as exc:
                size = nvjitlink.get_error_log_size(handle)
                log_buf = bytearray(size)
                nvjitlink.get_error_log(handle, log_buf)
                log = log_buf.decode(errors="replace").strip()
                raise IRError(
                    f"nvJitLink could not assemble the PTX of kernel {name!r} for {arch}: "
                    f"{log or exc}{_newer_isa_hint(log, 'nvjitlink')}"
                ) from exc
            cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, cubin)
            info = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, info)
            return bytes(cubin), info.decode(errors="replace"), "nvjitlink"
        finally:
            nvjitlink.destroy(handle)
    return _ptxas_subprocess(parts[0], arch, config, name) + ("ptxas",)


@functools.cache
def _warn_no_whole_program() -> None:
    """Said once per process: the configuration (by default) asks for code this machine cannot make."""
    log.warning(
        "ptxas_whole_program (on by default) needs the ptxas executable (CUDA toolkit's bin/ on PATH, or CUDA_PATH); "
        "assembling relocatable code with nvJitLink instead, which may be slower on kernels with warp shuffles or "
        "barriers (--no-ptxas-whole-program says so explicitly)"
    )


_UNSUPPORTED_ISA = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'")


def _newer_isa_hint(log: str, assembler: str) -> str:
    """What to do when the assembler is older than the PTX ISA the IR's functions were compiled for."""
    found = _UNSUPPORTED_ISA.search(log)
    if not found:
        return ""
    install = "pip install -U nvidia-nvjitlink" if assembler == "nvjitlink" else "install a newer CUDA toolkit"
    return (
        f"\nThe IR was compiled for PTX ISA {found.group(1)} (its functions' +ptx feature, from the CUDA that "
        f"clang saw), and this {assembler} reads up to {found.group(2)}: {install}, or rebuild the IR with a "
        "clang that targets this toolkit."
    )


def _ptxas_subprocess(ptx: str, arch: str, config: ExperimentConfiguration, name: str) -> tuple[bytes, str]:
    ptxas = ptxas_path()
    if ptxas is None:
        raise IRError(
            "ptxas not found: install the CUDA toolkit and put its bin/ on PATH (or set CUDA_PATH), "
            "or install nvidia-nvjitlink and cuda-bindings"
        )
    with tempfile.TemporaryDirectory(prefix="mneme-ptxas-") as tmp:
        src, out = Path(tmp, f"{name[:64]}.ptx"), Path(tmp, "out.cubin")
        src.write_text(ptx)
        proc = subprocess.run(
            [ptxas, *ptxas_options(arch, config), str(src), "-o", str(out)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise IRError(
                f"ptxas could not assemble the PTX of kernel {name!r} for {arch}: {proc.stderr.strip()}"
                f"{_newer_isa_hint(proc.stderr, 'ptxas')}"
            )
        return out.read_bytes(), proc.stdout + proc.stderr


def ptxas_version() -> str:
    nvjitlink = _nvjitlink()
    if nvjitlink is not None:
        return "nvjitlink-" + ".".join(map(str, nvjitlink.version()))
    from mneme.core.native import tool_version

    return tool_version(ptxas_path() or "ptxas")
