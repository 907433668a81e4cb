"""Optimization pipelines, code generation (PTX, cubin, hsaco, host) and the build cache on real IR."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import attrs
import pytest
from irbuild import CLANG, build_cuda_ir, build_hip_ir, cuda_available, hip_available

from mneme_cuda import codegen as cuda_codegen
from mneme_cuda import cubin as cuda_cubin
from mneme_cuda.backend import CudaBackend
from mneme_hip.metadata import amdgpu_metadata

from mneme.plugins.backends.host import machine as host_machine

from mneme.core import build, ir, ircache, pipeline
from mneme.core.backend import DeviceBinary, Resources, backend_for_arch, get_backend
from mneme.core.errors import IRError, UsageError
from mneme.core import params
from mneme.core.types import ExperimentConfiguration, build_fields

needs_hip = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
BASE = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))


# -- pipelines ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,printed",
    [
        ("default<O3>", "default<O3>"),
        ("O2", "default<O2>"),
        ("default<Os>", "default<Os>"),
        ("Oz", "default<Oz>"),
        ("sroa, instcombine,simplifycfg", "sroa,instcombine,simplifycfg"),
        ("", ""),
    ],
)
def test_pipeline_strings_parse_and_print_canonically(text, printed):
    parsed = pipeline.parse_pipeline(text)
    assert str(parsed) == printed
    assert pipeline.parse_pipeline(str(parsed)) == parsed


def test_unknown_pass_is_rejected_with_the_list_of_known_passes():
    with pytest.raises(
        UsageError,
        match=r"unknown pass 'loop-vectorize-harder'.*known passes|unknown pass 'loop-vectorize-harder'.*instcombine",
    ):
        pipeline.parse_pipeline("instcombine,loop-vectorize-harder")


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3", "Os", "Oz"])
def test_every_default_level_optimizes_a_kernel_in_place(level):
    mod = ir.load(build_cuda_ir("stencil2d", opt="-O0"))
    before = ir.module_hash(mod)
    seconds = CudaBackend().optimize(mod, BASE.replace(passes=f"default<{level}>"), "sm_90")
    assert seconds > 0
    ir.verify(mod)
    if level != "O0":
        assert ir.module_hash(mod) != before and "alloca" not in str(mod)


def test_explicit_pass_sequence_runs_those_passes():
    mod = ir.load(build_cuda_ir("saxpy", opt="-O0"))
    assert "alloca" in str(mod)
    CudaBackend().optimize(mod, BASE.replace(passes="sroa,instcombine,simplifycfg"), "sm_90")
    assert "alloca" not in str(mod)


def test_empty_pipeline_leaves_the_module_alone():
    mod = ir.load(build_cuda_ir("saxpy", opt="-O0"))
    before = ir.module_hash(mod)
    assert CudaBackend().optimize(mod, BASE.replace(passes=""), "sm_90") == 0.0
    assert ir.module_hash(mod) == before


ROW_SUM = """
extern "C" __global__ void row_sum(const float* in, float* out) {
  float s = 0.0f;
  for (int k = 0; k < 16; ++k) s += in[threadIdx.x * 16 + k] * k;
  out[threadIdx.x] = s;
}
"""

MANY_LIVE = """
extern "C" __global__ void many_live(const float* in, float* out) {
  float acc[48];
#pragma unroll
  for (int k = 0; k < 48; ++k) acc[k] = in[threadIdx.x + k * 128];
#pragma unroll
  for (int r = 1; r < 4; ++r)
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = acc[k] * acc[(k + r) % 48] + 1.0f;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 48; ++k) s += acc[k] * k;
  out[threadIdx.x] = s;
}
"""


def _kernel_ir(tmp_path, name, source):
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    return ir.load(build_cuda_ir(src))


def test_loop_unrolling_knob_changes_the_generated_code(tmp_path):
    mod = _kernel_ir(tmp_path, "row_sum", ROW_SUM)

    def loads(**knobs):
        ptx = build.compile(mod, "row_sum", BASE.replace(**knobs), "sm_90", emit="ptx", cache=False).data.decode()
        return ptx.count("ld.global")

    assert loads(loop_unrolling=True) >= 16
    assert loads(loop_unrolling=False) <= 4


def test_tuning_options_follow_the_configuration():
    pto = pipeline.tuning_options(
        BASE.replace(loop_vectorization=False, slp_vectorization=True, inlining_threshold=200),
        pipeline.parse_pipeline("default<O3>"),
    )
    assert pto.speed_level == 3 and pto.loop_vectorization is False and pto.slp_vectorization is True
    assert pto.inlining_threshold == 200
    assert pipeline.inlining_threshold(BASE, pipeline.parse_pipeline("O3")) == 250
    assert pipeline.inlining_threshold(BASE.replace(inlining_threshold=5000), pipeline.parse_pipeline("Os")) == 5000
    assert (
        pipeline.tuning_options(BASE.replace(inlining_threshold=100), pipeline.parse_pipeline("O2")).inlining_threshold
        == 100
    )
    size = pipeline.tuning_options(BASE, pipeline.parse_pipeline("Oz"))
    assert size.loop_unrolling is False and size.inlining_threshold == 25


BIG_CALLEE = (
    """
__device__ float big(const float* p, float x) {
  float s = x;
"""
    + "".join(f"  s = s * p[{k}] + {k}.5f;\n" for k in range(400))
    + """  return s;
}
extern "C" __global__ void calls_big(const float* p, float* out) {
  float x = out[threadIdx.x];
  x = big(p, x); x = big(p + 1, x); x = big(p + 2, x); x = big(p + 3, x);
  out[threadIdx.x] = x;
}
"""
)

_INLINING_SCRIPT = """
import re
import sys
from mneme.core import build, ir
from mneme.core.types import ExperimentConfiguration
mod = ir.load(sys.argv[1])
base = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))
def ptx(threshold):
    config = base.replace(inlining_threshold=threshold)
    return build.compile(mod, "calls_big", config, "sm_90", emit="ptx", cache=False).data.decode()
for threshold in sys.argv[2:]:
    print(threshold, ptx(None if threshold == "none" else int(threshold)).count("call.uni"))
print("ptx", hash(re.sub(r"//.*", "", ptx(None))))  # comments number call sequences per process
"""


def test_inlining_threshold_above_255_reaches_the_inliner(tmp_path):
    """llvmlite's tuning options hold 8 bits; larger thresholds go through LLVM's -inline-threshold."""
    src = tmp_path / "calls_big.cu"
    src.write_text(BIG_CALLEE)
    path = str(build_cuda_ir(src))

    def run(*thresholds):  # a fresh process each: LLVM's option is process-wide
        out = subprocess.run(
            [sys.executable, "-c", _INLINING_SCRIPT, path, *thresholds],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        ).stdout
        return dict(line.split() for line in out.splitlines())

    fresh = run("none")
    assert int(fresh["none"]) >= 1  # big() stays a call at the O3 threshold (250)
    after = run("5000", "none", "100")
    assert after["5000"] == "0"  # inlined everywhere: the threshold reached LLVM
    assert after["none"] == fresh["none"] and after["100"] == fresh["none"]
    assert after["ptx"] == fresh["ptx"]  # later default builds are unchanged by the option


def test_optimize_works_on_a_host_module(tmp_path):
    src = tmp_path / "axpy.c"
    src.write_text(
        "void axpy(int n, float a, const float *x, float *y) { for (int i = 0; i < n; ++i) y[i] += a * x[i]; }\n"
    )
    out = tmp_path / "axpy.ll"
    subprocess.run([CLANG, "-O1", "-S", "-emit-llvm", str(src), "-o", str(out)], check=True)
    mod = ir.load(out)
    pipeline.optimize(mod, BASE, host_machine.pipeline_machine())
    assert (
        "<4 x float>" in str(mod) or "<8 x float>" in str(mod) or "<16 x float>" in str(mod)
    )  # vectorized for the host


def test_optimizing_device_ir_for_the_host_is_refused_not_aborted():
    mod = ir.load(build_cuda_ir("saxpy"))
    with pytest.raises(IRError, match="retarget it to the host"):
        pipeline.optimize(mod, BASE, host_machine.pipeline_machine())
    mod.triple = "x86_64-unknown-linux-gnu"
    with pytest.raises(IRError, match='"target-cpu"="sm_90"'):
        pipeline.optimize(mod, BASE, host_machine.pipeline_machine())


# -- code generation ------------------------------------------------------------------------------


def test_codegen_opt_outside_0_to_3_raises_value_error():
    mod = ir.load(build_cuda_ir("saxpy"))
    bad = attrs.evolve(BASE, codegen_opt=3)
    object.__setattr__(bad, "codegen_opt", 4)  # the configuration's validator refuses 4; the pipeline must too
    with pytest.raises(ValueError, match="codegen_opt must be an integer 0..3"):
        cuda_codegen.codegen(mod, "saxpy", bad, "sm_90")
    with pytest.raises(ValueError):
        CudaBackend().optimize(mod, bad, "sm_90")


@pytest.mark.parametrize("backend,arch", [("cuda", "gfx90a"), ("cuda", "vulkan"), ("hip", "sm_90")])
def test_an_arch_the_backend_does_not_claim_is_a_usage_error(backend, arch):
    mod = ir.load(build_cuda_ir("saxpy"))
    with pytest.raises(UsageError):
        build.compile(mod, "saxpy", BASE, arch, backend=get_backend(backend), cache=False)


def test_an_architecture_no_installed_backend_claims_names_the_installed_backends():
    mod = ir.load(build_cuda_ir("saxpy"))
    with pytest.raises(UsageError, match=r"unknown architecture 'riscv': .*\(installed backends: cuda, hip, host\)"):
        build.compile(mod, "saxpy", BASE, "riscv", cache=False)


@needs_hip
def test_compiling_amdgpu_ir_for_an_nvidia_arch_names_both_targets():
    mod = ir.load(build_hip_ir("saxpy"))
    with pytest.raises(IRError, match="targets amdgcn-amd-amdhsa, not nvptx"):
        build.compile(mod, "saxpy", BASE, "sm_90", cache=False)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_codegen_level_produces_ptx_that_ptxas_accepts(level):
    mod = ir.load(build_cuda_ir("stencil2d"))
    cfg = BASE.replace(codegen_opt=level)
    ptx = build.compile(mod, "stencil2d", cfg, "sm_90", emit="ptx", cache=False).data.decode()
    assert ".target sm_90" in ptx and ".entry stencil2d" in ptx
    cubin, report, tool = cuda_codegen.assemble_ptx(ptx, "sm_90", cfg, "stencil2d", assembler="ptxas")
    assert tool == "ptxas" and cubin[:4] == b"\x7fELF" and "Used" in report


def test_ptxas_report_gives_registers_and_shared_memory():
    mod = ir.load(build_cuda_ir("reduce_sum"))
    binary = build.compile(mod, "reduce_sum", BASE, "sm_90", cache=False)
    assert binary.kind == "cubin" and binary.backend == "cuda" and binary.arch == "sm_90"
    assert binary.resources.registers > 0 and binary.resources.shared_mem == 1024
    assert binary.resources.spill_stores == 0
    assert set(binary.stage_times) >= {"preprocess", "optimize", "codegen", "assemble"}


def test_register_cap_reaches_the_assembler_and_spills_show(tmp_path):
    mod = _kernel_ir(tmp_path, "many_live", MANY_LIVE)
    # relocatable code in source order needs more than 32 registers here (whole-program code: exactly 32)
    base = BASE.replace(ptxas_whole_program=False, nvptx_sched4reg=False)
    free = build.compile(mod, "many_live", base, "sm_90", cache=False).resources
    capped = build.compile(mod, "many_live", base.replace(max_registers=32), "sm_90", cache=False).resources
    assert capped.registers <= 32 < free.registers
    assert capped.spill_stores > 0 and capped.local_mem > 0 and free.spill_stores == 0


def test_nvjitlink_and_ptxas_both_assemble_when_installed():
    source_order = BASE.replace(nvptx_sched4reg=False)  # the PTX both assemblers gave the same registers for
    ptx = build.compile(ir.load(build_cuda_ir("saxpy")), "saxpy", source_order, "sm_90", emit="ptx", cache=False)
    ptx = ptx.data.decode()
    cubin1, report, _ = cuda_codegen.assemble_ptx(
        ptx, "sm_90", BASE.replace(cache_mode="cg", ptxas_opt=1), "saxpy", assembler="ptxas"
    )
    assert cuda_cubin.resources(cubin1, "saxpy", report, "ptxas").registers > 0
    if cuda_codegen.ptx_assembler() != "nvjitlink":
        pytest.skip("needs nvJitLink: pip install nvidia-nvjitlink cuda-bindings")
    cubin2, report2, tool = cuda_codegen.assemble_ptx(ptx, "sm_90", BASE, "saxpy", assembler="nvjitlink")
    assert tool == "nvjitlink" and cubin2[:4] == b"\x7fELF"
    assert (
        cuda_cubin.resources(cubin2, "saxpy", report2, tool).registers
        == cuda_cubin.resources(cubin1, "saxpy", report, "ptxas").registers
    )


def test_invalid_ptx_is_an_irerror_naming_the_kernel():
    with pytest.raises(IRError, match="kernel 'broken'"):
        cuda_codegen.assemble_ptx(
            ".version 7.8\n.target sm_90\n.address_size 64\n.entry broken( {",
            "sm_90",
            BASE,
            "broken",
            assembler="ptxas",
        )


@needs_hip
def test_amdgpu_code_object_carries_its_resources():
    mod = ir.load(build_hip_ir("reduce_sum"))
    binary = build.compile(mod, "reduce_sum", BASE, "gfx90a", cache=False)
    assert binary.kind == "hsaco" and binary.backend == "hip"
    assert binary.resources.shared_mem == 1024 and binary.resources.registers > 0
    readobj = subprocess.run(
        ["llvm-readobj-19", "--file-headers", "--notes", "-"], input=binary.data, capture_output=True, check=True
    ).stdout.decode()
    assert "EF_AMDGPU_MACH_AMDGCN_GFX90A" in readobj
    # the in-process reading of the metadata note agrees with LLVM's own tool
    meta = amdgpu_metadata(binary.data)
    (kernel,) = meta["amdhsa.kernels"]
    for key in (".vgpr_count", ".sgpr_count", ".group_segment_fixed_size", ".max_flat_workgroup_size"):
        assert f"{key}: {kernel[key]}".replace(" ", "") in readobj.replace(" ", "")
    assert meta["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx90a"


# -- the build cache ------------------------------------------------------------------------------


def test_identical_variants_compile_once_per_process(tmp_path):
    cache = ircache.BuildCache(tmp_path, disk=False)
    mod = ir.load(build_cuda_ir("saxpy"))
    first = build.compile(mod, "saxpy", BASE, "sm_90", cache=cache)
    assert cache.hits == 0 and "assemble" in first.stage_times
    second = build.compile(mod, "saxpy", BASE, "sm_90", cache=cache)
    assert second.data == first.data and list(second.stage_times) == ["cache"]  # not even preprocessed
    # another launch geometry, nothing specialized on it: the same variant, built once
    third = build.compile(mod, "saxpy", BASE.replace(grid=(1, 1, 1)), "sm_90", cache=cache)
    assert third.data == first.data and "preprocess" in third.stage_times and "assemble" not in third.stage_times
    fourth = build.compile(mod, "saxpy", BASE.replace(ptxas_opt=1), "sm_90", cache=cache)
    assert "assemble" in fourth.stage_times


def test_configurations_that_differ_only_in_ptxas_options_share_one_ptx(tmp_path):
    cache = ircache.BuildCache(tmp_path, disk=False)
    mod = ir.load(build_cuda_ir("saxpy"))
    first = build.compile(mod, "saxpy", BASE, "sm_90", cache=cache)
    assert {"optimize", "codegen", "assemble"} <= set(first.stage_times)
    for change in ({"ptxas_opt": 0}, {"max_registers": 32}, {"cache_mode": "cg"}):
        config = BASE.replace(**change)
        shared = build.compile(mod, "saxpy", config, "sm_90", cache=cache)
        # LLVM did not run again: the PTX came from the cache, ptxas alone made the cubin
        assert "optimize" not in shared.stage_times and "codegen" not in shared.stage_times, change
        assert "assemble" in shared.stage_times
        alone = build.compile(mod, "saxpy", config, "sm_90", cache=False)  # no cache: in one step
        assert "optimize" in alone.stage_times
        assert shared.data == alone.data and shared.resources == alone.resources, change
    assert build.compile(mod, "saxpy", BASE.replace(ptxas_opt=0), "sm_90", cache=cache).data != first.data
    # what LLVM reads is not shared: another codegen level, or parallel code generation (its
    # partitions are linked by the assembler), builds from the IR
    for change in ({"codegen_opt": 1}, {"codegen_method": "parallel"}):
        assert "codegen" in build.compile(mod, "saxpy", BASE.replace(**change), "sm_90", cache=cache).stage_times
    with pytest.raises(UsageError, match="takes PTX"):
        cuda_codegen.assemble(first, BASE, "sm_90")
    with pytest.raises(NotImplementedError, match="builds in one step"):
        get_backend("host").assemble(first, BASE, "x86_64", emit="llvm-ir")


def test_each_kernel_of_an_unpruned_module_gets_its_own_build(tmp_path):
    # without pruning and internalizing, both kernels of the module have one variant hash: the
    # cache must still tell them apart (before, the second got the first's binary, name and resources)
    cache = ircache.BuildCache(tmp_path, disk=False)
    mod = ir.load(build_cuda_ir("scale_template"))
    config = BASE.replace(prune=False, internalize=False)
    first, second = (
        build.compile(mod, k, config, "sm_90", cache=cache) for k in ("_Z5scaleIfEvPT_S0_i", "_Z5scaleIiEvPT_S0_i")
    )
    assert first.variant_hash == second.variant_hash
    assert (first.kernel_name, second.kernel_name) == ("_Z5scaleIfEvPT_S0_i", "_Z5scaleIiEvPT_S0_i")
    assert "assemble" in second.stage_times


def test_the_disk_cache_survives_the_process_cache(tmp_path):
    mod = ir.load(build_cuda_ir("saxpy"))
    first = build.compile(mod, "saxpy", BASE, "sm_90", cache=ircache.BuildCache(tmp_path))
    fresh = ircache.BuildCache(tmp_path)
    again = build.compile(mod, "saxpy", BASE, "sm_90", cache=fresh)
    assert fresh.hits == 1 and again.data == first.data and again.resources == first.resources


def test_a_corrupt_cache_entry_is_rebuilt_not_trusted(tmp_path):
    mod = ir.load(build_cuda_ir("saxpy"))
    build.compile(mod, "saxpy", BASE, "sm_90", cache=ircache.BuildCache(tmp_path))
    entries = [p for p in tmp_path.glob("*/*.bin") if p.read_bytes().startswith(b"MNEMEBIN1")]
    assert len(entries) == 2  # the cubin and the PTX it was assembled from
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-10] + b"0123456789")
    fresh = ircache.BuildCache(tmp_path)
    binary = build.compile(mod, "saxpy", BASE, "sm_90", cache=fresh)
    assert fresh.hits == 0 and {"codegen", "assemble"} <= set(binary.stage_times) and binary.data[:4] == b"\x7fELF"


def test_cache_keys_change_with_toolchain_target_and_build_fields():
    tools = CudaBackend().toolchain("sm_90")
    keys = {
        ircache.build_key("v", BASE, tools, "sm_90", "cubin"),
        ircache.build_key("v", BASE, tools, "sm_80", "cubin"),
        ircache.build_key("v", BASE, tools, "sm_90", "ptx"),
        ircache.build_key("v", BASE.replace(passes="default<O1>"), tools, "sm_90", "cubin"),
        ircache.build_key("v", BASE.replace(codegen_method="parallel"), tools, "sm_90", "cubin"),
        ircache.build_key("v", BASE, {**tools, "ptxas": "another"}, "sm_90", "cubin"),
        ircache.build_key("w", BASE, tools, "sm_90", "cubin"),
        ircache.build_key("v", BASE, tools, "sm_90", "cubin", kernel="another"),
    }
    assert len(keys) == 8
    # a backend's intermediate code (CUDA's PTX) is keyed without the assembler's fields
    assembled = BASE.replace(ptxas_opt=1, max_registers=32, cache_mode="cg")
    assert ircache.build_key("v", BASE, tools, "sm_90", "ptx", intermediate=True) == ircache.build_key(
        "v", assembled, tools, "sm_90", "ptx", intermediate=True
    )
    assert ircache.build_key("v", BASE, tools, "sm_90", "ptx", intermediate=True) != ircache.build_key(
        "v", BASE.replace(codegen_opt=1), tools, "sm_90", "ptx", intermediate=True
    )
    assert ircache.build_key("v", BASE, tools, "sm_90", "cubin") != ircache.build_key(
        "v", assembled, tools, "sm_90", "cubin"
    )
    assert tools["backend"] == "cuda" and "ptxas" in tools and "llvm" in tools
    assert "lld" in get_backend("hip").toolchain("gfx90a") and "cpu" in get_backend("host").toolchain("x86_64")
    # launch geometry alone does not change a build (it is in the variant hash when transforms use it)
    assert ircache.build_key("v", BASE, tools, "sm_90", "cubin") == ircache.build_key(
        "v", BASE.replace(grid=(1, 1, 1)), tools, "sm_90", "cubin"
    )


def test_build_fields_are_the_configuration_fields_that_reach_code_generation():
    # the transforms' fields (fast_math among them) change the IR and so the variant hash instead
    fields = params.build_fields()
    assert "codegen_method" in fields and "fast_math" not in fields
    assert {"ptxas_opt", "max_registers", "cache_mode", "loop_unrolling", "inlining_threshold"} <= set(fields)
    config = BASE.replace(ptxas_opt=1, loop_unrolling=False)
    assert set(build_fields(config)) == set(fields)  # every one is readable on a configuration
    assert build_fields(config)["ptxas_opt"] == 1 and build_fields(config)["loop_unrolling"] is False


def test_each_architecture_is_claimed_by_its_backend():
    assert [backend_for_arch(a).name for a in ("sm_90", "sm_100a", "gfx90a", "gfx1100")] == [
        "cuda",
        "cuda",
        "hip",
        "hip",
    ]


def _binary(i: int, size: int = 1000) -> DeviceBinary:
    return DeviceBinary("cuda", "sm_90", "cubin", f"k{i}", bytes([i % 256]) * size, Resources(registers=i))


def test_the_disk_cache_stays_under_its_size_bound(tmp_path):
    cache = ircache.BuildCache(tmp_path, max_bytes=5000)
    for i in range(20):
        cache.put(f"{i:064x}", _binary(i))
    assert cache.size() <= 5000
    assert ircache.BuildCache(tmp_path).get(f"{19:064x}").resources.registers == 19


def _writer(args):
    folder, worker = args
    cache = ircache.BuildCache(folder)
    for i in range(30):
        cache.put(f"{i % 5:064x}", _binary(i % 5, 50_000))
    return worker


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path):
    with multiprocessing.get_context("fork").Pool(4) as pool:
        assert sorted(pool.map(_writer, [(str(tmp_path), w) for w in range(4)])) == [0, 1, 2, 3]
    reader = ircache.BuildCache(tmp_path)
    for i in range(5):
        got = reader.get(f"{i:064x}")
        assert got is not None and got.data == _binary(i, 50_000).data
    assert not list(tmp_path.glob("*/*.tmp"))


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3", "Os", "Oz"])
def test_every_corpus_kernel_compiles_at_every_level(level):
    from irbuild import corpus_kernels

    cfg = BASE.replace(passes=f"default<{level}>", codegen_opt=0 if level == "O0" else 3)
    for source, kernel in corpus_kernels():
        binary = build.compile(ir.link([build_cuda_ir(source)], kernel), kernel, cfg, "sm_90", cache=False)
        assert binary.kind == "cubin" and binary.resources.registers > 0, kernel


@needs_hip
@pytest.mark.parametrize("level", ["O0", "Os"])
def test_every_hip_corpus_kernel_compiles_at_other_levels(level):
    from irbuild import corpus_kernels

    cfg = BASE.replace(passes=f"default<{level}>")
    for source, kernel in corpus_kernels():
        binary = build.compile(ir.link([build_hip_ir(source)], kernel), kernel, cfg, "gfx90a", cache=False)
        assert binary.kind == "hsaco" and binary.resources.registers > 0, kernel


DECAY = """
extern "C" __global__ void decay(const float* __restrict__ k, const float* __restrict__ s, float* out, int steps) {
  float state[64];
  #pragma unroll
  for (int i = 0; i < 64; i++) state[i] = s[i * blockDim.x + threadIdx.x];
  for (int t = 0; t < steps; t++) {
    float v = k[t * blockDim.x + threadIdx.x], y = 0.0f;
    for (int j = 0; j < 64; j += 4) {
      float4& st = (float4&)state[j];
      st.x = st.x * 0.9f + v; st.y = st.y * 0.8f + v; st.z = st.z * 0.7f + v; st.w = st.w * 0.6f + v;
      y += st.x + st.y + st.z + st.w;
    }
    out[t * blockDim.x + threadIdx.x] = y;
  }
}
"""


def test_unroll_threshold_unrolls_a_local_array_loop_into_registers_as_nvcc_does(tmp_path):
    # LLVM's O3 threshold (300) keeps the 16-step loop, so `state` lives in local memory; nvcc unrolls it.
    mod = _kernel_ir(tmp_path, "decay", DECAY)

    def ptx(**knobs):
        return build.compile(mod, "decay", BASE.replace(**knobs), "sm_90", emit="ptx", cache=False).data.decode()

    default = ptx()
    assert "st.local" in default and default.count("fma.rn.f32") < 16
    unrolled = ptx(unroll_threshold=1200)
    assert "ld.local" not in unrolled and "st.local" not in unrolled and unrolled.count("fma.rn.f32") == 64
    assert "st.local" in ptx()  # LLVM's process-wide option goes back to the level's default
    assert pipeline.unroll_threshold(BASE, pipeline.parse_pipeline("default<O3>")) == 300
    assert pipeline.unroll_threshold(BASE, pipeline.parse_pipeline("default<O2>")) == 150
    assert BASE.replace(unroll_threshold=1200).hash() != BASE.hash()
