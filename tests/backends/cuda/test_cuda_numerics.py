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
from mneme.instrument.flags import FAST_MATH

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
    text = str(ir.load(build_cuda_ir(source, flags=FAST_MATH)))  # what mneme-cc passes for -use_fast_math
    module = ir.reparse(apply(text, fp), "sigmoid")
    ptx = build.compile(
        ir.link([module], "sigmoid", internalize=False), "sigmoid", CONFIG, "sm_90", emit="ptx", cache=False
    ).data.decode()
    assert not re.search(r"\bdiv\.rn\b", ptx) and re.search(r"\brcp\.approx\.ftz\.f32\b", ptx)
    # At nvcc's defaults the same source shows rcp.rn: IEEE division, which the rewrite then keeps.
    assert FpBehaviour.from_ptx(_nvcc_ptx(source, (), tmp_path)).div == "rn"


# One kernel per function nvcc's -use_fast_math swaps for an approximation, and sums where its fusion of
# a multiply from the swapped function with an add decides the bits (logf(x) + y: lg2.approx, then fma).
# k_lerp's product has two uses, as ggml RoPE's ramp_mix: nvcc keeps it a multiply, NVPTX would fuse it into both.
# (a * b - c * d is not among them: LLVM writes fma(a, b, -(c * d)) where nvcc leaves mul, mul, sub to ptxas,
# which fuses the same product; the SASS is the same, the PTX not.)
FAST_SOURCE = """#define K(name, expr) extern "C" __global__ void name(const float* a, const float* b, float* out, \\
  int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float x = a[i], y = b[i]; out[i] = (expr); } }
K(k_expf, expf(x))
K(k_exp10f, exp10f(x))
K(k_sinf, sinf(x))
K(k_cosf, cosf(x))
K(k_tanf, tanf(x))
K(k_tanhf, tanhf(x))
K(k_logf_plus, logf(x) + y)
K(k_log10f, log10f(x))
K(k_powf, powf(x, y))
K(k_reciprocal, 1.0f / x)
K(k_divide, x / y)
K(k_sqrtf, sqrtf(x))
K(k_silu, x / (1.0f + expf(-x)))
K(k_gelu, 0.5f * x * (1.0f + tanhf(0.79788456f * x * (1.0f + 0.044715f * x * x))))
K(k_rotate, x * cosf(y) + sinf(x) * y + expf(x * y + 1.0f))
K(k_lerp, expf(y) * (1.0f - x * y) + y * (x * y))
"""


def _f32_ops(ptx: str) -> dict[str, list[str]]:
    """Kernel -> its f32 arithmetic and approximation instructions, in order (moves, loads, stores left out)."""
    found = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\n\}", ptx, re.DOTALL):
        ops = re.findall(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)", m.group(2), re.MULTILINE)
        found[m.group(1)] = [
            op
            for op in ops
            if re.search(r"\.f32|\.ftz|approx", op) and op.split(".")[0] not in ("ld", "st", "mov", "cvta")
        ]
    return found


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="mneme-cc needs clang-19")
def test_fast_math_kernels_from_ir_compute_the_very_instructions_of_nvccs_binary(tmp_path):
    # ggml's softmax, GELU and RoPE (expf, tanhf, sinf/cosf under -use_fast_math) replayed from IR missed the
    # binary's bits: clang's libdevice expf, tanhf and powf were the accurate ones, nvcc's ex2.approx,
    # tanh.approx and lg2/ex2.approx. Built as an application is, one object gives both sides.
    import sys

    from mneme_cuda.numerics import ir_numerics

    from mneme.core.elf import ElfFile
    from mneme.instrument.fatbin import FATBIN_SECTION, entries
    from mneme.instrument.section import read_entries

    source, obj = tmp_path / "fast.cu", tmp_path / "fast.o"
    source.write_text(FAST_SOURCE)
    cmd = [sys.executable, "-m", "mneme.instrument.launcher", NVCC, "-arch=sm_90", "-use_fast_math", "-c"]
    subprocess.run([*cmd, str(source), "-o", str(obj)], check=True, capture_output=True)
    elf = ElfFile.read(obj)
    fatbin = bytes(elf.section_data(elf.sections_named(FATBIN_SECTION)[0]))
    nvcc = next(e for e in entries(fatbin, str(obj)) if e.kind == "ptx").image.split(b"\0", 1)[0].decode()
    (entry,) = [e for e in read_entries(str(obj)) if e.arch == "sm_90"]
    description, rewrite = ir_numerics(fatbin, "sm_90")
    assert description.startswith("nvcc ftz=true prec-div=approx prec-sqrt=false")
    module = ir.reparse(rewrite(str(ir.load(entry.bitcode, entry.source))), "fast")
    ours = {}
    for kernel in entry.kernels:
        # in LLVM's source order, as nvcc's PTX lists them (scheduling for registers reorders independent ones)
        source_order = CONFIG.replace(nvptx_sched4reg=False)
        ptx = build.compile(module, kernel, source_order, "sm_90", emit="ptx", cache=False).data.decode()
        ours.update({k: v for k, v in _f32_ops(ptx).items() if k == kernel})
    theirs = _f32_ops(nvcc)
    assert set(ours) == set(theirs) and len(theirs) == 16
    for kernel, ops in theirs.items():
        assert ours[kernel] == ops, kernel
    assert theirs["k_expf"] == ["mul.ftz.f32", "ex2.approx.ftz.f32"]
    assert theirs["k_tanhf"] == ["tanh.approx.f32"] and theirs["k_reciprocal"] == ["rcp.approx.ftz.f32"]
    assert "sin.approx.ftz.f32" in theirs["k_rotate"] and "fma.rn.ftz.f32" in theirs["k_logf_plus"]
    assert "sub.ftz.f32" in theirs["k_lerp"]  # 1.0f - x * y, not fused


def test_under_fmad_a_single_use_product_fuses_and_a_shared_one_stays_nvccs_multiply():
    text = """define float @f(float %a, float %b, float %c) {
  %m = fmul float %a, %b
    #dbg_value(float %m, !1, !DIExpression(), !2)
  %s = fadd float %m, %c
  %t = fmul contract float %a, %c
  %u = fadd contract float %t, %a
  %v = fsub float %t, %u
  %w = fadd float %v, %s
  ret float %w
}"""
    out = apply(text, FpBehaviour()).split("\n")
    assert out[1] == "  %m = fmul contract float %a, %b"  # libdevice's: one use (the debug record is none)
    assert out[3] == "  %s = fadd contract float %m, %c"
    assert out[4] == '  %t = call float asm "mul.f32 $0, $1, $2;", "=f,f,f"(float %a, float %c)'
    assert out[6] == "  %v = fsub contract float %t, %u"
    assert apply(text, FpBehaviour(fmad=False)).count("contract") == 0
