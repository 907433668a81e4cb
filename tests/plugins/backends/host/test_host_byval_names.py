"""A kernel taking a struct by value whose C++ name needs quoting in IR (`%"struct.ns::pair"`) runs on the host."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme import capture
from mneme.plugins.check_commands import check

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])

SOURCE = """
namespace ops { struct affine { float scale, shift; }; }
extern "C" __global__ void apply(ops::affine f, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = f.scale * x[i] + f.shift;
}
"""


def test_a_byval_struct_named_with_colons_is_checked_and_captured(tmp_path):
    source = tmp_path / "affine.cu"
    source.write_text(SOURCE)
    ir_path = build_cuda_ir(source)
    assert '%"struct.ops::affine"' in ir_path.read_text()
    [verdict] = check((str(ir_path),), None, "apply", "host")
    assert verdict.runnable, verdict.unsupported
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    outputs: dict = {}
    capture.capture(
        str(ir_path),
        "apply",
        1,
        128,
        [struct.pack("<ff", 2.0, 0.5), x, np.zeros(100, np.float32), 100],
        tmp_path / "db",
        backend="host",
        outputs=outputs,
    )
    np.testing.assert_allclose(outputs[2], np.float32(2.0) * x + np.float32(0.5), rtol=1e-6)
