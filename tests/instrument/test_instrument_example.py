"""examples/cuda_vecadd: CMake + nvcc through `mneme-cc`, then `list` and `extract` the IR.

The extracted kernels' parameters must match those nvcc compiled into the executable's cubin
(`EIATTR_KPARAM_INFO` records of the cubin's `.nv.info.<kernel>` section, read by
`mneme.instrument.fatbin`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skips import needs

from mneme.instrument.fatbin import find_kernel_params
from paths import ROOT

EXAMPLE = ROOT / "examples" / "cuda_vecadd"
MNEME = [sys.executable, "-m", "mneme"]
KERNELS = {"_Z6vecaddPKfS0_Pfi": "kernels.cu", "_Z4axpyIfEvT_PKS0_PS0_i": "main.cu"}

pytestmark = needs("cmake", "nvcc", "clang++-19")


def cubin_param_sizes(binary: Path, kernel: str) -> list[int]:
    return [p.size for p in find_kernel_params(binary, kernel)]


def ir_param_sizes(path: Path, kernel: str) -> list[int]:
    import llvmlite.binding as llvm

    mod = llvm.parse_bitcode(path.read_bytes())
    target = llvm.create_target_data(mod.data_layout)
    return [target.get_abi_size(arg.type) for arg in mod.get_function(kernel).arguments]


@pytest.fixture(scope="module")
def vecadd_app(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("cuda_vecadd_build")
    launcher = shutil.which("mneme-cc") or f"{sys.executable};-m;mneme.instrument.launcher"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(EXAMPLE), "-B", str(build), *generator, f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"],
        check=True,
        capture_output=True,
    )
    built = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "mneme-cc: warning" not in built.stdout + built.stderr
    return build / "vecadd"


def test_list_shows_every_kernel_with_its_architecture_and_source(vecadd_app):
    out = subprocess.run(
        [*MNEME, "ir", "list", "--json", str(vecadd_app)], capture_output=True, text=True, check=True
    ).stdout
    rows = {r["kernel"]: r for r in map(json.loads, out.splitlines())}
    assert set(rows) == set(KERNELS)
    for kernel, source in KERNELS.items():
        assert rows[kernel]["arch"] == "sm_90"
        assert Path(rows[kernel]["source"]) == EXAMPLE / source
    assert rows["_Z4axpyIfEvT_PKS0_PS0_i"]["demangled"] == "void axpy<float>(float, float const*, float*, int)"


def test_extracted_kernels_have_the_parameters_of_the_compiled_binary(vecadd_app, tmp_path):
    for kernel, short in (("_Z6vecaddPKfS0_Pfi", "vecadd"), ("_Z4axpyIfEvT_PKS0_PS0_i", "axpy<float>")):
        out = tmp_path / f"{short}.bc"
        subprocess.run(
            [*MNEME, "ir", "extract", str(vecadd_app), short, "-o", str(out)], check=True, capture_output=True
        )
        from_ir = ir_param_sizes(out, kernel)
        assert from_ir == cubin_param_sizes(vecadd_app, kernel)
    assert ir_param_sizes(tmp_path / "vecadd.bc", "_Z6vecaddPKfS0_Pfi") == [8, 8, 8, 4]
    assert ir_param_sizes(tmp_path / "axpy<float>.bc", "_Z4axpyIfEvT_PKS0_PS0_i") == [4, 8, 8, 4]


def test_extract_of_an_unknown_kernel_names_the_ones_there(vecadd_app, tmp_path):
    result = subprocess.run(
        [*MNEME, "ir", "extract", str(vecadd_app), "saxpy", "-o", str(tmp_path / "x.bc")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "no kernel 'saxpy'" in result.stderr and "vecadd(float const*" in result.stderr
    assert not (tmp_path / "x.bc").exists()
