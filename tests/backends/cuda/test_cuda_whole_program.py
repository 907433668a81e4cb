"""Whole-program machine code, a CUDA knob (`ptxas_whole_program`), as nvcc makes an application's without -rdc.

nvJitLink compiles PTX only as relocatable code: ptxas then cannot rely on every thread of a warp reaching a warp
shuffle or an aligned barrier together, guards them (`BRA.DIV`, `WARPSYNC`) and may hold more registers. llama.cpp's
soft_max_f32 from IR: 32 registers and 392 SASS instructions (15 of them divergence guards) relocatable, 30 and 376
whole-program; nvcc's own PTX 24/392 whole-program, 26/416 relocatable (docs/design/investigations/
ir-vs-nvcc-2026-12-06.md).
"""

from __future__ import annotations

import pytest
from irbuild import build_cuda_ir

codegen = pytest.importorskip("mneme_cuda.codegen")

from mneme.core import build, ir
from mneme.core.types import ExperimentConfiguration

# llama.cpp's softmax shape: a row's values kept in shared memory, a block-wide max and sum through warp shuffles
# and a barrier, loops that stop at the row's end.
SOURCE = r"""
__device__ float block_max(float m, float *buf) {
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  if (blockDim.x > 32) {
    if (threadIdx.x % 32 == 0) buf[threadIdx.x / 32] = m;
    __syncthreads();
    m = buf[threadIdx.x % 32];
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  }
  return m;
}
extern "C" __global__ void row_softmax(const float *x, float *dst, int cols, float scale) {
  extern __shared__ float smem[];
  float *vals = smem + 32;
  x += (long)blockIdx.x * cols;
  dst += (long)blockIdx.x * cols;
  float m = -INFINITY;
  for (int c0 = 0; c0 < cols; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    if (c >= cols) break;
    const float v = x[c] * scale;
    vals[c] = v;
    m = fmaxf(m, v);
  }
  m = block_max(m, smem);
  float sum = 0.0f;
  for (int c0 = 0; c0 < cols; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    if (c >= cols) break;
    const float e = __expf(vals[c] - m);
    sum += e;
    vals[c] = e;
  }
  __syncthreads();
  sum = -block_max(-sum, smem);
  for (int c0 = 0; c0 < cols; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    if (c >= cols) return;
    dst[c] = vals[c] / sum;
  }
}
"""


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    source = tmp_path_factory.mktemp("whole") / "row_softmax.cu"
    source.write_text(SOURCE)
    return ir.link([ir.load(build_cuda_ir(source))], "row_softmax", internalize=False)


CONFIG = ExperimentConfiguration(grid=(256, 1, 1), block=(1024, 1, 1))


def _cubin(module, **fields):
    return build.compile(module, "row_softmax", CONFIG.replace(**fields), "sm_90", emit="cubin", cache=False)


@pytest.mark.skipif(codegen.ptxas_path() is None, reason="needs the ptxas executable (CUDA toolkit)")
def test_whole_program_code_comes_from_the_ptxas_executable_and_matches_its_own_build(module):
    assert CONFIG.ptxas_whole_program is True  # the default: whole-program code where ptxas is found
    whole = _cubin(module)
    assert whole.resources.assembler.split()[0] == "ptxas"
    ptx = build.compile(module, "row_softmax", CONFIG, "sm_90", emit="ptx", cache=False).data.decode()
    cubin, _report, tool = codegen.assemble_ptx(ptx, "sm_90", CONFIG, name="row_softmax", assembler="ptxas")
    assert tool == "ptxas" and whole.data == cubin  # the ptxas executable's default: a whole program


@pytest.mark.skipif(
    codegen.ptxas_path() is None or codegen.ptx_assembler() != "nvjitlink",
    reason="needs both the ptxas executable and nvJitLink (pip install nvidia-nvjitlink cuda-bindings)",
)
def test_whole_program_code_of_a_block_reduction_needs_fewer_registers_than_relocatable_code(module):
    relocatable, whole = _cubin(module, ptxas_whole_program=False), _cubin(module)
    assert relocatable.resources.assembler.split()[0] == "nvjitlink"
    assert whole.resources.registers < relocatable.resources.registers  # 21 against 28 with CUDA 13's tools
    assert len(whole.data) < len(relocatable.data)
