"""The application's floating-point behaviour, read from nvcc's PTX, given to the kernel's IR (issue 38, 4).

Each nvcc flag set compiles one kernel (a fused multiply-add candidate, a division, a square root) to
PTX; the behaviour read from it, applied to clang's IR of the same source, must make the project's
own code generation emit the same kinds of f32 instructions as nvcc did.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from irbuild import build_cuda_ir

recorder = pytest.importorskip("mneme_cuda.recorder")

from mneme_cuda.numerics import FpBehaviour, apply, recorded_behaviour

from mneme.core import build, ir
from mneme.core.records import RecordedExecution
from mneme.core.types import ExperimentConfiguration

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc: the CUDA toolkit")
SOURCE = """extern "C" __global__ void fp(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i] + a[i] / b[i] + sqrtf(b[i]);
}
"""
CONFIG = ExperimentConfiguration(grid=(4, 1, 1), block=(128, 1, 1))
FLAGS = {
    (): FpBehaviour(),
    ("-ftz=true",): FpBehaviour(ftz=True),
    ("-prec-div=false",): FpBehaviour(div="full"),
    ("-prec-sqrt=false",): FpBehaviour(sqrt="approx"),
    ("-fmad=false",): FpBehaviour(fmad=False),
    ("-use_fast_math",): FpBehaviour(ftz=True, div="approx", sqrt="approx"),
}


def _features(ptx: str) -> dict:
    """What of the f32 arithmetic the numerics decide: division and square-root kinds, flushing, fusion."""
    body = ptx[ptx.index(".entry") :]
    return {
        "div": sorted(set(re.findall(r"\bdiv\.(rn|full|approx)\b", body))),
        "sqrt": sorted(set(re.findall(r"\bsqrt\.(rn|approx)\b", body))),
        "ftz": ".ftz.f32" in body,
        "fma": re.search(r"\bfma\.rn(?:\.ftz)?\.f32\b", body) is not None,
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("fp") / "fp.cu"
    path.write_text(SOURCE)
    return path


def _nvcc_ptx(source: Path, flags, tmp_path: Path) -> str:
    out = tmp_path / "fp.ptx"
    subprocess.run([NVCC, "-arch=sm_90", "-ptx", *flags, "-o", str(out), str(source)], check=True, capture_output=True)
    return out.read_text()


def _clang_ptx(source: Path, fp: FpBehaviour | None) -> str:
    text = str(ir.load(build_cuda_ir(source)))
    module = ir.reparse(apply(text, fp) if fp else text, "fp")
    linked = ir.link([module], "fp", internalize=False)
    return build.compile(linked, "fp", CONFIG, "sm_90", emit="ptx", cache=False).data.decode()


@pytest.mark.parametrize("flags", list(FLAGS), ids=lambda f: " ".join(f) or "defaults")
def test_the_behaviour_of_each_nvcc_flag_set_is_read_from_its_ptx(source, tmp_path, flags):
    assert FpBehaviour.from_ptx(_nvcc_ptx(source, flags, tmp_path)) == FLAGS[flags]


@pytest.mark.parametrize("flags", list(FLAGS), ids=lambda f: " ".join(f) or "defaults")
def test_clangs_ir_given_that_behaviour_compiles_to_the_instructions_nvcc_chose(source, tmp_path, flags):
    nvcc = _nvcc_ptx(source, flags, tmp_path)
    assert _features(_clang_ptx(source, FpBehaviour.from_ptx(nvcc))) == _features(nvcc)


def test_without_it_clangs_square_root_is_not_nvccs_by_default(source, tmp_path):
    # The difference that made sqrtf kernels' IR variants miss the binary's bits: libdevice's path in
    # clang's IR takes sqrt.approx unless told __CUDA_PREC_SQRT; nvcc's default is sqrt.rn.
    assert _features(_clang_ptx(source, None))["sqrt"] == ["approx"]
    assert _features(_nvcc_ptx(source, (), tmp_path))["sqrt"] == ["rn"]


def test_finalize_stores_the_ir_with_the_numerics_of_the_recorded_fatbin(source, tmp_path):
    fatbin = tmp_path / "fp.fatbin"
    subprocess.run(
        [NVCC, "-fatbin", "-arch=sm_90", "-prec-div=false", "-o", str(fatbin), str(source)],
        check=True,
        capture_output=True,
    )
    assert recorded_behaviour(fatbin.read_bytes(), "sm_90") == FpBehaviour(div="full")
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "i.fatbin").write_bytes(fatbin.read_bytes())
    base = 0x153940000000
    args = struct.pack("<QQQi", base, base + (2 << 20), base + (4 << 20), 16)
    manifest = {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": "fp",
        "instance_key": "aa",
        "grid": [1, 1, 1],
        "block": [16, 1, 1],
        "shared_mem": 0,
        "va_base": base,
        "va_size": 1 << 40,
        "image": "images/i.fatbin",
        "image_kind": "fatbin",
        "args": args.hex(),
        "params": [[0, 8], [8, 8], [16, 8], [24, 4]],
        "regions": [[base, 64], [base + (2 << 20), 64], [base + (4 << 20), 64]],
        "globals": [],
    }
    folder = raw / "launch-1-000000"
    folder.mkdir()
    (folder / "prologue.bin").write_bytes(bytes(192))
    (folder / "epilogue.bin").write_bytes(bytes(128) + bytes(range(64)))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (db,) = recorder.finalize(raw, tmp_path / "db", [build_cuda_ir(source)], arch="sm_90")
    (module,) = RecordedExecution.from_json(db).llvm_files
    assert module.name.endswith(".numerics.bc")
    text = str(ir.load(module))
    assert 'asm "div.full.f32' in text and 'asm "sqrt.rn.f32' in text


def test_libdevice_approximations_flushing_on_their_own_do_not_read_as_ftz(tmp_path):
    # powf's expansion in nvcc's PTX holds rcp.approx.ftz and ex2.approx.ftz at nvcc's defaults (no -ftz):
    # reading them as -ftz=true would flush every f32 operation of the IR variant.
    source = tmp_path / "pow.cu"
    source.write_text(
        'extern "C" __global__ void p(const float* a, float* out) {\n'
        "  out[threadIdx.x] = powf(a[threadIdx.x], 1.5f) + a[threadIdx.x] * 2.0f;\n}\n"
    )
    defaults = _nvcc_ptx(source, (), tmp_path)
    assert re.search(r"\brcp\.approx\.ftz\.f32\b", defaults)  # what made the reading wrong before
    assert FpBehaviour.from_ptx(defaults) == FpBehaviour(ftz=False, div=None, sqrt=None)  # no division, no sqrt
    assert FpBehaviour.from_ptx(_nvcc_ptx(source, ("-ftz=true",), tmp_path)).ftz


def test_fast_math_reciprocals_are_left_as_clang_compiles_them_when_nvcc_shows_no_division(tmp_path):
    # -use_fast_math turns 1.0f / x into rcp.approx.ftz: nvcc's PTX divides nothing, so it says nothing of
    # -prec-div. Read as IEEE division before, it made every `fdiv fast` of clang's IR an inline div.rn.
    source = tmp_path / "sigmoid.cu"
    source.write_text(
        'extern "C" __global__ void sigmoid(const float* a, float* out) {\n'
        "  out[threadIdx.x] = 1.0f / (1.0f + expf(-a[threadIdx.x]));\n}\n"
    )
    nvcc = _nvcc_ptx(source, ("-use_fast_math",), tmp_path)
    assert not re.search(r"\bdiv\.", nvcc) and re.search(r"\brcp\.approx\.ftz\.f32\b", nvcc)
    fp = FpBehaviour.from_ptx(nvcc)
    assert fp == FpBehaviour(ftz=True, div=None, sqrt=None)
    fast = ("-ffast-math", "-fgpu-flush-denormals-to-zero", "-fgpu-approx-transcendentals")  # what mneme-cc passes
    text = str(ir.load(build_cuda_ir(source, flags=fast)))
    module = ir.reparse(apply(text, fp), "sigmoid")
    ptx = build.compile(
        ir.link([module], "sigmoid", internalize=False), "sigmoid", CONFIG, "sm_90", emit="ptx", cache=False
    ).data.decode()
    assert not re.search(r"\bdiv\.rn\b", ptx) and re.search(r"\brcp\.approx\.ftz\.f32\b", ptx)
    # At nvcc's defaults the same source shows rcp.rn: IEEE division, which the rewrite then keeps.
    assert FpBehaviour.from_ptx(_nvcc_ptx(source, (), tmp_path)).div == "rn"
