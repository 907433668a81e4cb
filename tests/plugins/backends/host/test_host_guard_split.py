"""Kernels that begin `if (blockIdx.x * blockDim.x + threadIdx.x < n)` run the threads below n through a copy with
the guard taken (block_loop.find_guard, issue 40 item 4): the same bytes as the kernel's own guard for every bound
(none, one thread, part of a block, whole blocks, past the grid, negative), every comparison and either way round."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.plugins.backends.host import block_loop, row_ranges

BASE = 0x7E7000000000
X, Y = BASE, BASE + (16 << 20)
SOURCE = r"""
extern "C" __global__ void lt(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void ult(unsigned n, float a, const float* x, float* y) {
  unsigned i = threadIdx.x + blockDim.x * blockIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void ge_ret(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; y[i] = a * x[i] + y[i]; }
extern "C" __global__ void le(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i <= n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void rev(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (n > i) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void twice(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (2 * i < n) y[i] = a * x[i] + y[i]; }
"""
GRID, BLOCK = 6, 128
THREADS = GRID * BLOCK


@pytest.fixture(scope="module", params=["-O3", None], ids=["O3", "as-recorded"])
def module_text(request, tmp_path_factory):
    """The kernels optimized, and as `mneme-cc` records them (no optimization: values through allocas)."""
    src = tmp_path_factory.mktemp("guards") / "guards.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, **({"opt": request.param} if request.param else {})).read_text()


def test_the_guard_is_found_in_each_spelling_and_only_on_the_global_x_index(module_text):
    found = {k: row_ranges.find_guard(retargeted(module_text, k).text, k) for k in ("lt", "ult", "ge_ret", "le", "rev")}
    assert {k: g.tests for k, g in found.items()} == {
        "lt": ("slt",),
        "ult": ("ult",),
        "ge_ret": ("slt",),
        "le": ("sle",),
        "rev": ("slt",),
    }
    assert row_ranges.find_guard(retargeted(module_text, "twice").text, "twice") is None


@pytest.mark.parametrize("kernel", ["lt", "ult", "ge_ret", "le", "rev", "twice"])
@pytest.mark.parametrize("n", [-5, 0, 1, 77, BLOCK, 3 * BLOCK + 1, THREADS - 1, THREADS + 40])
def test_every_bound_gives_the_bytes_of_the_kernels_own_guard(module_text, monkeypatch, kernel, n):
    rng = np.random.default_rng(n + 1000)
    x, y = rng.random(THREADS + 1, dtype=np.float32), rng.random(THREADS + 1, dtype=np.float32)
    bound = n if kernel != "ult" else max(n, 0)
    args = struct.pack("<ifQQ" if kernel != "ult" else "<IfQQ", bound, 1.5, X, Y)
    split = launch(module_text, kernel, (GRID,), (BLOCK,), [x, y], args, BASE)[1][1]
    monkeypatch.setenv(block_loop.GUARD_ENV, "0")
    whole = launch(module_text, kernel, (GRID,), (BLOCK,), [x, y], args, BASE)[1][1]
    assert split.tobytes() == whole.tobytes()
    i = np.arange(THREADS + 1)
    covered = {"le": i <= bound, "twice": 2 * i < bound}.get(kernel, i < bound) & (i < THREADS)
    np.testing.assert_array_equal(split[~covered], y[~covered])  # untouched
    # fused or not, as LLVM contracts the kernel's a * x + y
    fused = (np.float64(1.5) * x + y).astype(np.float32)
    assert np.all((split[covered] == fused[covered]) | (split[covered] == (np.float32(1.5) * x + y)[covered]))
