"""IR clang wrote for one sm_XX compiles for another: every function is generated for the architecture asked
for, under a PTX header that names it and the ISA its instructions need (mneme_cuda.target.retarget)."""

from __future__ import annotations

import re

import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme.core import build, ir
from mneme.core.errors import MnemeError
from mneme.core.types import ExperimentConfiguration
from mneme_cuda import codegen, target

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
CONFIG = ExperimentConfiguration(grid=(4, 1, 1), block=(128, 1, 1))
SOURCE = r"""
#include <cuda_bf16.h>
extern "C" __global__ void widen(const __nv_bfloat16* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]) * 2.0f;
}
"""


def _ir(tmp_path, arch: str):
    source = tmp_path / "widen.cu"
    source.write_text(SOURCE)
    return ir.link([build_cuda_ir(source, arch=arch)], "widen")


def _header(ptx: str) -> tuple[str, int]:
    version = re.search(r"^\.version (\d+)\.(\d+)$", ptx, re.MULTILINE)
    return re.search(r"^\.target (\w+)", ptx, re.MULTILINE).group(1), int(version.group(1)) * 10 + int(version.group(2))


@pytest.mark.parametrize("written, compiled", [("sm_90", "sm_80"), ("sm_80", "sm_90"), ("sm_90", "sm_90")])
def test_ir_for_one_architecture_compiles_for_another(tmp_path, written, compiled):
    module = _ir(tmp_path, written)
    wanted = target.required_ptx(module)
    assert wanted >= 70  # clang names the PTX ISA it wrote for
    ptx = build.compile(module, "widen", CONFIG, compiled, emit="ptx", cache=False).data.decode()
    arch, version = _header(ptx)
    assert arch == compiled and version >= wanted
    # assembles for that architecture (before: sm_90 IR for sm_80 carried bf16 conversions under `.version 7.0`)
    binary = build.compile(_ir(tmp_path, written), "widen", CONFIG, compiled, cache=False)
    assert binary.kind == "cubin" and binary.resources.registers > 0


def test_retarget_names_the_architecture_in_every_function_and_keeps_a_matching_module(tmp_path):
    module = _ir(tmp_path, "sm_90")
    assert target.retarget(module, "sm_90") is module  # nothing to change: the same module
    moved = target.retarget(module, "sm_80")
    text = str(moved)
    assert '"target-cpu"="sm_80"' in text and '"target-cpu"="sm_90"' not in text
    assert "+sm_80" in text and "+sm_90" not in text
    assert target.required_ptx(moved) == target.required_ptx(module)  # the ISA version is kept


def test_the_ptx_header_is_raised_to_the_isa_the_functions_need_never_lowered():
    ptx = ".version 7.0\n.target sm_80\n.address_size 64\n"
    assert target.raise_ptx_version(ptx, 85).startswith(".version 8.5\n")
    assert target.raise_ptx_version(ptx, 63) == ptx
    assert target.raise_ptx_version(ptx, 0) == ptx


def test_hopper_inline_ptx_of_a_newer_isa_assembles(tmp_path):
    # `elect.sync` is PTX ISA 8.0: clang's functions say +ptx85, LLVM's sm_90 header said `.version 7.8`,
    # and both assemblers refused the kernel before the header was raised to the functions' ISA
    source = tmp_path / "leader.cu"
    source.write_text(
        'extern "C" __global__ void leader(unsigned* out) {\n'
        "  unsigned is_leader;\n"
        '  asm volatile("{\\n\\t.reg .pred p;\\n\\telect.sync _|p, 0xffffffff;\\n\\t'
        'selp.u32 %0, 1, 0, p;\\n\\t}" : "=r"(is_leader));\n'
        "  out[threadIdx.x] = is_leader;\n}\n"
    )
    module = ir.link([build_cuda_ir(source)], "leader")
    ptx = build.compile(module, "leader", CONFIG, "sm_90", emit="ptx", cache=False).data.decode()
    assert "elect.sync" in ptx and _header(ptx) == ("sm_90", target.required_ptx(module))
    binary = build.compile(module, "leader", CONFIG, "sm_90", cache=False)
    assert binary.kind == "cubin" and binary.resources.registers > 0


@pytest.mark.parametrize(
    "assembler",
    [
        "ptxas",
        pytest.param(
            "nvjitlink",
            marks=pytest.mark.skipif(
                codegen.ptx_assembler() != "nvjitlink",
                reason="nvJitLink (nvidia-nvjitlink + cuda-bindings) is not installed",
            ),
        ),
    ],
)
def test_an_assembler_older_than_the_ptx_isa_says_what_to_install(assembler):
    ptx = ".version 9.9\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n"
    with pytest.raises(
        MnemeError,
        match=r"compiled for PTX ISA 9\.9 .* reads up to \d+\.\d+: (pip install -U "
        r"nvidia-nvjitlink|install a newer CUDA toolkit)",
    ):
        codegen.assemble_ptx(ptx, "sm_90", CONFIG, name="k", assembler=assembler)
