"""Code generation: NVPTX -> PTX -> cubin (nvJitLink in process, or ptxas), AMDGPU -> object -> hsaco.

Resource usage comes from the assembler's report (ptxas `--verbose`) for NVIDIA and from the
code object's AMDGPU metadata note (read in process) for AMD.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import ir
from mneme.core.backend import DeviceBinary, Resources
from mneme.core.errors import IRError, UsageError
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

TRIPLES = {"nvptx": "nvptx64-nvidia-cuda", "amdgpu": "amdgcn-amd-amdhsa"}
EMITS = {"nvptx": ("ptx", "cubin"), "amdgpu": ("asm", "object", "hsaco"), "host": ("asm", "object")}
LLD = os.environ.get("MNEME_LLD", "ld.lld-19")

_tm_lock = threading.Lock()


def default_emit(target: str) -> str:
    return {"nvptx": "cubin", "amdgpu": "hsaco", "host": "object"}[target]


def _check_arch(target: str, arch: str | None) -> str:
    if target == "nvptx":
        if not arch or not re.fullmatch(r"sm_\d+[af]?", arch):
            raise UsageError(f"NVPTX needs an architecture like sm_90, not {arch!r}")
    elif target == "amdgpu":
        if not arch or not re.fullmatch(r"gfx[0-9a-f]+", arch):
            raise UsageError(f"AMDGPU needs an architecture like gfx90a, not {arch!r}")
    return arch or ""


@functools.lru_cache(maxsize=32)
def _target_machine(target: str, arch: str, opt: int) -> llvm.TargetMachine:
    ir.initialize()
    if target == "host":
        triple = llvm.get_process_triple()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt,
                                                                     reloc="pic", codemodel="jitdefault", jit=True)  # fmt: skip
    target_obj = llvm.Target.from_triple(TRIPLES[target])
    machine = target_obj.create_target_machine(cpu=arch, features="", opt=opt, reloc="pic" if target == "amdgpu" else "default")
    return machine


def target_machine(target: str, arch: str | None, opt: int = 3) -> llvm.TargetMachine:
    """A cached llvmlite target machine for nvptx (cpu=sm_XX), amdgpu (cpu=gfxNNN) or host."""
    from mneme.core.pipeline import check_codegen_opt, normalize_target

    target = normalize_target(target)
    check_codegen_opt(opt)
    arch = _check_arch(target, arch)
    with _tm_lock:
        return _target_machine(target, arch if target != "host" else "", opt)


def _retarget(module: llvm.ModuleRef, target: str, arch: str) -> None:
    """Make the module's triple and data layout the target's; a mismatch of target is an error."""
    from mneme.core.pipeline import module_target

    have = module_target(module)
    if target != "host" and have != target:
        raise IRError(f"module {module.name!r} targets {module.triple or 'no triple'}, not {TRIPLES[target]}; "
                      f"compile it for its own target (arch) instead")  # fmt: skip
    tm = target_machine(target, arch)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)


_DEBUG_TARGET = re.compile(r"^(\.target\s+\w+), debug$", re.MULTILINE)


def codegen(
    module: llvm.ModuleRef,
    kernel_name: str,
    config: ExperimentConfiguration,
    target: str,
    arch: str,
    *,
    emit: str | None = None,
) -> DeviceBinary:
    """Generate code for an optimized module. `emit`: ptx|cubin (nvptx), asm|object|hsaco (amdgpu).

    `config.codegen_opt` (0..3, else ValueError) is LLVM's codegen level; for cubin
    `ptxas_opt`, `max_registers` and `cache_mode` go to the PTX assembler.
    """
    from mneme.core.pipeline import check_codegen_opt, normalize_target

    target = normalize_target(target)
    check_codegen_opt(config.codegen_opt)
    emit = emit or default_emit(target)
    if emit not in EMITS[target]:
        raise UsageError(f"cannot emit {emit!r} for target {target}; choose one of {', '.join(EMITS[target])}")
    arch = _check_arch(target, arch)
    ir.find_kernel(module, kernel_name)
    ir.verify(module, f"module of kernel {kernel_name!r} before code generation")
    _retarget(module, target, arch)
    tm = target_machine(target, arch, config.codegen_opt)
    times: dict[str, float] = {}
    start = time.perf_counter()
    if target == "nvptx":
        if emit == "cubin" and config.codegen_method == "parallel" and _parallel_possible(module, kernel_name):
            from mneme.core import parallel_codegen

            ptx = parallel_codegen.emit_partitions(module, kernel_name, arch, config.codegen_opt)
        else:
            ptx = tm.emit_assembly(module)
        # Line tables (Triton's IR carries them) make LLVM mark the target ", debug", which ptxas
        # refuses at any optimization level; the .loc lines alone give profilers their line info.
        ptx = [_DEBUG_TARGET.sub(r"\1", part) for part in ([ptx] if isinstance(ptx, str) else ptx)]
        times["codegen"] = time.perf_counter() - start
        if emit == "ptx":
            return DeviceBinary("cuda", arch, "ptx", kernel_name, ptx[0].encode(), Resources(), times)
        start = time.perf_counter()
        threads = 1
        if len(ptx) > 1:
            from mneme.core import parallel_codegen

            threads = parallel_codegen.codegen_jobs()
        cubin, report, tool = assemble_ptx(ptx[0] if len(ptx) == 1 else ptx, arch, config, name=kernel_name, threads=threads)
        times["assemble"] = time.perf_counter() - start
        resources = ptxas_resources(report, kernel_name)
        log.debug("assembled %s with %s: %s", kernel_name, tool, resources)
        return DeviceBinary("cuda", arch, "cubin", kernel_name, cubin, resources, times)
    if config.codegen_method == "parallel" and target == "amdgpu":
        # a call into another object makes the AMDGPU back end assume the worst registers and stack for it
        log.info("codegen_method=parallel: kernel %r is generated serially (AMDGPU partitions would lose "
                 "the callees' resource usage)", kernel_name)  # fmt: skip
    if emit == "asm":
        data = tm.emit_assembly(module).encode()
        times["codegen"] = time.perf_counter() - start
        return DeviceBinary("hip" if target == "amdgpu" else "host", arch, "asm", kernel_name, data, Resources(), times)
    obj = tm.emit_object(module)
    times["codegen"] = time.perf_counter() - start
    if target == "host" or emit == "object":
        return DeviceBinary("hip" if target == "amdgpu" else "host", arch, "object", kernel_name, obj, Resources(), times)
    start = time.perf_counter()
    hsaco = link_hsaco(obj, kernel_name)
    times["link"] = time.perf_counter() - start
    start = time.perf_counter()
    resources = hsaco_resources(hsaco, kernel_name)
    times["resources"] = time.perf_counter() - start
    return DeviceBinary("hip", arch, "hsaco", kernel_name, hsaco, resources, times)


def _parallel_possible(module: llvm.ModuleRef, kernel_name: str) -> bool:
    """Parallel NVPTX code generation needs nvJitLink: it links the partitions."""
    if _nvjitlink() is None:
        log.warning("codegen_method=parallel for kernel %r needs nvJitLink to link the partitions "
                    "(pip install nvidia-nvjitlink cuda-bindings); generating it serially", kernel_name)  # fmt: skip
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
    if os.environ.get("MNEME_PTX_ASSEMBLER", "") == "ptxas":
        return None
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
        _keep_freed_heap()
        return nvjitlink
    except Exception as exc:  # not installed, or the shared library is missing
        log.debug("nvJitLink not usable (%s); using the ptxas executable", exc)
        return None


# glibc mallopt parameters and the values that keep nvJitLink's per-handle working memory (about 5 MB
# for a small kernel) mapped between builds: without them every handle re-faults it page by page.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MALLOC_TUNING = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 64 << 20), (_M_TOP_PAD, 16 << 20))


def _keep_freed_heap() -> bool:
    """Let this process keep up to 64 MiB of freed heap instead of returning it to the kernel at once.

    Halves nvJitLink's fixed cost per small kernel (measured: benchmarks/results/cpu-compile.md);
    the generated code is unchanged. MNEME_MALLOC_TUNING=0 leaves glibc's defaults; not glibc: no-op.
    """
    if os.environ.get("MNEME_MALLOC_TUNING", "1") == "0":
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


def assemble_ptx(ptx: str | Sequence[str], arch: str, config: ExperimentConfiguration, name: str = "kernel",
                 assembler: str | None = None, threads: int = 1) -> tuple[bytes, str, str]:  # fmt: skip
    """PTX -> cubin. Returns (cubin, the assembler's verbose report, "nvjitlink"|"ptxas").

    `assembler` forces "nvjitlink" or "ptxas"; by default nvJitLink when it loads, else ptxas.
    Several PTX texts (the partitions of parallel code generation) are linked: nvJitLink only.
    `threads` > 1 lets nvJitLink compile functions on that many threads (-split-compile; same cubin).
    """
    if assembler not in (None, "nvjitlink", "ptxas"):
        raise UsageError(f"unknown PTX assembler {assembler!r}; use nvjitlink or ptxas")
    parts = [ptx] if isinstance(ptx, str) else list(ptx)
    nvjitlink = None if assembler == "ptxas" else _nvjitlink()
    if (assembler == "nvjitlink" or len(parts) > 1) and nvjitlink is None:
        raise IRError(f"nvJitLink is not usable here (needed to {'link the PTX partitions of' if len(parts) > 1 else 'assemble'} "
                      f"kernel {name!r}): pip install nvidia-nvjitlink cuda-bindings")  # fmt: skip
    if nvjitlink is not None:
        opts = [f"-arch={arch}"] + [f"-Xptxas={o}" for o in ptxas_options(arch, config)[1:]]
        if threads > 1:
            opts.append(f"-split-compile={threads}")
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
                raise IRError(f"nvJitLink could not assemble the PTX of kernel {name!r} for {arch}: "
                              f"{log_buf.decode(errors='replace').strip() or exc}") from exc  # fmt: skip
            cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, cubin)
            info = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, info)
            return bytes(cubin), info.decode(errors="replace"), "nvjitlink"
        finally:
            nvjitlink.destroy(handle)
    return _ptxas_subprocess(parts[0], arch, config, name) + ("ptxas",)


def _ptxas_subprocess(ptx: str, arch: str, config: ExperimentConfiguration, name: str) -> tuple[bytes, str]:
    ptxas = ptxas_path()
    if ptxas is None:
        raise IRError("ptxas not found: install the CUDA toolkit and put its bin/ on PATH (or set CUDA_PATH), "
                      "or install nvidia-nvjitlink and cuda-bindings")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mneme-ptxas-") as tmp:
        src, out = Path(tmp, f"{name[:64]}.ptx"), Path(tmp, "out.cubin")
        src.write_text(ptx)
        proc = subprocess.run([ptxas, *ptxas_options(arch, config), str(src), "-o", str(out)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise IRError(f"ptxas could not assemble the PTX of kernel {name!r} for {arch}: {proc.stderr.strip()}")
        return out.read_bytes(), proc.stdout + proc.stderr


def ptxas_resources(report: str, kernel_name: str) -> Resources:
    """Registers, spills and memory of `kernel_name` from ptxas' `--verbose` report."""
    section = report
    marker = re.search(r"Compiling entry function '" + re.escape(kernel_name) + r"'", report)
    if marker:
        rest = report[marker.end():]
        nxt = re.search(r"Compiling entry function '", rest)
        section = rest[: nxt.start()] if nxt else rest

    def grab(pattern: str) -> int:
        m = re.search(pattern, section)
        return int(m.group(1)) if m else 0

    return Resources(
        registers=grab(r"Used (\d+) registers"),
        local_mem=grab(r"(\d+) bytes stack frame") + grab(r"(\d+) bytes lmem"),
        const_mem=sum(int(x) for x in re.findall(r"(\d+) bytes cmem\[\d+\]", section)),
        shared_mem=grab(r"(\d+) bytes smem"),
        spill_stores=grab(r"(\d+) bytes spill stores"),
        spill_loads=grab(r"(\d+) bytes spill loads"),
    )


def ptxas_version() -> str:
    nvjitlink = _nvjitlink()
    if nvjitlink is not None:
        return "nvjitlink-" + ".".join(map(str, nvjitlink.version()))
    return _tool_version(ptxas_path() or "ptxas")


@functools.lru_cache(maxsize=8)
def _tool_version(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "missing"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"


def lld_version() -> str:
    return _tool_version(LLD)


# -- AMDGPU object -> hsaco --------------------------------------------------------------------


def link_hsaco(obj: bytes, kernel_name: str) -> bytes:
    """Link an AMDGPU relocatable object into a code object (.hsaco) with ld.lld."""
    if shutil.which(LLD) is None:
        raise IRError(f"{LLD} not found: install lld-19 (apt-get install lld-19) or set MNEME_LLD")
    with tempfile.TemporaryDirectory(prefix="mneme-lld-") as tmp:
        src, out = Path(tmp, "kernel.o"), Path(tmp, "kernel.hsaco")
        src.write_bytes(obj)
        proc = subprocess.run([LLD, "-shared", "--no-undefined", str(src), "-o", str(out)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise IRError(f"{LLD} could not link the code object of kernel {kernel_name!r}: {proc.stderr.strip()}")
        return out.read_bytes()


NT_AMDGPU_METADATA = 32


def amdgpu_metadata(hsaco: bytes) -> dict:
    """The AMDGPU metadata note (code object v3+) of a code object, as a dict; {} when absent.

    Read in process: the ELF note `AMDGPU`/NT_AMDGPU_METADATA holds MessagePack.
    """
    try:
        if hsaco[:4] != b"\x7fELF" or hsaco[4] != 2:
            raise ValueError("not a 64-bit ELF file")
        shoff = struct.unpack_from("<Q", hsaco, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", hsaco, 0x3A)
        for i in range(shnum):
            sh_type, _, _, offset, size = struct.unpack_from("<IQQQQ", hsaco, shoff + i * shentsize + 4)
            if sh_type != 7:  # SHT_NOTE
                continue
            pos, end = offset, offset + size
            while pos + 12 <= end:
                namesz, descsz, note_type = struct.unpack_from("<III", hsaco, pos)
                name = hsaco[pos + 12 : pos + 12 + namesz].rstrip(b"\0")
                desc = pos + 12 + (namesz + 3) // 4 * 4
                if name == b"AMDGPU" and note_type == NT_AMDGPU_METADATA:
                    value, _ = _unpack_msgpack(hsaco, desc)
                    return value
                pos = desc + (descsz + 3) // 4 * 4
    except (ValueError, IndexError, struct.error) as exc:
        raise IRError(f"cannot read the AMDGPU metadata of the code object: {exc}") from exc
    return {}


def _unpack_msgpack(data: bytes, pos: int):
    """Decode one MessagePack value at `pos`; returns (value, next position)."""
    tag = data[pos]
    pos += 1
    if tag <= 0x7F:
        return tag, pos
    if tag >= 0xE0:
        return tag - 0x100, pos
    if 0x80 <= tag <= 0x8F or tag in (0xDE, 0xDF):
        count, pos = (tag & 0x0F, pos) if tag <= 0x8F else _length(data, pos, 2 if tag == 0xDE else 4)
        result = {}
        for _ in range(count):
            key, pos = _unpack_msgpack(data, pos)
            result[key], pos = _unpack_msgpack(data, pos)
        return result, pos
    if 0x90 <= tag <= 0x9F or tag in (0xDC, 0xDD):
        count, pos = (tag & 0x0F, pos) if tag <= 0x9F else _length(data, pos, 2 if tag == 0xDC else 4)
        items = []
        for _ in range(count):
            item, pos = _unpack_msgpack(data, pos)
            items.append(item)
        return items, pos
    if 0xA0 <= tag <= 0xBF or tag in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        if tag <= 0xBF:
            size = tag & 0x1F
        else:
            size, pos = _length(data, pos, {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[tag])
        raw = data[pos : pos + size]
        return (raw if tag >= 0xC4 and tag <= 0xC6 else raw.decode("utf-8")), pos + size
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if tag in simple:
        return simple[tag], pos
    fmt = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
           0xCA: ">f", 0xCB: ">d"}.get(tag)  # fmt: skip
    if fmt is None:
        raise ValueError(f"unsupported MessagePack tag 0x{tag:02x}")
    (value,) = struct.unpack_from(fmt, data, pos)
    return value, pos + struct.calcsize(fmt)


def _length(data: bytes, pos: int, size: int) -> tuple[int, int]:
    return int.from_bytes(data[pos : pos + size], "big"), pos + size


def hsaco_resources(hsaco: bytes, kernel_name: str) -> Resources:
    meta = amdgpu_metadata(hsaco)
    for kernel in meta.get("amdhsa.kernels", []):
        if kernel.get(".name") == kernel_name:
            return Resources(
                registers=int(kernel.get(".vgpr_count", -1)),
                local_mem=int(kernel.get(".private_segment_fixed_size", -1)),
                const_mem=-1,
                shared_mem=int(kernel.get(".group_segment_fixed_size", -1)),
                spill_stores=int(kernel.get(".vgpr_spill_count", 0)) + int(kernel.get(".sgpr_spill_count", 0)),
                spill_loads=-1,
                max_threads_per_block=int(kernel.get(".max_flat_workgroup_size", -1)),
            )
    return Resources()
