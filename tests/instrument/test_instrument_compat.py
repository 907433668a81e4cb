"""`mneme-cc` keeps IR for code nvcc compiles and clang rejects: the compatibility retry (issue 28, point 3)."""

from __future__ import annotations

import subprocess
import sys

from skips import needs

from mneme.instrument import compat
from mneme.instrument.launcher import write_standins
from mneme.instrument.section import read_entries

pytestmark = needs("nvcc", "clang++-19", "llvm-objcopy-19")

LAUNCHER = [sys.executable, "-m", "mneme.instrument.launcher"]

# nvcc declares host min/max overloads for mixed operand types; clang's CUDA headers do not
MIXED_MIN_MAX = """
__global__ void relu(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = max(x[i], 0.0f);
}
static unsigned clamp_blocks(int n, unsigned limit) { return min(n / 256 + 1, limit); }
static double widest(float a, double b) { return max(a, b) + min(3L, 4UL); }
void launch(float* x, int n) { relu<<<clamp_blocks(n, 65535u), 256>>>(x, (int)widest(1.0f, n)); }
"""
# a constexpr function that can never be a constant expression: an error in clang, accepted by nvcc
CONSTEXPR = """
__device__ constexpr float log10_inv() { return 1.f / ::log(10.f); }  // as PyCUDA's complex header has it
extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= log10_inv(); }
"""


def _build(tmp_path, name: str, source: str) -> subprocess.CompletedProcess:
    (tmp_path / f"{name}.cu").write_text(source)
    return subprocess.run(
        [*LAUNCHER, "nvcc", "-arch=sm_90", "-c", f"{name}.cu", "-o", f"{name}.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def test_host_min_max_of_mixed_types_gets_ir_through_the_compatibility_prelude(tmp_path):
    clang = subprocess.run(
        [
            "clang++-19",
            "-x",
            "cuda",
            "--cuda-device-only",
            "-fsyntax-only",
            "--cuda-gpu-arch=sm_90",
            "-Wno-unknown-cuda-version",
            "-idirafter",
            write_standins(str(tmp_path)),
            "-",
        ],
        input=MIXED_MIN_MAX,
        capture_output=True,
        text=True,
    )
    assert "no matching function for call to 'min'" in clang.stderr  # what the retry is for
    done = _build(tmp_path, "mixed", MIXED_MIN_MAX)
    assert done.returncode == 0, done.stderr
    assert "workarounds" in done.stderr and "compatibility prelude" in done.stderr
    entries = read_entries(str(tmp_path / "mixed.o"))
    assert [e.kernels for e in entries] == [("_Z4reluPfi",)]
    assert "compatibility prelude" in entries[0].producer


def test_an_invalid_constexpr_function_is_retried_without_that_error(tmp_path):
    done = _build(tmp_path, "constexpr", CONSTEXPR)
    assert done.returncode == 0, done.stderr
    assert "-Wno-invalid-constexpr" in done.stderr
    assert [e.kernels for e in read_entries(str(tmp_path / "constexpr.o"))] == [("scale",)]


def test_only_the_workarounds_an_error_calls_for_are_chosen():
    message = "a.cu:3:50: error: no matching function for call to 'max'\nb.cu:1:1: error: foo [-Wregister]"
    assert [w.name for w in compat.needed(message, "cuda")] == [compat.WORKAROUNDS[0].name, "-Wno-register"]
    assert compat.needed("error: unknown type name 'texture'", "cuda") == ()
    argv = compat.with_workarounds(("clang++", "-c", "k.cu"), compat.needed(message, "cuda"))
    assert argv[-1] == "k.cu" and "-include" in argv and "-Wno-register" in argv


def test_a_retry_that_still_fails_reports_what_it_tried_and_clangs_last_error(tmp_path):
    source = tmp_path / "both.cu"
    source.write_text(MIXED_MIN_MAX + "__global__ void bad() { undeclared_name(); }\n")
    argv = (
        "clang++-19",
        "-x",
        "cuda",
        "--cuda-device-only",
        "-emit-llvm",
        "-c",
        "-w",
        "--cuda-gpu-arch=sm_90",
        "-Wno-unknown-cuda-version",
        "-idirafter",
        write_standins(str(tmp_path)),
        str(source),
    )
    first = subprocess.run([*argv, "-o", str(tmp_path / "b.bc")], capture_output=True, text=True)
    built, applied, message = compat.retry(argv, str(tmp_path / "b.bc"), "cuda", first.stderr)
    assert not built and [w.name for w in applied] == [compat.WORKAROUNDS[0].name]
    assert "undeclared_name" in message and "no matching function" not in message
