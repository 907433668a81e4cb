"""`mneme-cc` on real nvcc, clang and g++ builds: the real build is untouched, the IR is embedded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from skips import needs
from click.testing import CliRunner

from mneme.core.cli import cli
from mneme.instrument import flags
from mneme.instrument.fatbin import iter_cubins, kernel_names
from mneme.core.irsource import ArchitectureMismatch, resolve
from mneme.instrument.launcher import write_standins
from mneme.instrument.section import SECTION_NAME, read_entries
from mneme.instrument.symbols import module_symbols
from mneme.plugins.ir_sources.embedded import EmbeddedIRSource

pytestmark = needs("nvcc", "clang++-19", "llvm-objcopy-19")

LAUNCHER = [sys.executable, "-m", "mneme.instrument.launcher"]

VECADD = """
__global__ void vecadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() { return 0; }
"""
RDC_KERNEL = """
extern __device__ float combine(float, float);
__global__ void fused(float* x, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = combine(x[i], y[i]);
}
int main() { return 0; }
"""
RDC_HELPER = """
__device__ float bias = 1.0f;
__device__ float combine(float a, float b) { return a * b + bias; }
"""
CUB_KERNEL = """
#include <cub/block/block_reduce.cuh>
template <class Reduce>
__global__ void block_sum(const float* in, float* out) {
  __shared__ typename Reduce::TempStorage tmp;
  float s = Reduce(tmp).Sum(in[blockIdx.x * 128 + threadIdx.x]);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
template __global__ void block_sum<cub::BlockReduce<float, 128>>(const float*, float*);
"""
HOST_ONLY_CU = "#include <cstdio>\nint answer() { return 42; }\n"
HOST_CPP = "int twice(int x) { return 2 * x; }\n"


def mneme_cc(*argv, cwd, env=None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_CC_")}
    full_env.update(env or {})
    return subprocess.run([*LAUNCHER, *argv], cwd=cwd, capture_output=True, text=True, env=full_env)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Every object and binary the tests inspect, built once (two at a time)."""
    d = tmp_path_factory.mktemp("builds")
    sources = {
        "vecadd.cu": VECADD,
        "cub.cu": CUB_KERNEL,
        "fused.cu": RDC_KERNEL,
        "helper.cu": RDC_HELPER,
        "host_only.cu": HOST_ONLY_CU,
        "host.cpp": HOST_CPP,
        "broken.cu": "__global__ void k( {",
    }
    for name, text in sources.items():
        (d / name).write_text(text)
    jobs = {
        "vecadd": ["nvcc", "-c", "vecadd.cu", "-o", "vecadd.o", "-arch=sm_90", "-O2", "-Xcompiler", "-fPIC"],
        "multi": [
            "nvcc",
            "-c",
            "cub.cu",
            "-o",
            "multi.o",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=sm_90",
        ],
        "fused": ["nvcc", "-dc", "fused.cu", "-o", "fused.o", "-arch=sm_90"],
        "helper": ["nvcc", "-rdc=true", "-c", "helper.cu", "-o", "helper.o", "-arch=sm_90"],
        "sm100": ["nvcc", "-c", "vecadd.cu", "-o", "sm100.o", "-arch=sm_100"],
        "host_only": ["nvcc", "-c", "host_only.cu", "-o", "host_only.o", "-arch=sm_90"],
        "broken": ["nvcc", "-c", "broken.cu", "-o", "broken.o", "-arch=sm_90"],
        "flags": [
            "nvcc",
            "-c",
            "vecadd.cu",
            "-o",
            "flags.o",
            "-arch=sm_90",
            "--display-error-number",
            "-Xptxas",
            "-O3",
            "--extra-device-vectorization",
            "-Xcompiler",
            "-march=native",
        ],
    }
    envs = {"flags": {"MNEME_CC_VERBOSE": "1"}}
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda name: mneme_cc(*jobs[name], cwd=d, env=envs.get(name)), jobs)
        done = dict(zip(jobs, results, strict=True))
    for name in ("vecadd", "multi", "fused", "helper", "sm100", "host_only", "flags"):
        assert done[name].returncode == 0, (name, done[name].stderr)
    subprocess.run(["nvcc", "vecadd.o", "-o", "vecadd_app", "-Xlinker", "--gc-sections"], cwd=d, check=True)
    subprocess.run(["nvcc", "-shared", "vecadd.o", "-o", "libvecadd.so"], cwd=d, check=True)
    subprocess.run(["nvcc", "-rdc=true", "-arch=sm_90", "fused.o", "helper.o", "-o", "rdc_app"], cwd=d, check=True)
    return d, done


def test_nvcc_object_gets_one_entry_with_the_kernel_and_header_fields(builds):
    d, done = builds
    assert done["vecadd"].stderr == ""  # nothing added to the build's output
    (entry,) = read_entries(d / "vecadd.o")
    assert entry.source == str(d / "vecadd.cu")
    assert (entry.arch, entry.targets, entry.language, entry.rdc) == ("sm_90", ("sm_90", "compute_90"), "cuda", False)
    assert entry.kernels == ("_Z6vecaddPKfS0_Pfi",)
    assert "clang version 19" in entry.clang_version
    assert module_symbols(entry.bitcode).target_cpu == "sm_90"


def test_linked_executable_and_shared_library_keep_the_section(builds):
    d, _ = builds
    (entry,) = read_entries(d / "vecadd_app")  # linked with --gc-sections
    assert entry.kernels == ("_Z6vecaddPKfS0_Pfi",) and entry.binary.endswith("vecadd_app")
    (entry,) = read_entries(d / "libvecadd.so")
    assert entry.kernels == ("_Z6vecaddPKfS0_Pfi",)
    (module,) = EmbeddedIRSource().find(
        "_Z6vecaddPKfS0_Pfi", arch="sm_90", elf_files=[d / "vecadd_app", d / "libvecadd.so"]
    )
    assert module.origin.startswith(str(d / "vecadd_app"))


def test_nvcc_flags_clang_lacks_are_dropped_with_one_debug_line(builds):
    d, done = builds
    (line,) = [ln for ln in done["flags"].stderr.splitlines() if "no clang equivalent" in ln]
    assert line.startswith("mneme-cc: debug:") and "--display-error-number" in line
    assert "warning" not in done["flags"].stderr
    (entry,) = read_entries(d / "flags.o")
    assert entry.kernels == ("_Z6vecaddPKfS0_Pfi",)


def test_static_library_members_are_read(builds, tmp_path):
    d, _ = builds
    subprocess.run(["ar", "rcs", str(tmp_path / "libk.a"), str(d / "vecadd.o"), str(d / "host_only.o")], check=True)
    (entry,) = read_entries(tmp_path / "libk.a")
    assert entry.binary == f"{tmp_path / 'libk.a'}(vecadd.o)" and entry.kernels == ("_Z6vecaddPKfS0_Pfi",)


def test_resolve_asks_the_registered_sources_in_order(builds, tmp_path, monkeypatch):
    d, _ = builds
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # an empty Triton cache
    name, modules = resolve("_Z6vecaddPKfS0_Pfi", arch="sm_90", elf_files=[d / "vecadd_app"])
    assert name == "embedded" and modules[0].origin.startswith(str(d / "vecadd_app"))
    assert resolve("_Z7missingv", arch="sm_90", elf_files=[d / "vecadd_app"]) is None
    with pytest.raises(ArchitectureMismatch):
        resolve("_Z6vecaddPKfS0_Pfi", arch="sm_80", elf_files=[d / "vecadd_app"])


def block_sum_kernel(d: Path) -> str:
    (name,) = {k for e in read_entries(d / "multi.o") for k in e.kernels}
    return name


def test_several_architectures_give_one_entry_each(builds):
    d, _ = builds
    entries = read_entries(d / "multi.o")
    assert [(e.arch, e.targets) for e in entries] == [("sm_80", ("sm_80",)), ("sm_90", ("sm_90",))]
    assert [module_symbols(e.bitcode).target_cpu for e in entries] == ["sm_80", "sm_90"]


def test_kernel_names_in_the_ir_are_the_names_nvcc_compiled(builds):
    # CUB's namespace is named after nvcc's architecture list (cub::CUB_300001_SM_800_900)
    d, _ = builds
    cubins = list(iter_cubins(d / "multi.o"))
    assert len(cubins) == 2
    for cubin in cubins:
        assert kernel_names(cubin) == [block_sum_kernel(d)]
    assert "_SM_800_900" in block_sum_kernel(d)


def test_embedded_source_picks_the_entry_for_the_device_architecture(builds):
    d, _ = builds
    source, kernel = EmbeddedIRSource(), block_sum_kernel(d)
    (module,) = source.find(kernel, arch="sm_90", elf_files=[d / "multi.o"])
    assert module.arch == "sm_90" and module.kind == "bitcode"
    assert kernel in module_symbols(module.data).kernels
    # sm_86 runs sm_80 SASS, so the sm_80 IR is what ran there
    (module,) = source.find(kernel, arch="sm_86", elf_files=[d / "multi.o"])
    assert module.arch == "sm_80"


def test_ir_built_for_another_architecture_than_the_device_is_a_clear_error(builds):
    d, _ = builds
    with pytest.raises(ArchitectureMismatch, match=r"block_sum<cub::.*sm_80.*sm_90.*device is sm_75.*rebuild"):
        EmbeddedIRSource().find(block_sum_kernel(d), arch="sm_75", elf_files=[d / "multi.o"])


def test_unknown_kernel_or_binary_without_ir_is_not_found(builds):
    d, _ = builds
    source = EmbeddedIRSource()
    assert source.find("_Z5otherv", arch="sm_90", elf_files=[d / "vecadd_app"]) is None
    assert source.find("_Z6vecaddPKfS0_Pfi", arch="sm_90", elf_files=[d / "host_only.o", d / "host.cpp"]) is None


def test_rdc_kernel_comes_with_the_modules_defining_what_it_calls(builds):
    d, _ = builds
    entries = read_entries(d / "rdc_app")
    assert sorted(Path(e.source).name for e in entries) == ["fused.cu", "helper.cu"]
    assert all(e.rdc for e in entries)
    modules = EmbeddedIRSource().find("_Z5fusedPfPKfi", arch="sm_90", elf_files=[d / "rdc_app"])
    assert [Path(m.source).name for m in modules] == ["fused.cu", "helper.cu"]
    assert {"_Z7combineff", "bias"} <= module_symbols(modules[1].data).defined


def test_object_with_no_device_code_gets_no_section(builds):
    d, done = builds
    assert done["host_only"].stderr == ""
    assert read_entries(d / "host_only.o") == []


def test_architecture_clang_cannot_target_warns_once_and_the_build_succeeds(builds):
    d, done = builds
    warnings = [line for line in done["sm100"].stderr.splitlines() if "mneme-cc: warning" in line]
    assert len(warnings) == 1
    assert "vecadd.cu" in warnings[0] and "sm_100" in warnings[0] and "the build continues" in warnings[0]
    assert (d / "sm100.o").exists() and read_entries(d / "sm100.o") == []


def test_failing_compile_keeps_the_compiler_exit_status_and_messages(builds):
    d, done = builds
    plain = subprocess.run(
        ["nvcc", "-c", "broken.cu", "-o", "broken.o", "-arch=sm_90"], cwd=d, capture_output=True, text=True
    )
    assert done["broken"].returncode == plain.returncode != 0
    assert done["broken"].stderr == plain.stderr and "mneme-cc" not in done["broken"].stderr


def test_gnu_strip_keeps_the_section_and_llvm_strip_needs_keep_section(builds, tmp_path):
    d, _ = builds
    for tool, extra, kept in (
        ("strip", [], True),
        ("llvm-strip-19", [], False),
        ("llvm-strip-19", [f"--keep-section={SECTION_NAME}"], True),
    ):
        app = tmp_path / "app"
        shutil.copy(d / "vecadd_app", app)
        subprocess.run([tool, *extra, str(app)], check=True)
        assert bool(read_entries(app)) == kept, (tool, extra)


def test_plain_cpp_through_gpp_is_byte_identical_and_has_no_section(builds, tmp_path):
    d, _ = builds
    result = mneme_cc("g++", "-O2", "-c", str(d / "host.cpp"), "-o", str(tmp_path / "with.o"), cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    subprocess.run(["g++", "-O2", "-c", str(d / "host.cpp"), "-o", str(tmp_path / "without.o")], check=True)
    assert (tmp_path / "with.o").read_bytes() == (tmp_path / "without.o").read_bytes()


def test_unknown_compiler_runs_unchanged_with_one_warning(tmp_path):
    result = mneme_cc(sys.executable, "-c", "import sys; print('ran'); sys.exit(3)", cwd=tmp_path)
    assert result.returncode == 3 and result.stdout == "ran\n"
    (warning,) = result.stderr.splitlines()
    assert "unknown compiler" in warning and "running it unchanged" in warning


def test_no_command_prints_usage_and_disable_runs_the_compiler_only(tmp_path):
    result = mneme_cc(cwd=tmp_path)
    assert result.returncode == 2 and "usage: mneme-cc COMPILER ARGS" in result.stderr
    result = mneme_cc(sys.executable, "-c", "print('ran')", cwd=tmp_path, env={"MNEME_CC_DISABLE": "1"})
    assert (result.returncode, result.stdout, result.stderr) == (0, "ran\n", "")


def test_missing_compiler_exits_127_naming_it(tmp_path):
    result = mneme_cc("no-such-compiler-xyz", "-c", "k.cu", cwd=tmp_path)
    assert result.returncode == 127 and "no-such-compiler-xyz" in result.stderr


def test_missing_clang_warns_naming_the_file_and_the_build_succeeds(tmp_path):
    (tmp_path / "k.cu").write_text(VECADD)
    result = mneme_cc(
        "nvcc", "-c", "k.cu", "-o", "k.o", "-arch=sm_90", cwd=tmp_path, env={"MNEME_CC_CLANG": "/nonexistent/clang++"}
    )
    assert result.returncode == 0
    (warning,) = result.stderr.splitlines()
    assert "k.cu" in warning and "clang was not found" in warning
    assert read_entries(tmp_path / "k.o") == []


def test_clang_hip_build_embeds_one_entry_per_offload_arch(tmp_path):
    (tmp_path / "k.hip").write_text(
        "typedef struct { unsigned x, y, z; } dim3;\ntypedef struct ihipStream_t* hipStream_t;\n"
        'extern "C" int hipLaunchKernel(const void*, dim3, dim3, void**, unsigned long, hipStream_t);\n'
        "__attribute__((global)) void scale(float* x, float a) { x[__builtin_amdgcn_workitem_id_x()] *= a; }\n"
    )
    result = mneme_cc(
        "clang++-19",
        "-x",
        "hip",
        "-nogpuinc",
        "-nogpulib",
        "--offload-arch=gfx90a",
        "--offload-arch=gfx942",
        "-O2",
        "-MD",
        "-MF",
        "k.d",
        "-c",
        "k.hip",
        "-o",
        "k.o",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    entries = read_entries(tmp_path / "k.o")
    assert [(e.arch, e.language, e.kernels) for e in entries] == [
        ("gfx90a", "hip", ("_Z5scalePff",)),
        ("gfx942", "hip", ("_Z5scalePff",)),
    ]
    assert module_symbols(entries[1].bitcode).triple == "amdgcn-amd-amdhsa"
    assert (tmp_path / "k.d").read_text().startswith("k.o:")  # the real command's depfile, not clang's


def test_clang_cuda_command_plans_runnable_device_jobs(tmp_path):
    # clang-19 cannot finish a whole CUDA 13 build (its fatbinary call fails), so run the planned jobs
    (tmp_path / "k.cu").write_text(VECADD)
    standins = write_standins(str(tmp_path))
    plan = flags.plan(
        [
            "clang++-19",
            "-x",
            "cuda",
            "--cuda-path=/usr/local/cuda",
            "-Wno-unknown-cuda-version",
            "-isystem",
            "/usr/local/cuda/include/cccl",
            "-idirafter",
            standins,
            "-O2",
            "-DBLK=4",
            "--cuda-gpu-arch=sm_80",
            "--cuda-gpu-arch=sm_90",
            "-MD",
            "-c",
            "k.cu",
            "-o",
            "k.o",
        ],
        str(tmp_path),
    )
    for job in plan.jobs:
        subprocess.run([*job.argv, "-o", f"{job.arch}.bc"], cwd=tmp_path, check=True, capture_output=True)
        syms = module_symbols((tmp_path / f"{job.arch}.bc").read_bytes())
        assert (syms.target_cpu, syms.kernels) == (job.arch, ("_Z6vecaddPKfS0_Pfi",))
    assert [j.arch for j in plan.jobs] == ["sm_80", "sm_90"]


def test_list_of_a_binary_without_ir_says_how_to_get_it(builds):
    d, _ = builds
    result = CliRunner().invoke(cli, ["ir", "list", str(d / "host_only.o")])
    assert result.exit_code == 0
    assert "no embedded IR" in result.output and "mneme-cc" in result.output


def test_extract_asks_for_arch_when_the_kernel_has_several(builds, tmp_path):
    d, _ = builds
    out = tmp_path / "k.ll"
    result = CliRunner().invoke(cli, ["ir", "extract", str(d / "multi.o"), "block_sum", "-o", str(out)])
    assert result.exit_code == 2 and "several architectures (sm_80, sm_90)" in result.output
    result = CliRunner().invoke(
        cli, ["ir", "extract", str(d / "multi.o"), "block_sum", "--arch", "sm_80", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert '"target-cpu"="sm_80"' in out.read_text()
