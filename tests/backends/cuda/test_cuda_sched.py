"""NVPTX's scheduling preference, a CUDA knob (`nvptx_sched4reg`): the order of the PTX, not its instructions.

ptxas largely keeps the order of the PTX it is given; in LLVM's source order, llama.cpp's k_get_rows_kq issued
9 of its 12 loads before the first use of one, where nvcc's code issues all 12 (one trip to memory instead of
two, in a kernel of a few microseconds), as it does scheduled for registers. Off by default: a kernel that loads
many values at once then keeps fewer in flight. The option is read when LLVM makes the target machine, so the
knob must reach the machine, not a process-wide setting of a machine already made.
"""

from __future__ import annotations

import collections
import re

import pytest
from irbuild import build_cuda_ir

pytest.importorskip("mneme_cuda.codegen")

from mneme.core import build, ir
from mneme.core.types import ExperimentConfiguration

SOURCE = """#include <cuda_fp16.h>
// q4_K-like dequantization: scales chosen by a branch, four quants per thread, stores between the loads
extern "C" __global__ void dequant(const unsigned char *__restrict__ q, const half2 *__restrict__ dm,
                                   float *__restrict__ y, int rows) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const unsigned char *s = q + 144 * r;
    const int t = threadIdx.x, j = t / 8, l = t % 8;
    const float2 d = __half22float2(dm[r]);
    unsigned char sc, m;
    if (j < 4) {
      sc = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const float d1 = d.x * sc, m1 = d.y * m;
    for (int k = 0; k < 4; ++k) y[256 * r + 32 * j + 4 * l + k] = d1 * (s[16 + 16 * j + 4 * l + k] & 0xF) - m1;
  }
}
"""


def _instructions(ptx: str) -> list[str]:
    body = ptx[ptx.index(".entry") :]
    return re.findall(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s", body, re.MULTILINE)


def test_scheduling_for_registers_reorders_the_ptx_and_keeps_its_instructions(tmp_path):
    source = tmp_path / "dequant.cu"
    source.write_text(SOURCE)
    module = ir.link([ir.load(build_cuda_ir(source))], "dequant", internalize=False)
    config = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))
    assert config.nvptx_sched4reg is True  # the default: scheduled for register pressure

    def ptx(value=None):
        chosen = config if value is None else config.replace(nvptx_sched4reg=value)
        return _instructions(build.compile(module, "dequant", chosen, "sm_90", emit="ptx", cache=False).data.decode())

    first, source_order, again = ptx(True), ptx(False), ptx(True)
    assert first != source_order and first == again  # each machine made with its own setting, and kept
    assert ptx() == first
    assert collections.Counter(first) == collections.Counter(source_order)
    assert sum(op.startswith("ld.global") for op in first) >= 8
