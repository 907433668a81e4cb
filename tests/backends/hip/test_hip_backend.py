"""The HIP backend (distribution mneme-hip): code generation for gfxNNN and its availability here."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from irbuild import build_hip_ir, hip_available

from mneme.core import build, ir
from mneme.core.backend import backend_for_arch, default_backend, get_backend
from mneme.core.cli import cli
from mneme.core.errors import MnemeError
from mneme.core.types import ExperimentConfiguration

needs_hip = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
BASE = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))


def test_hip_backend_is_installed_and_says_precisely_why_it_cannot_run_here():
    backend = get_backend("hip")
    availability = backend.availability()
    if availability.usable:
        pytest.skip("an AMD GPU is present: the backend is usable")
    assert not availability.usable
    assert any(
        why in availability.reason
        for why in ("hip-python is not installed", "libamdhip64", "needs ROCm 6.x", "no AMD GPU")
    )
    assert backend.device_count() == 0
    with pytest.raises(MnemeError, match="cannot open device 0: " + re.escape(availability.reason)):
        backend.open_device(0)
    assert default_backend().name != "hip"


def test_plugins_lists_the_hip_backend_with_its_reason():
    reason = get_backend("hip").availability().reason
    result = CliRunner().invoke(cli, ["plugins"], env={"COLUMNS": "400"}, catch_exceptions=False)
    (line,) = [line for line in result.output.splitlines() if " hip " in line and "backend" in line]
    assert "mneme-hip" in line and ("usable" in line if not reason else reason[:40] in line)


def test_hip_claims_gfx_architectures_only():
    backend = get_backend("hip")
    assert backend.claims("gfx90a") and backend.claims("gfx1100") and not backend.claims("sm_90")
    assert backend_for_arch("gfx942").name == "hip"


@needs_hip
@pytest.mark.parametrize(
    "emit,kind,magic", [("hsaco", "hsaco", b"\x7fELF"), ("object", "object", b"\x7fELF"), ("asm", "asm", b"\t.")]
)
def test_hip_backend_compiles_each_output_kind(emit, kind, magic):
    module = ir.link([build_hip_ir("reduce_sum")], "reduce_sum")
    binary = build.compile(module, "reduce_sum", BASE, "gfx90a", emit=emit, cache=False)
    assert binary.backend == "hip" and binary.kind == kind and binary.data.startswith(magic)
    assert binary.variant_hash and "optimize" in binary.stage_times and "codegen" in binary.stage_times
    if kind == "hsaco":
        assert binary.resources.shared_mem == 1024 and binary.resources.registers > 0


@needs_hip
def test_hip_backend_refuses_an_output_it_cannot_make():
    module = ir.link([build_hip_ir("saxpy")], "saxpy")
    with pytest.raises(MnemeError, match="the hip backend cannot emit 'cubin' for gfx90a; choose one of hsaco"):
        build.compile(module, "saxpy", BASE, "gfx90a", emit="cubin", cache=False)


@needs_hip
def test_ir_built_for_one_gfx_is_generated_for_the_one_compiled_for():
    # gfx90a IR compiled for gfx942: every function names gfx942, so the machine code is gfx942's
    module = ir.link([build_hip_ir("saxpy", arch="gfx90a")], "saxpy")
    from mneme_hip import codegen

    moved = codegen.retarget(module, "gfx942")
    assert {cpu for cpu, _ in ir.function_targets(moved)} == {"gfx942"}
    assert codegen.retarget(moved, "gfx942") is moved  # nothing left to change
    asm = build.compile(module, "saxpy", BASE, "gfx942", emit="asm", cache=False).data.decode()
    assert '.amdgcn_target "amdgcn-amd-amdhsa--gfx942' in asm and "gfx90a" not in asm
    assert build.compile(module, "saxpy", BASE, "gfx942", cache=False).resources.registers > 0


@needs_hip
def test_ir_keeps_its_wavefront_size_where_the_target_can_run_it_and_is_refused_where_not():
    # gfx90a IR (wave64) on gfx1100: RDNA runs wave64 too, and the code may rely on warpSize == 64
    module = ir.link([build_hip_ir("saxpy", arch="gfx90a")], "saxpy")
    asm = build.compile(module, "saxpy", BASE, "gfx1100", emit="asm", cache=False).data.decode()
    assert re.search(r"\.amdhsa_wavefront_size32 0", asm) and '"amdgcn-amd-amdhsa--gfx1100"' in asm
    # IR as clang writes it for gfx1100 (wave32; this machine's ROCm device libraries lack gfx1100) on gfx90a,
    # which runs wave64 only
    module = ir.retarget_functions(module, "gfx1100", lambda _features: ["+wavefrontsize32"], "gfx1100 IR")
    with pytest.raises(
        MnemeError,
        match=r"built for gfx1100 with wavefront size 32, which gfx90a \(wavefront size "
        r"64 only\) cannot run.*hipcc --offload-arch=gfx90a",
    ):
        build.compile(module, "saxpy", BASE, "gfx90a", cache=False)


def test_wavefront_sizes_by_architecture_and_feature():
    from mneme_hip.codegen import wavefront_size

    assert [wavefront_size(a) for a in ("gfx90a", "gfx942", "gfx908", "gfx1030", "gfx1100", "gfx1201")] == [
        64,
        64,
        64,
        32,
        32,
        32,
    ]
    assert wavefront_size("gfx1100", ["+wavefrontsize64"]) == 64 and wavefront_size("gfx90a:xnack+") == 64
    assert wavefront_size("gfx11-generic") == 32 and wavefront_size("gfx9-4-generic") == 64
    with pytest.raises(MnemeError, match="cannot tell the generation of AMD GPU 'gfxzz'"):
        wavefront_size("gfxzz")
