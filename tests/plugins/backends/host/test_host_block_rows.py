"""A run of blocks with short power-of-two rows (16x16 tiles) as one loop over the run's row (block_loop.entry,
``rows_as_one``): the same bytes as the same work launched one element per thread, whatever the block shape, and a
fault names the run's blocks."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from host_launches import SPACING, launch, retargeted
from irbuild import build_cuda_ir

from mneme.core.errors import ExperimentError
from mneme.plugins.backends.host import block_loop

BASE = 0x7E5000000000
X, Y = BASE, BASE + SPACING
ROW = 1024
SOURCE = r"""
extern "C" __global__ void saxpy_each(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void saxpy_tile(int n, float a, const float* x, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stencil_each(int n, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
extern "C" __global__ void stencil_tile(int n, const float* x, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
// one thread of one block writes `far` floats past y
extern "C" __global__ void tile_fault(long far, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 1.0f;
  if (blockIdx.x == 5 && blockIdx.y == 1 && threadIdx.x == 3 && threadIdx.y == 2) y[far] = 2.0f;
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("rows") / "rows.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


@pytest.mark.parametrize("kernel", ["saxpy_tile", "stencil_tile"])
def test_a_kernel_that_calls_nothing_gets_the_run_rows_as_one_loop(module_text, kernel):
    host = retargeted(module_text, kernel)
    assert "%flatrun = and i1 %short, %pow2" in host.text and "\nlf:" in host.text


def test_a_module_that_calls_a_function_keeps_a_call_per_block():
    text = "define void @k() {\n  call void @__assertfail(ptr null)\n  %t = call i32 @llvm.ctpop.i32(i32 1)\n}"
    assert not block_loop.calls_nothing(text)
    assert block_loop.calls_nothing("  %c = call ptr @__mneme_ctx()\n  %v = call i32 @llvm.ctpop.i32(i32 1)")
    assert "\nlf:" not in block_loop.entry("k", ([], []), runs=True, loop_md=900, rows_as_one=False)
    assert "\nlf:" in block_loop.entry("k", ([], []), runs=True, loop_md=900, rows_as_one=True)


@pytest.mark.parametrize("block", [(16, 16), (8, 8), (32, 4), (4, 2), (12, 4), (64, 2)])
@pytest.mark.parametrize("name", ["saxpy", "stencil"])
def test_tiles_give_the_bytes_of_one_element_per_thread(module_text, name, block):
    rows = 48
    n = rows * ROW - 37  # the last row's tail is out of range
    rng = np.random.default_rng(3)
    x, y = rng.random(rows * ROW, dtype=np.float32), rng.random(rows * ROW, dtype=np.float32)
    args = struct.pack("<ifQQ", n, 2.5, X, Y) if name == "saxpy" else struct.pack("<i4xQQ", n, X, Y)
    grid = ((ROW + block[0] - 1) // block[0], (rows + block[1] - 1) // block[1])
    # 1024 / 12 leaves part of each row's last block past the row: those threads' i runs into the next row
    tiled = launch(module_text, f"{name}_tile", grid, block, [x, y], args, BASE)
    each = launch(module_text, f"{name}_each", ((n + 255) // 256,), (256,), [x, y], args, BASE)
    assert tiled[0] == each[0] == 5  # per run of blocks along x
    if ROW % block[0] == 0 or name == "stencil":  # the stencil writes what it reads from x alone: twice is once
        assert tiled[1][1].tobytes() == each[1][1].tobytes()
    if name == "saxpy":  # every index the tile's threads reach is updated
        ty, bx, tx = np.meshgrid(np.arange(rows), np.arange(grid[0]), np.arange(block[0]), indexing="ij")
        i = (ty * ROW + bx * block[0] + tx).ravel()
        times = np.bincount(i[i < n], minlength=n)
        assert times.min() == 1 and times.max() == (1 if ROW % block[0] == 0 else 2)
        once = np.float32(2.5) * x[:n] + y[:n]
        twice = np.float32(2.5) * x[:n] + once
        # An index two blocks reach (a row's last block running into the next row) is read, updated and written by
        # both at once where they run on two workers, as on a GPU: the kernel's own race leaves one update or both.
        got = tiled[1][1][:n]
        np.testing.assert_allclose(got[times == 1], once[times == 1], rtol=1e-6)
        both = times == 2
        assert np.all(np.isclose(got[both], once[both], rtol=1e-6) | np.isclose(got[both], twice[both], rtol=1e-6))


def test_a_fault_in_a_run_of_rows_names_the_run(module_text):
    y = np.zeros(3 * 4 * ROW, np.float32)  # every row of the 9 x 3 grid of 16 x 4 blocks
    with pytest.raises(ExperimentError, match=r"invalid memory access") as info:
        launch(module_text, "tile_fault", (9, 3), (16, 4), [y], struct.pack("<qQ", 1 << 26, X), BASE)
    found = re.search(r"one of blocks \((\d+)\.\.(\d+), 1, 0\)", str(info.value))
    assert found is not None, str(info.value)
    assert int(found.group(1)) <= 5 <= int(found.group(2))
