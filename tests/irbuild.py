"""Build the device LLVM IR of the test corpus (`tests/data/kernels/`) with clang-19, cached on disk.

The corpus is the same nine small, deterministic kernels written in CUDA (`*.cu`) and HIP
(`*.hip`). Tests import this module (``from tests.irbuild import ...`` or, from a test
file, ``import irbuild`` with ``tests/`` on ``sys.path``)::

    from tests.irbuild import build_cuda_ir, build_hip_ir, corpus
    path = build_cuda_ir("saxpy")                 # Path to a .ll: NVPTX IR for sm_90
    path = build_hip_ir("saxpy")                  # Path to a .ll: AMDGPU IR for gfx90a
    for k in corpus():                            # CorpusKernel(source, lang, kernels, ...)
        build_cuda_ir(k.source) ; k.kernels       # mangled kernel names defined in that source

What the IR is
--------------
* CUDA: ``clang-19 -x cuda --cuda-device-only --cuda-gpu-arch=sm_90 -emit-llvm -S``
  against the CUDA 13 toolkit in ``/usr/local/cuda`` (``$CUDA_PATH`` overrides). clang links
  libdevice (``nvvm/libdevice/libdevice.10.bc``) itself, so math functions (``sinf``...) are
  resolved: the IR calls no ``__nv_*`` function, but libdevice's code brings NVVM intrinsics
  and some inline PTX ``asm``. Kernels are ``extern "C"`` except the templated one.
* HIP: ``clang-19 -x hip --offload-arch=gfx90a --offload-device-only`` with the HIP 5.2
  headers and ROCm device libraries of Debian (packages ``libamdhip64-dev`` and
  ``rocm-device-libs``); the IR is code object v5 (``amdhsa_code_object_version`` 500).
* By default (``opt="raw"``) the IR is clang's ``-O3`` front-end output before any LLVM pass
  (``-Xclang -disable-llvm-optzns``): allocas, small inline helpers, libdevice / ocml
  functions linked in but not yet inlined, the optimization hints of -O3 (no
  ``llvm.loop.unroll.disable``, which clang's ``-O1`` would add). Run it through
  ``mneme.core.pipeline.optimize`` (or any pipeline) before executing it. Pass
  ``opt="-O1"`` (or any clang flag) for pre-optimized IR, ``opt="-O0"`` for unoptimized IR
  without ``optnone``.

Results are cached by content (the source text, the flags, the clang version and the stub
headers) under ``$MNEME_IRBUILD_CACHE`` or ``<tmp>/mneme-irbuild-<uid>``, written atomically,
so parallel test processes share them. ``out_dir`` copies the result there instead.
A failed build raises `IRBuildError` with clang's output.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent / "data" / "kernels"
STUBS_DIR = KERNELS_DIR / "include-stubs"
CLANG = os.environ.get("MNEME_CLANG", "clang-19")
# The front end's IR before any LLVM optimization (what a tuning pipeline should start from);
# clang's -O1 would mark loops llvm.loop.unroll.disable and leave nothing to tune.
RAW = "raw"
ROCM_BITCODE_DIRS = ("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/opt/rocm/amdgcn/bitcode")


class IRBuildError(RuntimeError):
    """clang could not build a corpus source; the message carries the command and its output."""


@dataclass(frozen=True)
class CorpusKernel:
    """One corpus source and the kernels it defines."""

    source: str  # stem of the file in tests/data/kernels (same for .cu and .hip)
    kernels: tuple[str, ...]  # mangled kernel names, in the order they appear
    description: str
    uses_math: bool = False  # calls libdevice / ocml math functions
    uses_globals: bool = False  # defines device global variables

    @property
    def kernel(self) -> str:
        """The first (for most sources the only) kernel."""
        return self.kernels[0]

    def path(self, lang: str = "cuda") -> Path:
        return KERNELS_DIR / f"{self.source}{_suffix(lang)}"


_CORPUS = (
    CorpusKernel("vector_add", ("vector_add",), "c[i] = a[i] + b[i]"),
    CorpusKernel("saxpy", ("saxpy",), "y = a*x + y, grid-stride loop"),
    CorpusKernel("stencil2d", ("stencil2d",), "five-point 2D stencil, 2D grid"),
    CorpusKernel("reduce_sum", ("reduce_sum",), "shared-memory tree reduction with __syncthreads"),
    CorpusKernel(
        "scale_template", ("_Z5scaleIfEvPT_S0_i", "_Z5scaleIiEvPT_S0_i"), "templated scale<float>, scale<int>"
    ),
    CorpusKernel("math_funcs", ("math_funcs",), "sinf/expf/sqrtf/logf/powf", uses_math=True),
    CorpusKernel("device_global", ("add_bias",), "reads and writes __device__ globals", uses_globals=True),
    CorpusKernel("histogram", ("histogram",), "atomicAdd histogram"),
    CorpusKernel("warp_reduce", ("warp_reduce",), "warp sum with __shfl_down_sync, then atomicAdd"),
)


def corpus() -> list[CorpusKernel]:
    """Every corpus source with its kernels (the same list for CUDA and HIP)."""
    return list(_CORPUS)


def corpus_kernels() -> list[tuple[str, str]]:
    """(source, mangled kernel name) for every kernel of the corpus: handy for parametrize."""
    return [(k.source, name) for k in _CORPUS for name in k.kernels]


def _suffix(lang: str) -> str:
    if lang not in ("cuda", "hip"):
        raise ValueError(f"unknown corpus language {lang!r}; use 'cuda' or 'hip'")
    return ".cu" if lang == "cuda" else ".hip"


def _resolve(name_or_path: str | os.PathLike, lang: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".cu", ".hip") and path.exists():
        return path.resolve()
    candidate = KERNELS_DIR / f"{path.stem if path.suffix else name_or_path}{_suffix(lang)}"
    if not candidate.exists():
        known = ", ".join(k.source for k in _CORPUS)
        raise IRBuildError(f"no {lang} corpus source {str(name_or_path)!r} ({candidate}); known: {known}")
    return candidate


def cache_dir() -> Path:
    root = os.environ.get("MNEME_IRBUILD_CACHE")
    path = Path(root) if root else Path(tempfile.gettempdir()) / f"mneme-irbuild-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=1)
def clang_version() -> str:
    try:
        out = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise IRBuildError(f"{CLANG} is not usable ({exc}); install clang-19 (apt-get install clang-19)") from exc
    return out.splitlines()[0]


def cuda_path() -> Path:
    return Path(os.environ.get("CUDA_PATH", "/usr/local/cuda"))


def rocm_bitcode_dir() -> Path | None:
    for d in ROCM_BITCODE_DIRS:
        if Path(d, "ocml.bc").exists():
            return Path(d)
    return None


def hip_available() -> tuple[bool, str]:
    """Whether HIP corpus IR can be built here (headers and device libraries), and why not."""
    if rocm_bitcode_dir() is None:
        return False, "needs rocm-device-libs: the ROCm device libraries (apt-get install rocm-device-libs)"
    if not Path("/usr/include/hip/hip_runtime.h").exists():
        return False, "needs libamdhip64-dev: the HIP headers (apt-get install libamdhip64-dev)"
    return True, ""


def cuda_available() -> tuple[bool, str]:
    """Whether CUDA corpus IR can be built and assembled here (clang-19, CUDA headers, ptxas), and why not."""
    if not (cuda_path() / "include" / "cuda_runtime.h").exists():
        return False, f"needs the CUDA toolkit headers: none under {cuda_path()} (set CUDA_PATH)"
    if shutil.which(CLANG) is None:
        return False, f"needs {CLANG}: apt-get install clang-19"
    if shutil.which("ptxas") is None and not (cuda_path() / "bin" / "ptxas").exists():
        return False, f"needs ptxas: not in PATH or {cuda_path() / 'bin'} (the CUDA toolkit)"
    return True, ""


def _cuda_flags(arch: str) -> list[str]:
    cuda = cuda_path()
    return [
        "-x",
        "cuda",
        "--cuda-device-only",
        f"--cuda-gpu-arch={arch}",
        f"--cuda-path={cuda}",
        "-Wno-unknown-cuda-version",
        "-isystem",
        str(STUBS_DIR),
        "-isystem",
        str(cuda / "include" / "cccl"),
    ]


def isa_version(arch: str) -> int:
    """The ROCm device libraries' ``__oclc_ISA_version`` of `arch` (gfx90a -> 9010, gfx1100 -> 11000)."""
    digits = arch[len("gfx") :].split(":")[0]
    major, minor, step = digits[:-2], digits[-2], digits[-1]
    return int(major) * 1000 + int(minor, 16) * 100 + int(step, 16)


def hip_device_lib_dir(*archs: str) -> Path:
    """A folder with the ROCm device libraries for `archs`: the installed one, or, when it lacks an
    `oclc_isa_version_<arch>.bc` (Debian's ROCm 5.2 stops at gfx1036 and gfx940), a folder of links
    to it plus those one-constant libraries, written here from their ISA versions."""
    bitcode = rocm_bitcode_dir()
    if bitcode is None:
        raise IRBuildError(hip_available()[1])
    names = {arch: f"oclc_isa_version_{arch[len('gfx') :].split(':')[0]}.bc" for arch in archs}
    missing = {arch: name for arch, name in names.items() if not (bitcode / name).exists()}
    if not missing:
        return bitcode
    folder = cache_dir() / f"device-libs-{'-'.join(sorted(missing))}"
    folder.mkdir(parents=True, exist_ok=True)
    for lib in bitcode.glob("*.bc"):
        link = folder / lib.name
        if not link.exists():
            link.symlink_to(lib)
    for arch, name in missing.items():
        if (folder / name).exists():
            continue
        text = (
            f'target triple = "amdgcn-amd-amdhsa"\n@__oclc_ISA_version = linkonce_odr protected '
            f"local_unnamed_addr addrspace(4) constant i32 {isa_version(arch)}, align 4\n"
        )
        source = folder / f"{name}.ll"
        source.write_text(text)
        tmp = folder / f"{name}.tmp{os.getpid()}"
        subprocess.run(
            [
                CLANG,
                "-c",
                "-emit-llvm",
                "-nogpulib",
                "-x",
                "ir",
                "-target",
                "amdgcn-amd-amdhsa",
                "-o",
                str(tmp),
                str(source),
            ],
            check=True,
            capture_output=True,
        )
        os.replace(tmp, folder / name)
    return folder


def _hip_flags(arch: str) -> list[str]:
    bitcode = hip_device_lib_dir(arch)
    return [
        "-x",
        "hip",
        f"--offload-arch={arch}",
        "--offload-device-only",
        "--rocm-path=/usr",
        f"--rocm-device-lib-path={bitcode}",
        "-Wno-unused-command-line-argument",
    ]


def _build(
    source: Path, flags: list[str], opt: str, emit: str, out_dir: str | os.PathLike | None, extra: tuple[str, ...] = ()
) -> Path:
    if emit not in ("ll", "bc"):
        raise ValueError(f"emit must be 'll' or 'bc', not {emit!r}")
    if opt == RAW:
        opt_flags = ["-O3", "-Xclang", "-disable-llvm-optzns"]
    elif opt == "-O0":  # -O0 marks every function optnone, which would keep the optimizer off it
        opt_flags = ["-O0", "-Xclang", "-disable-O0-optnone"]
    else:
        opt_flags = [opt]
    command = [CLANG, *flags, *opt_flags, *extra, "-emit-llvm", "-S" if emit == "ll" else "-c", "-o"]
    key = hashlib.sha256()
    for part in (clang_version(), "\0".join(command), source.read_bytes()):
        key.update(part.encode() if isinstance(part, str) else part)
        key.update(b"\0")
    for stub in sorted(STUBS_DIR.glob("*.h")):
        key.update(stub.name.encode() + stub.read_bytes())
    cached = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.{emit}"
    if not cached.exists():
        fd, tmp = tempfile.mkstemp(dir=cached.parent, prefix=cached.name, suffix=".tmp")
        os.close(fd)
        try:
            proc = subprocess.run([*command, tmp, str(source)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise IRBuildError(f"{' '.join(command)} {source} failed:\n{proc.stderr}")
            os.replace(tmp, cached)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    if out_dir is None:
        return cached
    target = Path(out_dir) / f"{source.stem}.{emit}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, target)
    return target


def build_cuda_ir(
    name_or_path: str | os.PathLike,
    arch: str = "sm_90",
    out_dir=None,
    *,
    opt: str = RAW,
    emit: str = "ll",
    flags: tuple[str, ...] = (),
) -> Path:
    """Device-only NVPTX IR of a corpus source (name like "saxpy") or a .cu file; returns its path.

    `flags` are extra clang flags (e.g. ("-ftrivial-auto-var-init=pattern",)).
    """
    return _build(_resolve(name_or_path, "cuda"), _cuda_flags(arch), opt, emit, out_dir, tuple(flags))


def build_hip_ir(
    name_or_path: str | os.PathLike,
    arch: str = "gfx90a",
    out_dir=None,
    *,
    opt: str = RAW,
    emit: str = "ll",
    flags: tuple[str, ...] = (),
) -> Path:
    """Device-only AMDGPU IR of a corpus source (name like "saxpy") or a .hip file; returns its path."""
    return _build(_resolve(name_or_path, "hip"), _hip_flags(arch), opt, emit, out_dir, tuple(flags))


def build_ir(name_or_path: str | os.PathLike, lang: str = "cuda", **kwargs) -> Path:
    """`build_cuda_ir` or `build_hip_ir` by language."""
    return (build_cuda_ir if lang == "cuda" else build_hip_ir)(name_or_path, **kwargs)
