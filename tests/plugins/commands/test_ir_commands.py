"""The `mneme ir` commands on real corpus IR and on a recording database."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from irbuild import build_cuda_ir, build_hip_ir, cuda_available, hip_available

from mneme.core import ir
from mneme.core.cli import cli

needs_hip = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, ["ir", *args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_passes_lists_the_registry_levels_and_transforms():
    data = json.loads(run("passes", "--json").stdout)
    assert "instcombine" in data["passes"] and "default<Oz>" in data["levels"]
    assert "specialize_dims" in data["transforms"]
    assert "sroa" in run("passes").stdout


def test_show_prints_the_transformed_ir():
    path = str(build_cuda_ir("saxpy"))
    out = run("show", path, "--specialize-dims", "--grid", "8", "--block", "128", "--optimized").stdout
    assert "define" in out and "@saxpy" in out and "sreg.ntid" not in out


def test_show_with_an_argument_value_folds_it(tmp_path):
    path = str(build_cuda_ir("saxpy"))
    out = run("show", path, "--specialize", "--arg", "0=4096", "--arg", "1=2.5", "--optimized").stdout
    assert "4096" in out and "2.500000e+00" in out


def test_compile_writes_ptx_and_cubin(tmp_path):
    path = str(build_cuda_ir("reduce_sum"))
    ptx = tmp_path / "k.ptx"
    run("compile", path, "--emit", "ptx", "--launch-bounds", "256,2", "-o", str(ptx))
    assert ".maxntid 256" in ptx.read_text()
    cubin = tmp_path / "k.cubin"
    result = run("compile", path, "--arch", "sm_90", "-o", str(cubin))
    assert cubin.read_bytes()[:4] == b"\x7fELF" and "registers" in result.stderr


@needs_hip
def test_compile_writes_an_amdgpu_code_object(tmp_path):
    out = tmp_path / "k.hsaco"
    result = run("compile", str(build_hip_ir("reduce_sum")), "--arch", "gfx90a", "--emit", "hsaco", "-o", str(out))
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert "(gfx90a, hip backend, hsaco)" in result.stderr and "registers" in result.stderr


@needs_hip
def test_compile_for_gfx942_writes_a_gfx942_code_object(tmp_path):
    # Debian's ROCm device libraries have no gfx942 ISA file for clang; the gfx90a IR is retargeted
    out = tmp_path / "k.hsaco"
    ir_path = str(build_hip_ir("warp_reduce"))
    result = run("compile", ir_path, "--arch", "gfx942", "--emit", "hsaco", "-o", str(out))
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and data[18:20] == (224).to_bytes(2, "little")  # EM_AMDGPU
    assert int.from_bytes(data[48:52], "little") & 0xFF == 0x4C  # EF_AMDGPU_MACH_AMDGCN_GFX942
    assert "(gfx942, hip backend, hsaco)" in result.stderr


def test_compile_for_an_nvidia_arch_goes_through_the_cuda_backend(tmp_path):
    out = tmp_path / "k.cubin"
    result = run("compile", str(build_cuda_ir("saxpy")), "--arch", "sm_90", "-o", str(out))
    assert "(sm_90, cuda backend, cubin)" in result.stderr and out.read_bytes()[:4] == b"\x7fELF"


def test_an_arch_no_installed_backend_claims_names_the_installed_backends():
    result = run("compile", str(build_cuda_ir("saxpy")), "--arch", "riscv64", ok=False)
    assert result.exit_code == 2
    assert "unknown architecture 'riscv64'" in result.output and "installed backends: cuda, hip, host" in result.output


@needs_hip
def test_without_the_hip_backend_gfx_architectures_are_unclaimed(monkeypatch):
    from mneme.core import plugins

    path = str(build_hip_ir("saxpy"))
    monkeypatch.setenv("MNEME_DISABLE_PLUGINS", "hip")  # as `mneme -p no:hip`, for this test only
    plugins.reset()
    try:
        result = run("compile", path, "--arch", "gfx90a", "--emit", "hsaco", ok=False)
    finally:
        monkeypatch.delenv("MNEME_DISABLE_PLUGINS")
        plugins.reset()
    assert result.exit_code == 2 and "installed backends: cuda, host" in result.output


def test_resources_reports_registers_and_shared_memory():
    data = json.loads(run("resources", str(build_cuda_ir("reduce_sum")), "--json").stdout)
    assert data["resources"]["shared_mem"] == 1024 and data["resources"]["registers"] > 0
    assert "assemble" in data["stage_times"]


def test_show_reads_a_tuning_runs_best_json_and_a_yaml_configuration_as_replay_does(tmp_path):
    path = str(build_cuda_ir("saxpy"))
    best = tmp_path / "best.json"  # as `mneme tune` writes it: the fields under "config"
    best.write_text(
        json.dumps({"config": {"specialize_dims": True, "grid": [8, 1, 1], "block": [128, 1, 1]}, "time": 1e-6})
    )
    yaml = tmp_path / "config.yaml"
    yaml.write_text("specialize_dims: true\ngrid: [8, 1, 1]\nblock: [128, 1, 1]\n")
    for config in (best, yaml):
        out = run("show", path, "--config", str(config), "--optimized").stdout
        assert "@saxpy" in out and "sreg.ntid" not in out


def test_diff_shows_two_configurations_side_by_side():
    out = run(
        "diff",
        str(build_cuda_ir("saxpy")),
        "--grid",
        "8",
        "--block",
        "128",
        "-a",
        "specialize_dims=false",
        "-b",
        "specialize_dims=true",
    ).stdout
    assert "config: specialize_dims" in out and "--- A.ptx" in out and re.search(r"^-.*%ntid", out, re.MULTILINE)


def test_several_kernels_need_a_kernel_name():
    result = run("show", str(build_cuda_ir("scale_template")), ok=False)
    assert result.exit_code == 2 and "pick one with --kernel" in result.output
    assert (
        "_Z5scaleIiEvPT_S0_i" in run("show", str(build_cuda_ir("scale_template")), "-k", "_Z5scaleIiEvPT_S0_i").stdout
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--passes", "sroa,bogus"], "unknown pass 'bogus'"),
        (["--launch-bounds", "2048"], "max threads must be 1..1024"),
        (["-k", "nope"], "kernels present: saxpy"),
        (["--arch", "sm_90x"], "unknown architecture"),
        (["--specialize"], "no recorded argument bytes"),
    ],
)
def test_bad_options_print_one_line_errors(args, message):
    result = run("compile", str(build_cuda_ir("saxpy")), "--emit", "ptx", *args, ok=False)
    assert result.exit_code != 0 and message in result.output
    assert "Traceback" not in result.output


def test_malformed_ir_file_is_named_in_the_error(tmp_path):
    bad = tmp_path / "bad.ll"
    bad.write_text("define void @k( {\n")
    result = run("show", str(bad), ok=False)
    assert result.exit_code == 2 and "bad.ll: malformed LLVM IR" in result.output


def test_a_recording_database_supplies_kernel_launch_and_arguments(tmp_path):
    from mneme.core.records import ArgInfo, RecordedExecution
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    ll = tmp_path / "saxpy.ll"
    ll.write_text(build_cuda_ir("saxpy").read_text())
    mod = ir.load(ll)
    params = ir.kernel_params(mod, "saxpy")
    args = (1000).to_bytes(4, "little") + bytes.fromhex("00002040") + (0x7000).to_bytes(8, "little") * 2
    rec = RecordedExecution.create(
        tmp_path,
        kernel_name="saxpy",
        static_hash=ir.module_hash(mod)[:16],
        backend="cuda",
        arch="sm_90",
        modules=[ll],
        args=[ArgInfo(f"a{p.index}", p.offset, p.size, p.kind, True) for p in params],
    )
    for kind, name in ((SnapshotType.PROLOGUE, "pro.mneme"), (SnapshotType.EPILOGUE, "epi.mneme")):
        with SnapshotWriter(tmp_path / name, kind, static_hash=rec.static_hash, dynamic_hash="d") as w:
            w.set_args(args)
    rec.add_instance(
        grid=(4, 1, 1),
        block=(256, 1, 1),
        shared_mem=0,
        args=args,
        prologue=tmp_path / "pro.mneme",
        epilogue=tmp_path / "epi.mneme",
    )
    db = tmp_path / f"{rec.static_hash}.json"
    rec.to_json(db)
    out = run("compile", "-rdb", str(db), "--emit", "ptx", "--specialize", "--specialize-dims").stdout
    body = out.split("{", 1)[1]
    assert "%ntid" not in body and "ld.param" not in body
    assert re.search(r"\b(1000|999);", body)


def test_compiling_for_an_nvidia_arch_imports_no_other_backend_and_no_device_half(tmp_path):
    import subprocess
    import sys

    probe = (
        "import json, sys\nfrom mneme.core.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit as done:\n    assert not done.code, done.code\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    out = tmp_path / "k.cubin"
    proc = subprocess.run(
        [sys.executable, "-c", probe, "ir", "compile", str(build_cuda_ir("saxpy")), "--arch", "sm_90", "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert out.read_bytes()[:4] == b"\x7fELF"
    loaded = {
        "mneme.plugins.backends.host.backend",
        "mneme_hip.backend",
        "mneme_cuda.device",
        "numpy",
        "mneme.core.snapshot",
        "mneme.core.records",
        "mneme.plugins.check_commands",
    } & modules
    assert loaded == set()
