"""codegen_method=parallel: PTX per partition in worker processes, linked by nvJitLink into one cubin."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from irbuild import build_cuda_ir, corpus, cuda_available

from mneme_cuda import codegen as cuda_codegen
from mneme_cuda import parallel_codegen
from mneme_cuda.backend import CudaBackend

from mneme.core import build, ir, pipeline
from mneme.core.errors import UsageError
from mneme.core.types import ExperimentConfiguration

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
needs_nvjitlink = pytest.mark.skipif(
    cuda_codegen.ptx_assembler() != "nvjitlink", reason="needs nvJitLink: pip install nvidia-nvjitlink cuda-bindings"
)
# Parallel code generation links relocatable code (nvJitLink) from partitions in LLVM's source order: it takes
# neither ptxas_whole_program nor nvptx_sched4reg, so the serial build it must equal is built without them.
O3 = ExperimentConfiguration(
    grid=(64, 1, 1),
    block=(256, 1, 1),
    passes="default<O3>",
    codegen_opt=3,
    ptxas_opt=3,
    knobs={"ptxas_whole_program": False, "nvptx_sched4reg": False},
)
READELF = "llvm-readelf-19"


def many_functions_source(functions: int, with_global: bool = False) -> str:
    """A kernel calling `functions` noinline device functions; optionally one of them reads a __device__ global."""
    lines = ["__device__ float scale_table[4] = {1.0f, 2.0f, 3.0f, 4.0f};"] if with_global else []
    for i in range(functions):
        extra = " * scale_table[k & 3]" if with_global and i == functions - 1 else ""
        lines.append(
            f"__device__ __noinline__ float f{i}(float x, int k) {{\n"
            f"  float y = x * {i + 1}.0f + k{extra};\n  for (int j = 0; j < (k & 3); ++j) y = y * 0.5f + {i}.25f;\n"
            f"  return y > {i}.0f ? y - x : y + x;\n}}"
        )
    body = "\n".join(f"  acc += f{i}(acc, i + {i});" for i in range(functions))
    lines.append(
        'extern "C" __global__ void many_functions(const float* in, float* out, int n) {\n'
        f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  float acc = in[i];\n{body}\n"
        "  out[i] = acc;\n}"
    )
    return "\n".join(lines) + "\n"


def _module(tmp_path, functions: int, with_global: bool = False):
    src = tmp_path / f"many_{functions}{'_g' if with_global else ''}.cu"
    src.write_text(many_functions_source(functions, with_global))
    return ir.link([build_cuda_ir(src)], "many_functions")


def _optimized(mod, kernel):
    pre = pipeline.preprocess(mod, kernel, O3, base_hash="test")
    CudaBackend().optimize(pre.module, O3, "sm_90")
    return pre.module


def _functions(cubin: bytes, tmp_path) -> dict[str, int]:
    """FUNC symbol -> code size, as llvm-readelf reads the cubin's ELF symbol table."""
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([READELF, "--symbols", "--wide", str(path)], capture_output=True, text=True, check=True).stdout
    return {
        cols[-1]: int(cols[2])
        for cols in (line.split() for line in out.splitlines())
        if len(cols) >= 8 and cols[3] == "FUNC"
    }


def test_partitions_cover_every_function_once_and_keep_global_users_with_the_kernel(tmp_path):
    mod = _optimized(_module(tmp_path, 40, with_global=True), "many_functions")
    parts = parallel_codegen.partitions(mod, "many_functions", 3)
    names = [n for p in parts for n in p]
    assert sorted(names) == sorted(ir.defined_functions(mod)) and len(names) == len(set(names))
    assert len(parts) == 3 and parts[0][0] == "many_functions"
    reads_global = [n for n in names if n.startswith("_Z3f39")]
    assert reads_global and reads_global[0] in parts[0]  # scale_table is defined once, with the kernel


def test_a_small_module_is_one_partition(tmp_path):
    mod = _optimized(ir.link([build_cuda_ir("saxpy")], "saxpy"), "saxpy")
    assert parallel_codegen.partitions(mod, "saxpy", 8) == [["saxpy"]]


def test_partition_ptx_declares_the_callees_other_partitions_define(tmp_path):
    mod = _optimized(_module(tmp_path, 24), "many_functions")
    ptxs = parallel_codegen.emit_partitions(mod, "many_functions", "sm_90", 3, jobs=2)
    assert len(ptxs) == 2
    assert ".visible .entry many_functions" in ptxs[0] and ".visible .entry" not in ptxs[1]
    called_elsewhere = [line for line in ptxs[0].splitlines() if line.startswith(".extern .func")]
    assert called_elsewhere and all("many_functions" not in line for line in called_elsewhere)


@needs_nvjitlink
def test_parallel_cubin_has_the_functions_and_resources_of_the_serial_one(tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_CODEGEN_JOBS", "2")
    mod = _module(tmp_path, 48, with_global=True)
    serial = build.compile(mod, "many_functions", O3, "sm_90", cache=False)
    parallel = build.compile(mod, "many_functions", O3.replace(codegen_method="parallel"), "sm_90", cache=False)
    assert parallel.kind == "cubin" and parallel.data[:4] == b"\x7fELF"
    assert parallel.resources == serial.resources and serial.resources.registers > 0
    serial_funcs, parallel_funcs = _functions(serial.data, tmp_path), _functions(parallel.data, tmp_path)
    assert serial_funcs.keys() == parallel_funcs.keys() and len(serial_funcs) == 49
    assert parallel_funcs["many_functions"] == serial_funcs["many_functions"]  # the kernel's code: same size
    assert parallel.data.count(b"scale_table\0") == serial.data.count(b"scale_table\0") == 1  # defined once


@needs_nvjitlink
@pytest.mark.parametrize("kernel", [k for item in corpus() for k in item.kernels])
def test_parallel_codegen_of_a_corpus_kernel_gives_the_serial_cubin(kernel):
    item = next(i for i in corpus() if kernel in i.kernels)
    mod = ir.link([build_cuda_ir(item.source)], kernel)
    serial = build.compile(mod, kernel, O3, "sm_90", cache=False)
    parallel = build.compile(mod, kernel, O3.replace(codegen_method="parallel"), "sm_90", cache=False)
    assert parallel.data == serial.data  # too small to split: the serial path, byte for byte


def test_codegen_jobs_rejects_a_bad_environment_value(monkeypatch):
    monkeypatch.setenv("MNEME_CODEGEN_JOBS", "zero")
    with pytest.raises(UsageError, match="MNEME_CODEGEN_JOBS"):
        parallel_codegen.codegen_jobs()


_ASSEMBLE = """
import hashlib, sys
from mneme_cuda import codegen as cuda_codegen
from mneme.core.types import ExperimentConfiguration
config = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1), ptxas_opt=3)
for path in sys.argv[1:]:
    cubin, _, tool = cuda_codegen.assemble_ptx(open(path).read(), "sm_90", config, "k", assembler="nvjitlink")
    assert cubin[:4] == b"\\x7fELF"
    print(path, hashlib.sha256(cubin).hexdigest())
"""


@needs_nvjitlink
def test_keeping_freed_heap_does_not_change_the_corpus_cubins(tmp_path):
    paths = []
    for item in corpus():
        for kernel in item.kernels:
            mod = ir.link([build_cuda_ir(item.source)], kernel)
            path = tmp_path / f"{kernel}.ptx"
            path.write_bytes(build.compile(mod, kernel, O3, "sm_90", emit="ptx", cache=False).data)
            paths.append(str(path))

    def cubins(tuning: str) -> list[str]:
        env = {**os.environ, "MNEME_MALLOC_TUNING": tuning}
        return subprocess.run(
            [sys.executable, "-c", _ASSEMBLE, *paths], env=env, capture_output=True, text=True, check=True
        ).stdout.splitlines()

    tuned = cubins("1")
    assert len(tuned) == len(paths) == 10 and tuned == cubins("0")


@needs_nvjitlink
def test_nvjitlink_builds_keep_the_freed_heap_unless_told_not_to(tmp_path):
    """glibc keeps up to 64 MiB of freed heap while nvJitLink assembles (its per-build working memory
    stays mapped: benchmarks/bench_compile.py measures the cost it saves); MNEME_MALLOC_TUNING=0 leaves
    glibc's defaults. Page-fault counts themselves move too much on a shared machine for a test."""
    code = "from mneme_cuda import codegen\nprint(codegen._nvjitlink() is not None, codegen._keep_freed_heap())\n"

    def applied(tuning: str) -> str:
        env = {**os.environ, "MNEME_MALLOC_TUNING": tuning}
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.split()

    assert applied("1") == ["True", "True"]
    assert applied("0") == ["True", "False"]


@needs_nvjitlink
def test_a_module_with_line_tables_is_generated_serially(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MNEME_CODEGEN_JOBS", "2")
    src = tmp_path / "many_g.cu"
    src.write_text(many_functions_source(32))
    mod = ir.link([build_cuda_ir(src, flags=("-gline-tables-only",))], "many_functions")
    with caplog.at_level("INFO", logger="mneme_cuda.parallel_codegen"):
        parallel = build.compile(mod, "many_functions", O3.replace(codegen_method="parallel"), "sm_90", cache=False)
    serial = build.compile(mod, "many_functions", O3, "sm_90", cache=False)
    assert "debug info; generating it serially" in caplog.text
    assert parallel.resources == serial.resources and len(_functions(parallel.data, tmp_path)) == 33
