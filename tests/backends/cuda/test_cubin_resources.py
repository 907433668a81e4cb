"""Resources read from the cubin itself agree with `ptxas -v` of the same PTX, whichever assembler built it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme_cuda import codegen, cubin
from mneme_cuda.backend import CudaBackend
from mneme_cuda.target import target_machine

from mneme.core import build, ir
from mneme.core.errors import IRError, UsageError
from mneme.core.types import ExperimentConfiguration
from paths import DATA

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
BASE = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))
SOURCE = DATA / "realkernels" / "resources.cu"
KERNELS = ("transpose_tile", "convolve", "local_array", "many_live")


def _ptx(arch: str) -> str:
    """The PTX of the whole module (every kernel), as `ptxas -v` will see it."""
    module = ir.load(build_cuda_ir(SOURCE))
    CudaBackend().optimize(module, BASE, arch)
    machine = target_machine(arch)
    module.triple, module.data_layout = machine.triple, str(machine.target_data)
    return machine.emit_assembly(module)


def _ptxas_v(ptx: str, arch: str, tmp_path: Path, *flags: str) -> str:
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    proc = subprocess.run(
        [codegen.ptxas_path(), f"-arch={arch}", "-v", *flags, str(src), "-o", str(tmp_path / "o.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout + proc.stderr


def _section(report: str, kernel: str) -> str:
    start = report.index(f"Compiling entry function '{kernel}'")
    nxt = report.find("Compiling entry function", start + 10)
    return report[start : nxt if nxt > 0 else len(report)]


def _grab(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else 0


ASSEMBLERS = [
    "ptxas",
    pytest.param(
        "nvjitlink",
        marks=pytest.mark.skipif(
            codegen.ptx_assembler() != "nvjitlink",
            reason="nvJitLink (nvidia-nvjitlink + cuda-bindings) is not installed",
        ),
    ),
]


@pytest.mark.parametrize("assembler", ASSEMBLERS)
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_cubin_resources_match_ptxas_verbose(assembler, arch, tmp_path):
    ptx = _ptx(arch)
    report = _ptxas_v(ptx, arch, tmp_path)
    module_cmem = sum(int(n) for n, bank in re.findall(r"(\d+) bytes cmem\[(\d+)\]", report) if bank == "3")
    data, log, tool = codegen.assemble_ptx(ptx, arch, BASE, assembler=assembler)
    assert tool == assembler
    for kernel in KERNELS:
        section = _section(report, kernel)
        got = cubin.resources(data, kernel, log, tool)
        if assembler == "ptxas":  # the very same assembler: every number is ptxas -v's
            assert got.registers == _grab(r"Used (\d+) registers", section), kernel
            assert (got.spill_stores, got.spill_loads) == (
                _grab(r"(\d+) bytes spill stores", section),
                _grab(r"(\d+) bytes spill loads", section),
            ), kernel
        assert got.registers > 0
        assert got.shared_mem == _grab(r"(\d+) bytes smem", section), kernel
        assert got.local_mem == _grab(r"(\d+) bytes stack frame", section), kernel
        assert got.assembler.startswith(assembler + " 13."), got.assembler
    assert cubin.resources(data, "transpose_tile").shared_mem == 32 * 33 * 4
    assert cubin.resources(data, "convolve").const_mem == 17 * 4
    assert cubin.resources(data, "transpose_tile").const_mem == 17 * 4  # module-wide, as the driver reports it
    assert cubin.resources(data, "local_array").max_threads_per_block == 128
    assert cubin.resources(data, "convolve").max_threads_per_block == -1
    if arch == "sm_80":  # CUDA 13's ptxas prints the user constant bank there (not on sm_90)
        assert module_cmem == 17 * 4


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_the_assemblers_own_constant_bank_is_not_user_constant_memory(arch, tmp_path):
    # A kernel that reads a `__device__` global: standalone ptxas keeps the global's address in a bank of
    # its own (`.nv.constant4`; `ptxas -v` on sm_80: "16 bytes cmem[4]"), which nvJitLink resolves away.
    # The driver does not count it (CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES is 0 on an H100 for this very
    # cubin, benchmarks/results/gpu-results.md), and neither does const_mem: only the user bank, 3.
    module = ir.link([ir.load(build_cuda_ir(DATA / "kernels" / "device_global.cu"))], "add_bias", internalize=False)
    ptx = build.compile(module, "add_bias", BASE, arch, emit="ptx", cache=False).data.decode()
    data, log, tool = codegen.assemble_ptx(ptx, arch, BASE, name="add_bias", assembler="ptxas")
    assert cubin.Cubin(data).section(".nv.constant4") is not None  # the case this test is about
    if arch == "sm_80":
        assert re.search(r"\d+ bytes cmem\[4\]", _ptxas_v(ptx, arch, tmp_path))
    assert cubin.resources(data, "add_bias", log, tool).const_mem == 0


def test_both_assemblers_report_the_same_layout(tmp_path):
    if codegen.ptx_assembler() != "nvjitlink":
        pytest.skip("nvJitLink (nvidia-nvjitlink + cuda-bindings) is not installed")
    ptx = _ptx("sm_90")
    a, b = (
        cubin.resources(codegen.assemble_ptx(ptx, "sm_90", BASE, assembler=t)[0], "convolve")
        for t in ("ptxas", "nvjitlink")
    )
    for kernel in KERNELS:
        pa = cubin.Cubin(codegen.assemble_ptx(ptx, "sm_90", BASE, assembler="ptxas")[0]).resources(kernel)
        pb = cubin.Cubin(codegen.assemble_ptx(ptx, "sm_90", BASE, assembler="nvjitlink")[0]).resources(kernel)
        assert (pa.shared_mem, pa.const_mem, pa.local_mem) == (pb.shared_mem, pb.const_mem, pb.local_mem), kernel
    assert a.assembler.split()[0] == "ptxas" and b.assembler.split()[0] == "nvjitlink"


def test_compile_reports_the_assembler_and_cubin_resources():
    module = ir.load(build_cuda_ir(SOURCE))
    binary = build.compile(module, "transpose_tile", BASE, "sm_90", cache=False)
    # whole-program code (the default) comes from the ptxas executable where it is found
    expected = "ptxas" if codegen.ptxas_path() is not None else codegen.ptx_assembler()
    assert binary.resources.shared_mem == 4224 and binary.resources.assembler.split()[0] == expected
    conv = build.compile(module, "convolve", BASE, "sm_90", cache=False)
    assert conv.resources.const_mem == 68


@pytest.mark.parametrize("assembler", ASSEMBLERS)
def test_max_registers_below_the_floor_is_refused(assembler, monkeypatch):
    if assembler == "ptxas":
        monkeypatch.setenv("MNEME_PTX_ASSEMBLER", "ptxas")
        codegen._nvjitlink.cache_clear()
    try:
        module = ir.load(build_cuda_ir(SOURCE))
        with pytest.raises(UsageError, match=r"max_registers=16 is below sm_90's minimum of 24 .*--max-registers 24"):
            build.compile(module, "many_live", BASE.replace(max_registers=16), "sm_90", cache=False)
        assert (
            build.compile(module, "many_live", BASE.replace(max_registers=24), "sm_90", cache=False).resources.registers
            <= 24
        )
    finally:
        codegen._nvjitlink.cache_clear()


def test_a_non_cubin_or_unknown_kernel_is_an_irerror():
    with pytest.raises(IRError, match="not a readable cubin"):
        cubin.Cubin(b"not an elf at all")
    data, _, _ = codegen.assemble_ptx(_ptx("sm_90"), "sm_90", BASE, assembler="ptxas")
    with pytest.raises(IRError, match="no kernel 'nope'.*transpose_tile"):
        cubin.resources(data, "nope")


def test_ir_resources_shows_the_assembler_and_the_cubins_shared_memory():
    from click.testing import CliRunner

    from mneme.core.cli import cli

    path = str(build_cuda_ir(SOURCE))
    result = CliRunner().invoke(cli, ["ir", "resources", path, "-k", "transpose_tile", "--arch", "sm_90", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    expected = "ptxas" if codegen.ptxas_path() is not None else codegen.ptx_assembler()  # whole-program by default
    assert data["resources"]["shared_mem"] == 4224 and data["resources"]["assembler"].startswith(expected)
    table = CliRunner().invoke(cli, ["ir", "resources", path, "-k", "convolve", "--arch", "sm_90"])
    assert (
        table.exit_code == 0
        and "assembler" in table.stdout
        and re.search(r"constant memory \(bytes\)\s*│\s*68", table.stdout)
    )
