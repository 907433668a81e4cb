"""A corpus of third-party CUDA kernels, fetched from PyPI when a test or benchmark runs.

Nothing of it is committed: each project's source distribution is downloaded once, checked
against its pinned sha256 and unpacked under ``~/.cache/mneme/corpus/<name>-<version>-<sha>``
(``MNEME_CORPUS_CACHE`` moves it). Each translation unit is built with ``mneme-cc nvcc -c`` as
a user's build would run it, and the object (with its embedded IR), nvcc's status and
mneme-cc's messages are cached by a key of the sdist, the unit, the flags and mneme-cc's own
sources, so a second run builds nothing.

Projects (both MIT licensed):

* llama.cpp's CUDA back end (ggml-cuda), vendored in ``llama-cpp-python``'s sdist: 49 of its 69
  top-level units (`GGML_UNITS`: element-wise, normalisation, reduction, copy, convolution, rope,
  softmax...). Left out: the units whose nvcc compile takes 20 s to minutes on two cores (argsort,
  mmvf, mmvq, cumsum and the matrix-multiply and flash-attention template instances), the host glue
  (ggml-cuda.cu), and the units that call cuBLAS routines, because CI machines carry no cuBLAS
  headers (`CUBLAS_HEADER` declares the few host-side cuBLAS names ggml's common header mentions;
  no kernel uses them). CI builds `GGML_CI_UNITS`, a subset with over 200 kernels.
* PyCUDA's examples and tests: every ``SourceModule("...")`` string literal, written as the unit
  PyCUDA itself hands nvcc (wrapped in ``extern "C" { }`` unless ``no_extern_c=True``).

Architecture: sm_90, what a user recording these programs on an H100/H200 gets: nvcc and clang
take each program's sm_90 code paths (tensor-core paths are in the units left out).
"""

from __future__ import annotations

import ast
import concurrent.futures
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import attrs

ARCH = "sm_90"
NVCC = os.environ.get("MNEME_CORPUS_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


class CorpusUnavailable(Exception):
    """The corpus cannot be had here (offline, no nvcc); the message says why, for a skip."""


@attrs.frozen
class Sdist:
    name: str
    version: str
    url: str
    sha256: str
    licence: str
    members: tuple[str, ...]  # path prefixes (after the top folder) to unpack

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}-{self.sha256[:16]}"


LLAMA = Sdist(
    "llama-cpp-python",
    "0.3.36",
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
    "llama_cpp_python-0.3.36.tar.gz",
    "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "MIT",
    ("LICENSE.md", "vendor/llama.cpp/LICENSE", "vendor/llama.cpp/ggml/include/", "vendor/llama.cpp/ggml/src/"),
)
PYCUDA = Sdist(
    "pycuda",
    "2026.1",
    "https://files.pythonhosted.org/packages/75/93/36ffd54430924dcb03a88c97519d56589e573d0dcc999c77a4c4d8a90306/"
    "pycuda-2026.1.tar.gz",
    "759516160628ba06f32ce7e563e3f5b9214691dc9528a03ea99ea1073f4e14ba",
    "MIT",
    ("LICENSE", "examples/", "test/", "pycuda/cuda/"),
)
PROJECTS = (LLAMA, PYCUDA)

# The ggml-cuda units built (see the module docstring for what is left out and why).
GGML_UNITS = (
    "acc",
    "add-id",
    "arange",
    "argmax",
    "binbcast",
    "clamp",
    "col2im-1d",
    "concat",
    "conv-transpose-1d",
    "conv2d-dw",
    "conv2d-transpose",
    "convert",
    "count-equal",
    "cpy",
    "cross-entropy-loss",
    "diag",
    "diagmask",
    "dsv4-hc",
    "fill",
    "fwht",
    "getrows",
    "gla",
    "im2col",
    "mean",
    "moe-weighted-reduction",
    "norm",
    "opt-step-adamw",
    "opt-step-sgd",
    "pad",
    "pad_reflect_1d",
    "pool1d",
    "pool2d",
    "quantize",
    "roll",
    "rope",
    "scale",
    "set",
    "set-rows",
    "snake",
    "softcap",
    "softmax",
    "ssm-conv",
    "sum",
    "sumrows",
    "tri",
    "tsembd",
    "unary",
    "upscale",
    "wkv",
)
# The units CI builds (tests/test_kernel_corpus.py; MNEME_CORPUS_FULL=1 builds them all): the most kernels per
# second of compile, and the ones the tests give NumPy references.
GGML_CI_UNITS = (
    "arange",
    "clamp",
    "scale",
    "softcap",
    "getrows",
    "concat",
    "norm",
    "quantize",
    "fwht",
    "im2col",
    "conv2d-dw",
    "gla",
    "dsv4-hc",
    "fill",
    "cross-entropy-loss",
    "softmax",
)
GGML_FLAGS = ("-std=c++17", "-use_fast_math", "-extended-lambda", "-DNDEBUG", "-O3")

CUBLAS_HEADER = """#pragma once
/* Declarations only, for building ggml-cuda's kernels where cuBLAS is not installed: the host-side
   cuBLAS names its common.cuh mentions. No kernel uses them; nothing here is linked or run. */
#include <cuda_runtime.h>
#include <library_types.h>
#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 0
typedef struct cublasContext *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
extern "C" {
const char *cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t size);
}
#define cublasCreate cublasCreate_v2
#define cublasSetStream cublasSetStream_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
"""


def cache_root() -> Path:
    return Path(os.environ.get("MNEME_CORPUS_CACHE") or Path.home() / ".cache" / "mneme" / "corpus")


def fetch(sdist: Sdist, timeout: float = 120) -> Path:
    """The unpacked source distribution (downloaded and checked once); raises CorpusUnavailable."""
    root = cache_root() / sdist.folder
    if (root / ".complete").exists():
        return root
    try:
        with urllib.request.urlopen(sdist.url, timeout=timeout) as response:
            data = response.read()
    except OSError as exc:
        raise CorpusUnavailable(f"cannot download {sdist.name} {sdist.version} from PyPI ({exc})") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != sdist.sha256:
        raise CorpusUnavailable(f"{sdist.url} has sha256 {digest}, not the pinned {sdist.sha256}")
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        top = f"{sdist.name.replace('-', '_')}-{sdist.version}/"
        chosen = []
        for member in tar.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and any(name.startswith(p) for p in sdist.members):
                member.name = name
                chosen.append(member)
        if not chosen:
            raise CorpusUnavailable(f"{sdist.url}: none of {sdist.members} inside (top folder {top!r})")
        tar.extractall(tmp, members=chosen, filter="data")
    (tmp / ".complete").write_text(sdist.sha256 + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


@attrs.frozen
class Unit:
    """One translation unit of the corpus: its source and the nvcc flags its project builds it with."""

    project: str
    name: str
    source: Path
    flags: tuple[str, ...]


def ggml_units(root: Path, names: tuple[str, ...] = GGML_UNITS) -> list[Unit]:
    cuda = root / "vendor/llama.cpp/ggml/src/ggml-cuda"
    standin = root / "mneme-standins"
    standin.mkdir(exist_ok=True)
    (standin / "cublas_v2.h").write_text(CUBLAS_HEADER)
    includes = (
        "-I",
        str(root / "vendor/llama.cpp/ggml/include"),
        "-I",
        str(cuda.parent),
        "-I",
        str(cuda),
        "-I",
        str(standin),
    )
    return [Unit("llama.cpp", name, cuda / f"{name}.cu", (*GGML_FLAGS, *includes)) for name in names]


def pycuda_sources(root: Path) -> list[tuple[str, str]]:
    """(name, CUDA source) of every SourceModule string literal in PyCUDA's examples and tests."""
    found = []
    files = sorted([*root.glob("examples/**/*.py"), *root.glob("test/*.py")])
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            fn = node.func
            if (fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")) != "SourceModule":
                continue
            code = node.args[0]
            if not (isinstance(code, ast.Constant) and isinstance(code.value, str)):
                continue  # built at run time (templates, string formatting)
            extern_c = not any(
                k.arg == "no_extern_c" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords
            )
            text = code.value
            if extern_c:  # what pycuda.compiler.SourceModule hands nvcc
                text = 'extern "C" {\n' + text + "\n}\n"
            stem = str(path.relative_to(root).with_suffix("")).replace("/", "_").replace("+", "p")
            found.append((f"{stem}_{node.lineno}", text))
    return found


def pycuda_units(root: Path) -> list[Unit]:
    folder = root / "mneme-units"
    folder.mkdir(exist_ok=True)
    units = []
    for name, text in pycuda_sources(root):
        source = folder / f"{name}.cu"
        if not source.exists() or source.read_text() != text:
            source.write_text(text)
        units.append(Unit("pycuda", name, source, ("-I", str(root / "pycuda/cuda"))))
    return units


def units(projects=PROJECTS, ggml: tuple[str, ...] = GGML_UNITS) -> list[Unit]:
    """The corpus' translation units (fetching what is missing); `ggml` chooses llama.cpp's."""
    found = []
    for sdist in projects:
        root = fetch(sdist)
        found += ggml_units(root, ggml) if sdist is LLAMA else pycuda_units(root)
    return found


@attrs.frozen
class Built:
    """What building one unit with `mneme-cc nvcc -c` gave."""

    unit: Unit
    nvcc_ok: bool
    obj: Path | None
    messages: str  # nvcc's and mneme-cc's stderr
    seconds: float

    @property
    def ir_embedded(self) -> bool:
        from mneme.instrument.section import read_entries

        return self.obj is not None and bool(read_entries(str(self.obj)))

    def entries(self):
        from mneme.instrument.section import read_entries

        return read_entries(str(self.obj)) if self.obj is not None else []


def _tool_key() -> str:
    """A digest of mneme-cc's own sources: a change to the launcher rebuilds the corpus."""
    import mneme.instrument

    digest = hashlib.sha256()
    for path in sorted(Path(mneme.instrument.__file__).parent.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".h", ".cuh"):
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def nvcc_version() -> str:
    try:
        out = subprocess.run([NVCC, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CorpusUnavailable(f"no working nvcc ({NVCC}): {exc}") from exc
    return out.strip().splitlines()[-1]


def build_one(unit: Unit, arch: str = ARCH, tool_key: str | None = None, nvcc_id: str = "") -> Built:
    import time

    key = hashlib.sha256(
        json.dumps(
            [
                unit.source.read_text(errors="replace"),
                str(unit.source),
                unit.flags,
                arch,
                tool_key or _tool_key(),
                nvcc_id,
            ]
        ).encode()
    ).hexdigest()[:24]
    folder = cache_root() / "build" / f"{unit.project}-{unit.name}-{key}"
    done = folder / "result.json"
    if done.exists():
        meta = json.loads(done.read_text())
        obj = folder / "unit.o"
        return Built(unit, meta["nvcc_ok"], obj if obj.exists() else None, meta["messages"], meta["seconds"])
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    obj = tmp / "unit.o"
    cmd = [
        sys.executable,
        "-m",
        "mneme.instrument.launcher",
        NVCC,
        f"-arch={arch}",
        *unit.flags,
        "-c",
        str(unit.source),
        "-o",
        str(obj),
    ]
    start = time.perf_counter()
    done_proc = subprocess.run(cmd, capture_output=True, text=True, cwd=unit.source.parent)
    seconds = time.perf_counter() - start
    ok = done_proc.returncode == 0 and obj.exists()
    if not ok and obj.exists():
        obj.unlink()
    (tmp / "result.json").write_text(
        json.dumps({"nvcc_ok": ok, "messages": done_proc.stderr, "seconds": seconds, "command": cmd})
    )
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return Built(unit, ok, folder / "unit.o" if ok else None, done_proc.stderr, seconds)


def build(all_units: list[Unit], arch: str = ARCH, jobs: int | None = None) -> list[Built]:
    """Build every unit (cached), in parallel; one Built per unit, in order."""
    nvcc_id = nvcc_version()
    key = _tool_key()
    jobs = jobs or max(1, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda u: build_one(u, arch, key, nvcc_id), all_units))
