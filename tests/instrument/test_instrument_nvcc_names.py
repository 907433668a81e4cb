"""Kernels with internal linkage get nvcc's names in the embedded IR, so recordings find their IR (issue 28, point 3)."""

from __future__ import annotations

import subprocess
import sys

from skips import needs

from mneme.core.demangle import demangle, demangle_all
from mneme.instrument import nvcc_names
from mneme.instrument.fatbin import iter_cubins, kernel_names
from mneme.instrument.section import read_entries

LAUNCHER = [sys.executable, "-m", "mneme.instrument.launcher"]

SOURCE = """
static __device__ float twice(float x) { return 2 * x; }
typedef float (*op_t)(float);
template <op_t op> static __global__ void apply(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = op(x[i]);
}
static __global__ void scale(float* x, float s) { x[threadIdx.x] *= s; }
static __device__ void bump(float* x, int i) { x[i] += 1; }
// a non-type template parameter whose type depends on an earlier one: clang-19 mangles it with `Tn<type>`
template <typename T, void (*op)(T*, int)> static __global__ void apply_typed(T* x, int n) {
  if (threadIdx.x < n) op(x, threadIdx.x);
}
// a function argument of a function argument's template (llama.cpp's cpy_q_f32<cpy_blck_q_f32<dequantize_q4_0>>)
template <op_t op> static __device__ void apply_one(float* x, int i) { x[i] = op(x[i]); }
typedef void (*blk_t)(float*, int);
template <blk_t blk> static __global__ void nested(float* x) { blk(x, threadIdx.x); }
namespace { __global__ void hidden(int* x) { x[threadIdx.x] = 1; } }
__global__ void visible(int* x) { x[threadIdx.x] = 2; }
void launch(float* x, int* y) { apply<twice><<<1, 32>>>(x, 32); scale<<<1, 32>>>(x, 2.0f); hidden<<<1, 1>>>(y); visible<<<1, 1>>>(y);
                                apply_typed<float, bump><<<1, 32>>>(x, 32); nested<apply_one<twice>><<<1, 32>>>(x); }
"""


def test_nvcc_and_clang_names_of_one_kernel_have_one_key():
    assert nvcc_names.key("_ZL10arange_f32Pfiff") == nvcc_names.key("_Z10arange_f32Pfiff")
    nvcc = "_Z10k_get_rowsILi32ELi2EXadL_ZN41_INTERNAL_b98a36fb_10_getrows_cu_f63e7a9315dequantize_q5_1EPKvliR6float2EEiEvS2_PKiPT2_ll5uint3mmmmmmmmm"
    clang = "_ZL10k_get_rowsILi32ELi2EXadL_ZL15dequantize_q5_1PKvliR6float2EEiEvS1_PKiPT2_ll5uint3mmmmmmmmm"
    assert nvcc_names.key(nvcc) == nvcc_names.key(clang)
    assert nvcc_names.renames([clang, "_Z7visiblePi"], {nvcc, "_Z7visiblePi"}) == {clang: nvcc}
    # nested: the argument's own template names a function (llama.cpp's cpy.cu); clang writes both signatures
    nvcc = (
        "_Z9cpy_q_f32IXadL_ZN36_INTERNAL_b3409b51_6_cpy_cu_bfba63e214cpy_blck_q_f32IXadL_ZNS0_15dequantize_q4_0"
        "EPKvliR6float2EELi32EEEvPKcPcEELi32EEvS7_S8_lllllllllllllll"
    )
    clang = (
        "_ZL9cpy_q_f32IXadL_ZL14cpy_blck_q_f32IXadL_ZL15dequantize_q4_0PKvliR6float2EELi32EEvPKcPcEELi32EEvS6_S7_"
        "lllllllllllllll"
    )
    assert nvcc_names.key(nvcc) == nvcc_names.key(clang)
    assert nvcc_names.key(clang).startswith("void cpy_q_f32<&cpy_blck_q_f32<&dequantize_q4_0, 32>, 32>(")


@needs("llvm-cxxfilt-19")
def test_clangs_tn_template_argument_names_get_the_key_of_nvccs():
    # `Tn PFvPT_iE`: the C++ runtime's demangler cannot read it; llvm-cxxfilt can (mneme.core.demangle)
    clang = "_ZL11apply_typedIfTnPFvPT_iEXadL_ZL4bumpPfiEEEvS1_i"
    nvcc = "_Z11apply_typedIfXadL_ZN34_INTERNAL_72641b80_4_k_cu_d589cb604bumpEPfiEEEvPT_i"
    assert demangle(clang) == "void apply_typed<float, &bump(float*, int)>(float*, int)"
    assert nvcc_names.key(clang) == nvcc_names.key(nvcc) == "void apply_typed<float, &bump>(float*, int)"
    assert nvcc_names.renames([clang], {nvcc}) == {clang: nvcc}
    assert demangle_all([clang, "_Z1fv", "plain", "_Znot-mangled"]) == [
        demangle(clang),
        "f()",
        "plain",
        "_Znot-mangled",
    ]


@needs("nvcc", "clang++-19", "llvm-objcopy-19")
def test_static_and_anonymous_namespace_kernels_carry_nvccs_names(tmp_path):
    (tmp_path / "k.cu").write_text(SOURCE)
    done = subprocess.run(
        [*LAUNCHER, "nvcc", "-arch=sm_90", "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    by_nvcc = {k for cubin in iter_cubins(str(tmp_path / "k.o")) for k in kernel_names(cubin)}
    [entry] = read_entries(str(tmp_path / "k.o"))
    assert len(by_nvcc) == 6 and set(entry.kernels) == by_nvcc
