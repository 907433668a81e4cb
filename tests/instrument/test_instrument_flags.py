"""How `mneme-cc` reads compiler command lines and plans the clang runs (no compiling here)."""

from __future__ import annotations

import os
import shutil

import pytest
from skips import needs

from mneme.core.errors import UsageError
from mneme.instrument import flags

pytestmark = needs("clang++-19")


def nvcc_plan(*args, cwd="/build"):
    return flags.plan(["nvcc", *args], cwd, standins="/standins")


def test_compilers_are_recognised_by_name():
    assert [
        flags.classify(c)
        for c in (
            "/usr/local/cuda/bin/nvcc",
            "clang++-19",
            "clang",
            "hipcc",
            "amdclang++",
            "g++",
            "x86_64-linux-gnu-gcc-12",
            "c++",
            "gfortran",
            "my-cc-wrapper",
        )
    ] == ["nvcc", "clang", "clang", "hipcc", "clang", "host", "host", "host", "unknown", "unknown"]


def test_nvcc_flags_become_clang_device_only_flags():
    plan = nvcc_plan(
        "-c",
        "k.cu",
        "-o",
        "obj/k.o",
        "-DFOO=1",
        "-D",
        "BAR",
        "-Iinc",
        "-I",
        "/abs/inc",
        "-isystem",
        "sys",
        "-std=c++17",
        "-O2",
        "-arch=sm_90",
        "--expt-relaxed-constexpr",
        "--extended-lambda",
        "-Xcompiler",
        "-fPIC,-Wall",
        "-MD",
        "-MT",
        "obj/k.o",
        "-MF",
        "obj/k.o.d",
        "-lineinfo",
    )
    (job,) = plan.jobs
    assert job.source == "/build/k.cu" and job.obj == "/build/obj/k.o"
    assert job.arch == "sm_90" and job.targets == ("sm_90", "compute_90") and not job.rdc
    argv = list(job.argv)
    for expected in (
        "--cuda-device-only",
        "-emit-llvm",
        "-DFOO=1",
        "-DBAR",
        "-Iinc",
        "-I/abs/inc",
        "-std=c++17",
        "-O3",
        "--cuda-gpu-arch=sm_90",
        "-Wno-unknown-cuda-version",
    ):
        assert expected in argv
    assert argv[argv.index("-isystem") + 1] == "sys"
    assert argv[argv.index("-idirafter") + 1] == "/standins"
    for host_only in ("-fPIC,-Wall", "-MD", "-MF", "obj/k.o.d", "-lineinfo", "-O2", "-o"):
        assert host_only not in argv
    assert argv[-1] == "k.cu" and plan.dropped == ()


def test_each_gencode_virtual_architecture_gets_its_own_bitcode():
    plan = nvcc_plan(
        "-c",
        "k.cu",
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=[sm_90a,compute_90a]",
        "--generate-code=arch=compute_80,code=sm_86",
    )
    assert [(j.arch, j.targets) for j in plan.jobs] == [
        ("sm_80", ("sm_80", "sm_86")),
        ("sm_90a", ("sm_90a", "compute_90a")),
    ]
    assert plan.jobs[0].obj == "/build/k.o"


def test_arch_with_code_list_and_comma_separated_archs():
    plan = nvcc_plan("-c", "k.cu", "-arch=compute_80", "-code=sm_80,sm_86")
    assert [(j.arch, j.targets) for j in plan.jobs] == [("sm_80", ("sm_80", "sm_86"))]
    plan = nvcc_plan("-c", "k.cu", "--gpu-architecture", "sm_80,sm_90")
    assert [j.arch for j in plan.jobs] == ["sm_80", "sm_90"]


def test_no_arch_flag_uses_nvcc_default_architecture():
    (job,) = nvcc_plan("-c", "k.cu").jobs
    assert job.arch == flags.nvcc_default_arch("nvcc") == "sm_75"  # CUDA 13


def test_arch_native_cannot_be_captured_and_says_so():
    plan = nvcc_plan("-c", "k.cu", "-arch=native")
    assert plan.jobs == () and "-arch=native" in plan.notes[0]


def test_rdc_in_every_spelling_adds_fgpu_rdc():
    for args in (["-rdc=true", "-c"], ["-rdc", "true", "-c"], ["--relocatable-device-code=true", "-c"], ["-dc"]):
        (job,) = nvcc_plan(*args, "k.cu", "-arch=sm_90").jobs
        assert job.rdc and "-fgpu-rdc" in job.argv, args
    (job,) = nvcc_plan("-rdc=false", "-c", "k.cu", "-arch=sm_90").jobs
    assert not job.rdc and "-fgpu-rdc" not in job.argv


def test_device_debug_keeps_ir_unoptimized_but_optimizable():
    (job,) = nvcc_plan("-G", "-c", "k.cu", "-arch=sm_90").jobs
    assert "-O0" in job.argv and "-disable-O0-optnone" in job.argv and "-O3" not in job.argv


def test_fast_math_flags_are_translated():
    (job,) = nvcc_plan("--use_fast_math", "-fmad=false", "-c", "k.cu", "-arch=sm_90").jobs
    assert {"-fgpu-flush-denormals-to-zero", "-fgpu-approx-transcendentals", "-ffp-contract=off"} <= set(job.argv)
    # nvcc's fast math swaps expf for __expf, tanhf for tanh.approx: clang's libdevice names are renamed so
    assert {"-D__nv_expf=__nv_fast_expf", "-D__nv_tanhf=__nv_fast_tanhf", "-D__nv_powf=__nv_fast_powf"} <= set(job.argv)
    # but it neither reassociates nor assumes finite values, as clang's -ffast-math would
    assert "-ffast-math" not in job.argv and "-ffinite-math-only" not in job.argv


def test_flags_clang_does_not_know_are_dropped_and_remembered_for_the_log():
    plan = nvcc_plan("-c", "k.cu", "-arch=sm_90", "--some-future-nvcc-flag", "-prec-div=false")
    assert set(plan.dropped) == {"--some-future-nvcc-flag", "-prec-div=false"}
    assert "--some-future-nvcc-flag" not in plan.jobs[0].argv


def test_x_cu_makes_a_cpp_file_device_code_and_plain_cpp_is_host_only():
    (job,) = nvcc_plan("-x", "cu", "-c", "k.cpp", "-arch=sm_90").jobs
    assert job.source == "/build/k.cpp"
    assert nvcc_plan("-c", "host.cpp", "-arch=sm_90").jobs == ()


def test_commands_that_do_not_compile_an_object_plan_nothing():
    for args in (
        ["k.cu", "-o", "app"],
        ["-ptx", "k.cu"],
        ["-dlink", "a.o", "b.o", "-o", "dl.o"],
        ["-E", "k.cu"],
        ["-M", "k.cu"],
        ["-cubin", "k.cu"],
    ):
        assert nvcc_plan(*args, "-arch=sm_90").jobs == (), args


def test_several_sources_without_output_name_objects_after_sources():
    plan = nvcc_plan("-c", "a.cu", "src/b.cu", "-arch=sm_90")
    assert [(j.source, j.obj) for j in plan.jobs] == [("/build/a.cu", "/build/a.o"), ("/build/src/b.cu", "/build/b.o")]


def test_cmake_options_file_is_read(tmp_path):
    (tmp_path / "includes.rsp").write_text('-I"/with space/inc" -DFROM_RSP\n')
    (job,) = nvcc_plan("--options-file", "includes.rsp", "-c", "k.cu", "-arch=sm_90", cwd=str(tmp_path)).jobs
    assert "-I/with space/inc" in job.argv and "-DFROM_RSP" in job.argv


def test_missing_response_file_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(UsageError, match="gone.rsp"):
        nvcc_plan("--options-file", "gone.rsp", "-c", "k.cu", cwd=str(tmp_path))


def test_clang_cuda_command_is_reused_with_outputs_replaced():
    plan = flags.plan(
        [
            "clang++-19",
            "-x",
            "cuda",
            "--cuda-gpu-arch=sm_80",
            "--offload-arch=sm_90",
            "-O2",
            "-Iinc",
            "-MD",
            "-MF",
            "k.d",
            "-c",
            "k.cu",
            "-o",
            "k.o",
            "-fgpu-rdc",
        ],
        "/b",
    )
    assert [j.arch for j in plan.jobs] == ["sm_80", "sm_90"]
    argv = list(plan.jobs[1].argv)
    assert argv[:2] == ["clang++-19", "-x"] and "--cuda-gpu-arch=sm_90" in argv and "-Iinc" in argv
    assert plan.jobs[0].rdc and "-fgpu-rdc" in argv
    assert not {"-MD", "-MF", "k.d", "-o", "k.o", "--offload-arch=sm_90"} & set(argv[:-2])


def test_clang_at_O0_keeps_the_ir_optimizable():
    (job,) = flags.plan(["clang++", "-c", "k.cu", "--cuda-gpu-arch=sm_90"], "/b").jobs
    assert "-disable-O0-optnone" in job.argv


def test_hipcc_treats_cpp_sources_as_hip():
    (job,) = flags.plan(["hipcc", "--offload-arch=gfx942", "-c", "k.cpp", "-o", "k.o"], "/b").jobs
    assert job.language == "hip" and job.arch == "gfx942" and "--offload-arch=gfx942" in job.argv


def test_host_only_commands_plan_nothing():
    assert flags.plan(["g++", "-c", "a.cpp"], "/b").jobs == ()
    assert flags.plan(["clang++-19", "-c", "a.cpp"], "/b").jobs == ()
    assert flags.plan(["clang++-19", "--cuda-host-only", "-c", "k.cu"], "/b").jobs == ()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_toolkit_is_found_behind_an_nvcc_wrapper_script(tmp_path):
    real = os.path.realpath(shutil.which("nvcc"))
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    toolkit = flags.cuda_root_of(str(wrapper))
    assert toolkit is not None and os.path.exists(os.path.join(toolkit, "include", "cuda_runtime.h"))
    assert os.path.realpath(toolkit) == os.path.realpath(flags.cuda_root_of(real))
