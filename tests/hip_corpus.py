"""A corpus of third-party HIP kernels, fetched from PyPI when a test or benchmark runs.

llama.cpp's GPU back end as vendored in ``llama-cpp-python`` 0.2.56 (MIT): one translation unit,
``ggml-cuda.cu``, which builds as HIP with ``-DGGML_USE_HIPBLAS``. It is the last release of that
shape whose sources build against the ROCm headers this machine's packages provide (Debian's ROCm
5.2); later ones need ROCm 6 headers (``hip/hip_bf16.h``, newer warp-shuffle overloads). Nothing of it
is committed: the sdist is downloaded once, checked against its pinned sha256 and unpacked under the
corpus cache (`kernel_corpus.cache_root`).

The unit is built as a user's build would: ``mneme-cc clang++ -x hip --offload-arch=...`` for gfx90a,
gfx942 and gfx1100, with ``HIPBLAS_HEADER`` and ``ROCBLAS_HEADER`` standing in for the host-only
hipBLAS/rocBLAS declarations it includes (no kernel uses them), and the ROCm device libraries of
`irbuild.hip_device_lib_dir` (Debian's lack the gfx942 and gfx1100 ISA-version library). The object,
with its embedded IR, is cached by a key of the sdist, the flags and mneme-cc's sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs
import numpy as np

import kernel_corpus as kc
from irbuild import CLANG, hip_available, hip_device_lib_dir

LLAMA_HIP = kc.Sdist(
    "llama-cpp-python",
    "0.2.56",
    "https://files.pythonhosted.org/packages/ca/e7/a96c0405c73e9b86fde675c30456d231e4a6bc46a69642587318856bf2d4/"
    "llama_cpp_python-0.2.56.tar.gz",
    "9c82db80e929ae93c2ab069a76a8a52aac82479cf9d0523c3550af48554cc785",
    "MIT",
    ("LICENSE.md", "vendor/llama.cpp/LICENSE", "vendor/llama.cpp/ggml"),
)
ARCHS = ("gfx90a", "gfx942", "gfx1100")
# What llama.cpp 0.2.56's CMake build passes for LLAMA_HIPBLAS (its default DMMV/MMV/K-quant settings).
FLAGS = (
    "-DGGML_USE_HIPBLAS",
    "-DGGML_USE_CUBLAS",
    "-DGGML_CUDA_DMMV_X=32",
    "-DGGML_CUDA_MMV_Y=1",
    "-DK_QUANTS_PER_ITERATION=2",
    "-DNDEBUG",
    "-O3",
    "-std=c++17",
)
CLANGXX = os.environ.get("MNEME_CLANGXX", CLANG.replace("clang", "clang++", 1))

HIPBLAS_HEADER = """#pragma once
/* Declarations only, for building llama.cpp's HIP kernels where hipBLAS is not installed: the
   host-side hipBLAS names ggml-cuda.cu mentions. No kernel uses them; nothing here is linked or run. */
#include <hip/hip_runtime.h>
typedef struct hipblasContext *hipblasHandle_t;
typedef enum { HIPBLAS_STATUS_SUCCESS = 0, HIPBLAS_STATUS_NOT_INITIALIZED = 1, HIPBLAS_STATUS_ALLOC_FAILED = 2,
  HIPBLAS_STATUS_INVALID_VALUE = 3, HIPBLAS_STATUS_MAPPING_ERROR = 4, HIPBLAS_STATUS_EXECUTION_FAILED = 5,
  HIPBLAS_STATUS_INTERNAL_ERROR = 6, HIPBLAS_STATUS_NOT_SUPPORTED = 7, HIPBLAS_STATUS_ARCH_MISMATCH = 8
} hipblasStatus_t;
typedef enum { HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112, HIPBLAS_OP_C = 113 } hipblasOperation_t;
typedef enum { HIPBLAS_R_16F = 150, HIPBLAS_R_32F = 151, HIPBLAS_R_64F = 152 } hipblasDatatype_t;
typedef hipblasDatatype_t hipblasComputeType_t;
typedef enum { HIPBLAS_GEMM_DEFAULT = 160 } hipblasGemmAlgo_t;
extern "C" {
hipblasStatus_t hipblasCreate(hipblasHandle_t *handle);
hipblasStatus_t hipblasSetStream(hipblasHandle_t handle, hipStream_t stream);
hipblasStatus_t hipblasSgemm(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb, int m, int n,
    int k, const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc);
hipblasStatus_t hipblasGemmEx(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, hipblasDatatype_t a_type, int lda, const void *B, hipblasDatatype_t b_type,
    int ldb, const void *beta, void *C, hipblasDatatype_t c_type, int ldc, hipblasDatatype_t compute_type,
    hipblasGemmAlgo_t algo);
hipblasStatus_t hipblasGemmBatchedEx(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A[], hipblasDatatype_t a_type, int lda, const void *B[],
    hipblasDatatype_t b_type, int ldb, const void *beta, void *C[], hipblasDatatype_t c_type, int ldc, int batch_count,
    hipblasDatatype_t compute_type, hipblasGemmAlgo_t algo);
hipblasStatus_t hipblasGemmStridedBatchedEx(hipblasHandle_t handle, hipblasOperation_t transa,
    hipblasOperation_t transb, int m, int n, int k, const void *alpha, const void *A, hipblasDatatype_t a_type, int lda,
    long long stride_a, const void *B, hipblasDatatype_t b_type, int ldb, long long stride_b, const void *beta, void *C,
    hipblasDatatype_t c_type, int ldc, long long stride_c, int batch_count, hipblasDatatype_t compute_type,
    hipblasGemmAlgo_t algo);
}
"""
ROCBLAS_HEADER = """#pragma once
/* Declarations only: the rocBLAS name ggml-cuda.cu calls on the host. Nothing here is linked or run. */
extern "C" void rocblas_initialize(void);
"""


def available() -> tuple[bool, str]:
    """Whether the HIP corpus can be built here, and why not."""
    ok, why = hip_available()
    if not ok:
        return ok, why
    if shutil.which(CLANGXX) is None:
        return False, f"needs {CLANGXX}: apt-get install clang-19"
    return True, ""


@attrs.frozen
class Built:
    """What building ggml-cuda.cu with `mneme-cc clang++ -x hip -c` gave."""

    ok: bool
    obj: Path | None
    messages: str
    seconds: float
    command: tuple[str, ...]

    def entries(self):
        from mneme.instrument.section import read_entries

        return read_entries(str(self.obj)) if self.obj is not None else []


def source(root: Path) -> Path:
    return root / "vendor/llama.cpp/ggml-cuda.cu"


def _standins(root: Path) -> Path:
    folder = root / "mneme-hip-standins"
    for name, text in (("hipblas/hipblas.h", HIPBLAS_HEADER), ("rocblas/rocblas.h", ROCBLAS_HEADER)):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return folder


def command(root: Path, out: Path, archs: tuple[str, ...] = ARCHS) -> list[str]:
    """The `mneme-cc clang++ -x hip -c` command line that builds the unit into `out`."""
    libs = hip_device_lib_dir(*archs)
    return [
        sys.executable,
        "-m",
        "mneme.instrument.launcher",
        CLANGXX,
        "-x",
        "hip",
        *(f"--offload-arch={a}" for a in archs),
        "--rocm-path=/usr",
        f"--rocm-device-lib-path={libs}",
        *FLAGS,
        "-Wno-unused-command-line-argument",
        "-I",
        str(source(root).parent),
        "-I",
        str(_standins(root)),
        "-c",
        str(source(root)),
        "-o",
        str(out),
    ]


def build(root: Path, archs: tuple[str, ...] = ARCHS) -> Built:
    """Build the unit (cached by the sdist, the flags and mneme-cc's sources)."""
    key = hashlib.sha256(
        json.dumps([LLAMA_HIP.sha256, FLAGS, archs, HIPBLAS_HEADER, ROCBLAS_HEADER, CLANGXX, kc._tool_key()]).encode()
    ).hexdigest()[:24]
    folder = kc.cache_root() / "build" / f"llama-hip-{key}"
    done = folder / "result.json"
    if done.exists():
        meta = json.loads(done.read_text())
        obj = folder / "unit.o"
        return Built(
            meta["ok"], obj if obj.exists() else None, meta["messages"], meta["seconds"], tuple(meta["command"])
        )
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = command(root, tmp / "unit.o", archs)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=source(root).parent)
    seconds = time.perf_counter() - start
    ok = proc.returncode == 0 and (tmp / "unit.o").exists()
    cmd = [c.replace(str(tmp), str(folder)) for c in cmd]
    (tmp / "result.json").write_text(
        json.dumps({"ok": ok, "messages": proc.stderr, "seconds": seconds, "command": cmd})
    )
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return Built(ok, folder / "unit.o" if ok else None, proc.stderr, seconds, tuple(cmd))


def code_object_kernels(obj: Path) -> dict[str, set[str]]:
    """{arch: kernel names} of the code objects clang's own build put in the object's offload bundle."""
    from mneme_hip.bundle import code_objects
    from mneme_hip.metadata import amdgpu_metadata

    from mneme.core.elf import ElfFile

    elf = ElfFile.read(obj)
    found: dict[str, set[str]] = {}
    for section in elf.sections_named(".hip_fatbin"):
        for target, code in code_objects(elf.section_data(section), str(obj)).items():
            arch = target.rpartition("--")[2].split(":")[0]
            found.setdefault(arch, set()).update(k[".name"] for k in amdgpu_metadata(code).get("amdhsa.kernels", []))
    return found


def code_objects_through_hip(entry, arch: str, kernels=None) -> list[str]:
    """Build each kernel of an embedded IR entry (or only `kernels`) into a code object for `arch`
    with the hip backend (no cache); returns ``kernel: error`` for each that fails."""
    import tempfile

    from mneme.core import build, ir
    from mneme.core.types import ExperimentConfiguration

    config = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))
    failed = []
    with tempfile.TemporaryDirectory(prefix="mneme-hip-corpus-") as scratch:
        bitcode = Path(scratch, f"{arch}.bc")
        bitcode.write_bytes(entry.bitcode)
        for kernel in kernels or entry.kernels:
            try:
                module = ir.link([bitcode], kernel)
                try:
                    binary = build.compile(module, kernel, config, arch, cache=False)
                finally:
                    module.close()
                if binary.kind != "hsaco" or not binary.data.startswith(b"\x7fELF"):
                    failed.append(f"{kernel}: no code object ({binary.kind})")
            except Exception as exc:  # noqa: BLE001 - each failure is named, the run goes on
                failed.append(f"{kernel}: {type(exc).__name__}: {str(exc)[:200]}")
    return failed


# -- the same release built for CUDA, for the CUDA/HIP cross-check -------------------------------------

# The cuBLAS names 0.2.56's ggml-cuda.cu mentions beyond those of kernel_corpus.CUBLAS_HEADER (newer ggml).
CUBLAS_EXTRA = """
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
extern "C" {
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType_t a_type, int lda, const void *B, cudaDataType_t b_type,
    int ldb, const void *beta, void *C, cudaDataType_t c_type, int ldc, cublasComputeType_t compute_type,
    cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
    int n, int k, const void *alpha, const void *const A[], cudaDataType_t a_type, int lda, const void *const B[],
    cudaDataType_t b_type, int ldb, const void *beta, void *const C[], cudaDataType_t c_type, int ldc, int batch_count,
    cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType_t a_type, int lda, long long stride_a,
    const void *B, cudaDataType_t b_type, int ldb, long long stride_b, const void *beta, void *C,
    cudaDataType_t c_type, int ldc, long long stride_c, int batch_count, cublasComputeType_t compute_type,
    cublasGemmAlgo_t algo);
}
#define cublasSgemm cublasSgemm_v2
"""
CUDA_ARCH = "sm_90"


def build_cuda_ir(root: Path) -> Path:
    """The same unit's device IR for CUDA (`clang++ -x cuda`, sm_90, what mneme-cc embeds for an nvcc
    build), with cuBLAS stand-ins; cached next to the HIP build. Raises CorpusUnavailable."""
    from irbuild import IRBuildError, _cuda_flags, cuda_available

    ok, why = cuda_available()
    if not ok:
        raise kc.CorpusUnavailable(why)
    folder = root / "mneme-cuda-standins"
    folder.mkdir(exist_ok=True)
    header = kc.CUBLAS_HEADER + CUBLAS_EXTRA
    if not (folder / "cublas_v2.h").exists() or (folder / "cublas_v2.h").read_text() != header:
        (folder / "cublas_v2.h").write_text(header)
    flags = [f for f in FLAGS if f != "-DGGML_USE_HIPBLAS"]
    cmd = [
        CLANGXX,
        *_cuda_flags(CUDA_ARCH),
        *flags,
        "-I",
        str(source(root).parent),
        "-I",
        str(folder),
        "-emit-llvm",
        "-c",
    ]
    key = hashlib.sha256(json.dumps([LLAMA_HIP.sha256, cmd, header]).encode()).hexdigest()[:24]
    out = kc.cache_root() / "build" / f"llama-cuda-{key}.bc"
    if not out.exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([*cmd, "-o", str(tmp), str(source(root))], capture_output=True, text=True)
        if proc.returncode != 0:
            raise IRBuildError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        os.replace(tmp, out)
    return out


@attrs.frozen
class Agreement:
    """One kernel captured from both builds with the same inputs and run on the host backend."""

    kernel: str
    status: str  # "identical", "differs", "not captured"
    detail: str = ""
    ulps: int = 0  # the largest difference in units of the last place, where it differs


_SCALARS = {"int": np.int32, "float": np.float32, "unsigned int": np.uint32}
BUFFER = 1 << 16  # floats per pointer argument: every index the small sizes below reach
SIZE = 32  # every int argument: a row length, a row count, an element count
GRID, BLOCK = (16, 1, 1), (64, 1, 1)
SHARED = 16384  # dynamic shared memory bytes every launch gets (soft_max's rows live there)
# Kernels that call the vendors' math libraries (libdevice for CUDA, ocml for HIP: expf, tanhf, sinf,
# cosf...), whose last bits may differ; every other kernel must agree bit for bit.
VENDOR_MATH = ("soft_max_f32", "gelu_f32", "silu_f32", "tanh_f32", "timestep_embedding_f32")
MATH_ULPS = 4


def block_of(demangled: str) -> tuple[int, int, int]:
    """The block a kernel is launched with: ggml's templated kernels take their block size as their
    last integer template argument (`norm_f32<1024>`, `soft_max_f32<true, 2048, 1024>`); 64 otherwise."""
    head = demangled[: demangled.find("(")]
    if "<" in head:
        last = head[head.rfind("<") + 1 : head.rfind(">")].split(",")[-1].strip()
        if last.isdigit() and 32 <= int(last) <= 1024:
            return (int(last), 1, 1)
    return BLOCK


def parameters(demangled: str) -> list[str]:
    """A demangled kernel's parameter types: its last parenthesized group, split at its own commas (a template
    argument may hold a function type: ``mul_mat_vec_q<..., &(vec_dot_q4_0_q8_1(void const*, ...))>(...)``)."""
    end = demangled.rfind(")")
    depth, start = 0, -1
    for at in range(end, -1, -1):
        depth += {")": 1, "(": -1}.get(demangled[at], 0)
        if depth == 0:
            start = at
            break
    params, depth, part = [], 0, ""
    for ch in demangled[start + 1 : end]:
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            params.append(part.strip())
            part = ""
        else:
            part += ch
    return params + [part.strip()] if part.strip() else params


_FLOATS = ("float const*", "float*", "int", "float", "unsigned int")
# quantized blocks and half buffers: bytes whose every reading as half or float is finite (below)
_BYTES = ("void const*", "void*", "__half const*", "__half*")


def capturable(demangled: str, quantized: bool = False) -> list[str] | None:
    """The parameter types of a kernel whose every parameter is a float pointer or an int/float scalar; with
    `quantized`, of one that also takes quantized blocks or halves (`void`/`__half` pointers), and only those."""
    params = parameters(demangled)
    if not params or not all(p in _FLOATS + (_BYTES if quantized else ()) for p in params):
        return None
    return params if not quantized or any(p in _BYTES for p in params) else None


QUANTIZED_SIZE = 256  # every int argument of a kernel on quantized blocks: a row of one 256-value super-block
SAFE_BYTE = 0x3B  # bytes up to this: any two read as a half, or four as a float, are finite (exponent below 15)


def _args(params: list[str], seed: int) -> list:
    rng = np.random.default_rng(seed)
    quantized = any(p in _BYTES for p in params)
    args = []
    for p in params:
        if p in _BYTES:
            args.append(rng.integers(0, SAFE_BYTE + 1, BUFFER * 4, dtype=np.uint8))
        elif p.endswith("*"):
            args.append(rng.uniform(-2, 2, BUFFER).astype(np.float32))
        elif p == "float":
            args.append(np.float32(0.5))
        else:
            args.append(_SCALARS[p](QUANTIZED_SIZE if quantized else SIZE))
    return args


def _capture_pair(
    cuda_ir: Path, hip_ir: Path, kernel: str, params: list[str], block, seed: int, out: Path, launches=None
) -> Agreement:
    """`launches`: {"cuda": (grid, block), "hip": (grid, block)} where the builds launch the kernel differently
    (`mmq_launches`); else both get GRID and `block`."""
    from mneme import capture

    results = []
    for label, path in (("cuda", cuda_ir), ("hip", hip_ir)):
        outputs: dict = {}
        grid, shape = launches[label] if launches else (GRID, block)
        try:
            capture.capture(
                path,
                kernel,
                grid,
                shape,
                _args(params, seed),
                out / label,
                backend="host",
                outputs=outputs,
                shared_mem=SHARED,
            )
            results.append(outputs)
        except Exception as exc:  # noqa: BLE001 - named in the table, the run goes on
            results.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0][:140]}")
    if any(isinstance(r, str) for r in results):
        return Agreement(kernel, "not captured", "; ".join(r for r in results if isinstance(r, str)))
    cuda, hip = results
    differing = [i for i in cuda if cuda[i].tobytes() != hip[i].tobytes()]
    if not differing:
        return Agreement(kernel, "identical")
    # a byte buffer written as halves (a dequantized row in f16) compares as halves
    worst = ulps = 0
    for i in differing:
        # a byte buffer written as halves (a dequantized row in f16) compares as halves
        floats, ints = (np.float16, np.int16) if params[i] in _BYTES else (np.float32, np.int32)
        apart = cuda[i].view(floats).astype(np.float64) - hip[i].view(floats).astype(np.float64)
        worst = max(worst, float(np.nanmax(np.abs(apart))))
        ulps = max(ulps, int(np.max(np.abs(cuda[i].view(ints).astype(np.int64) - hip[i].view(ints).astype(np.int64)))))
    return Agreement(kernel, "differs", f"arguments {differing}: max abs diff {worst:.3g}, {ulps} ulp", ulps)


def mmq_launches(source: str, demangled: str, rows: int, cols: int) -> dict[str, tuple[tuple, tuple]] | None:
    """{"cuda": (grid, block), "hip": (grid, block)} for a tiled quantized matrix product (`mul_mat_q4_0<b>`) as
    ggml launches it on each build: each build's kernel has its own tile sizes compiled in (the source's
    ``MMQ_X/MMQ_Y/NWARPS_<type>_<arch>`` macros: AMPERE with tensor cores, which ggml defines unless told to force
    MMQ, for sm_90; RDNA1 for gfx90a), a block of (32, nwarps) and a grid of (rows / mmq_y, cols / mmq_x) tiles;
    None for another kernel or a source without them. `source`: the unit's text."""
    name = re.match(r"void mul_mat_(q\d_[0-9K])<(?:true|false)>\(", demangled)
    if not name:
        return None
    kind = name.group(1).upper()
    found = {}
    for side, arch in (("cuda", "AMPERE"), ("hip", "RDNA1")):
        values = []
        for macro in ("MMQ_X", "MMQ_Y", "NWARPS"):
            # the first definition: for AMPERE the one under CUDA_USE_TENSOR_CORES
            m = re.search(rf"(?m)^#define\s+{macro}_{kind}_{arch}\s+(\d+)", source)
            if not m:
                return None
            values.append(int(m.group(1)))
        mmq_x, mmq_y, nwarps = values
        found[side] = ((-(-rows // mmq_y), -(-cols // mmq_x), 1), (32, nwarps, 1))
    return found


def quantized_launches(source: str, demangled: str) -> dict[str, tuple[tuple, tuple]] | None:
    """{"cuda": (grid, block), "hip": (grid, block)} for a kernel of `quantized_sample`, as ggml's launchers
    (``*_cuda``) shape it where the kernel's result depends on the shape (gfx90a takes the paths for AMD before
    RDNA2, the same as NVIDIA's): the tiled products their own tiles (`mmq_launches`), the matrix-vector products for
    one column (32, 4) threads (the four warps meet in shared memory), the dequantizing matrix-vector products
    (32, 1) (``GGML_CUDA_MMV_Y=1``, ``K_QUANTS_PER_ITERATION=2``); a block dequantization, whose threads each
    write their own values, the cross-check's block. None for another kernel."""
    if demangled.startswith("void mul_mat_q"):
        return mmq_launches(source, demangled, QUANTIZED_SIZE, QUANTIZED_SIZE)
    if demangled.startswith("void mul_mat_vec_q<1,"):
        shape = (32, 4, 1)
    elif "dequantize_mul_mat_vec" in demangled.split("(")[0]:
        shape = (32, 1, 1)
    elif "dequantize_block" in demangled.split("(")[0]:
        shape = BLOCK
    else:
        return None
    return {"cuda": (GRID, shape), "hip": (GRID, shape)}


def quantized_sample(demangled: str) -> bool:
    """The kernels on quantized blocks a cross-check takes: every tiled matrix product (`mul_mat_q*`, dp4a on
    CUDA, sdot4 on HIP), every block dequantization, and the matrix-vector products for one column of y."""
    name = re.match(r"(?:\w+ )?(\w+)", demangled).group(1)  # past a return type, up to `<` or `(`
    if name == "mul_mat_vec_q":
        return demangled.startswith("void mul_mat_vec_q<1,")
    return name.startswith(("mul_mat_q", "dequantize_block", "dequantize_mul_mat_vec"))


_CONTRACT = re.compile(
    r"\b(fmul|fsub|fadd|fneg|fdiv|frem|call)((?: (?:fast|nnan|ninf|nsz|arcp|afn|reassoc))*) contract\b"
)


_FAST = re.compile(r"\b(fmul|fsub|fadd|fneg|fdiv|frem|call) fast\b")


def without_contraction(path: Path, out: Path) -> Path:
    """The module at `path` with every floating-point operation's ``contract`` flag removed, as bitcode at `out`: each
    multiply and add rounded on its own, as the source writes them. Both builds mark their operations contractible
    (``-ffp-contract=fast``), and which product of ``a * b - c * d`` the code generator fuses depends on the shape
    of the code around it, which differs between the builds (their tile sizes): results the source does not fix."""
    import llvmlite.binding as llvm

    text = str(llvm.parse_bitcode(path.read_bytes()))
    text = _FAST.sub(r"\1 nnan ninf nsz arcp afn reassoc", text)  # `fast` holds `contract` too
    text = _CONTRACT.sub(r"\1\2", text)
    out.write_bytes(llvm.parse_assembly(text).as_bitcode())
    return out


def cross_check(
    cuda_ir: Path,
    hip_ir: Path,
    out: Path,
    limit: int | None = None,
    every: int = 1,
    quantized: bool = False,
    source: Path | None = None,
    strict: bool = False,
) -> list[Agreement]:
    """Capture every automatically capturable kernel both builds share on the host backend with the
    same inputs and compare every buffer afterwards, bit for bit. The captures run in a worker
    process, started again when one dies (a crash is a finding of its own, not the end of the run).
    `every`: take every n-th capturable kernel (a spread of the corpus, for CI). `quantized`: instead of the
    kernels on floats, those on quantized blocks and halves in `quantized_sample` (ints `QUANTIZED_SIZE`, byte
    buffers uniform in [0, `SAFE_BYTE`]); `source`: the unit's source, which gives the tiled matrix products'
    launches (`mmq_launches`: without it they are left out); `strict`: both builds without floating-point
    contraction (`without_contraction`)."""
    import concurrent.futures
    import multiprocessing

    from mneme.core import ir
    from mneme.core.demangle import demangle_all

    if strict:
        out.mkdir(parents=True, exist_ok=True)
        cuda_ir = without_contraction(cuda_ir, out / "cuda-strict.bc")
        hip_ir = without_contraction(hip_ir, out / "hip-strict.bc")
    names = {}
    for path in (cuda_ir, hip_ir):
        module = ir.load(path)
        names[path] = set(ir.kernels(module))
        module.close()
    shared = sorted(names[cuda_ir] & names[hip_ir])
    text = source.read_text(errors="replace") if source else ""
    chosen = []
    for k, d in zip(shared, demangle_all(shared)):
        if not (p := capturable(d, quantized)) or (quantized and not quantized_sample(d)):
            continue
        launches = quantized_launches(text, d) if quantized and text else None
        if quantized and launches is None:
            continue  # a kernel whose launch the builds choose for themselves: the same launch compares nothing
        chosen.append((k, p, block_of(d), launches))
    chosen = chosen[::every][:limit]
    found = []
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
    try:
        for n, (kernel, params, block, launches) in enumerate(chosen):
            try:
                job = pool.submit(_capture_pair, cuda_ir, hip_ir, kernel, params, block, n, out / str(n), launches)
                found.append(job.result())
            except concurrent.futures.process.BrokenProcessPool:
                found.append(
                    Agreement(kernel, "not captured", "the capturing process died (a signal in the host runtime)")
                )
                pool.shutdown(cancel_futures=True)
                pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
    finally:
        pool.shutdown(cancel_futures=True)
    return found


def host_verdicts(built: Built) -> dict[str, list]:
    """{arch: `mneme ir check --backend host` verdicts} of every kernel of the built object."""
    from mneme.plugins.check_commands import check

    verdicts = check((str(built.obj),), None, None, "host")
    found, start = {}, 0
    for entry in built.entries():  # check walks the entries in this order, every kernel of each
        found[entry.arch] = verdicts[start : start + len(entry.kernels)]
        start += len(entry.kernels)
    return found
