"""Guards that bound a thread's index on both sides, test values the same across a row, offset the index or build it
from a 2D tile run a row's threads in range through the guard's copy (row_ranges.find_guard, issue 40 item 4): the
same bytes as the kernel's own guard for every bound, in long rows, in short rows run as one loop, optimized and as
`mneme-cc` records the kernel."""

from __future__ import annotations

import re
import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from host_launches import retargeted
from irbuild import build_cuda_ir

from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import block_loop, grid_stride, row_ranges
from mneme.plugins.backends.host.backend import HostBackend

BASE = 0x7E7100000000
SPACING = 16 << 20
SOURCE = r"""
#define BODY y[i] = 0.5f * x[i] + y[i] + 1.0f
extern "C" __global__ void inside(int n, int lo, int hi, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i > 0 && i < n - 1) BODY; }
extern "C" __global__ void outside_ret(int n, int lo, int hi, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i <= 0 || i >= n - 1) return; BODY; }
extern "C" __global__ void window(int n, int lo, int hi, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (lo <= i && i < hi && i < n) BODY; }
extern "C" __global__ void flag(int n, int lo, int hi, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (lo > 2 && i < n) BODY; }
extern "C" __global__ void shifted(int n, int lo, int hi, const float* x, float* y) {
  int i = threadIdx.x + blockIdx.x * blockDim.x; if (i - lo >= 0 && i + 3 < n) BODY; }
extern "C" __global__ void wraps(int n, int lo, int hi, const float* x, float* y) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i + (unsigned)lo < (unsigned)n && i < 100000u) BODY; }
extern "C" __global__ void stride(int n, int lo, int hi, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += blockDim.x * gridDim.x)
    if (i >= 1 && i > lo && i < n - 1) BODY; }
extern "C" __global__ void tile(int n, int lo, int hi, const float* x, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 512 + blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= lo && i < n) BODY; }
"""
# the threads each kernel runs its body in, as NumPy computes them (i the global index, as the kernel's type wraps)
COVERED = {
    "inside": lambda i, n, lo, hi: (i > 0) & (i < n - 1),
    "outside_ret": lambda i, n, lo, hi: (i > 0) & (i < n - 1),
    "window": lambda i, n, lo, hi: (lo <= i) & (i < hi) & (i < n),
    "flag": lambda i, n, lo, hi: (lo > 2) & (i < n),
    "shifted": lambda i, n, lo, hi: (i - lo >= 0) & (i + 3 < n),
    "wraps": lambda i, n, lo, hi: (((i + (lo % 2**32)) % 2**32) < (n % 2**32)) & (i < 100000),
    "tile": lambda i, n, lo, hi: (i >= lo) & (i < n),
}
TESTS = {
    "inside": ("sgt", "slt"),
    "outside_ret": ("sgt", "slt"),
    "window": ("sge", "slt", "slt"),
    "flag": ("row", "slt"),
    "shifted": ("sge", "slt"),
    "wraps": ("ult", "ult"),
    "tile": ("sge", "slt"),
}
# (grid, block): long rows (the threads of a block in one loop), short power-of-two rows (a run's rows as one loop);
# the tile's rows of 512 threads (no two threads share an element: the kernels read and write theirs)
SHAPES = {"long": ((6, 1), (128, 1)), "short": ((48, 1), (16, 1))}
TILE_SHAPES = {"long": ((4, 3), (128, 2)), "short": ((32, 6), (16, 4))}
BOUNDS = [  # (n, lo, hi)
    (-3, 0, 0),
    (0, 0, 0),
    (1, 0, 0),
    (2, 0, 5),
    (77, 5, 60),
    (128, 3, 128),
    (129, 127, 500),
    (400, 200, 260),
    (767, 0, 767),
    (768, 1, 2000),
    (5000, -20, 900),
    (5000, 3, 2),
    (2**31 - 1, 2**31 - 2, 2**31 - 1),
]
WRAP_BOUNDS = [(600, -300, 0), (50, -700, 0), (2**31 + 5, 2**31 - 100, 0), (300, 2**32 - 128 - 7, 0)]


@pytest.fixture(scope="module", params=["-O3", None], ids=["O3", "as-recorded"])
def module_text(request, tmp_path_factory):
    src = tmp_path_factory.mktemp("ranges") / "ranges.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, **({"opt": request.param} if request.param else {})).read_text()


def test_each_guard_is_found_with_each_of_its_comparisons(module_text):
    found = {k: row_ranges.find_guard(retargeted(module_text, k).text, k) for k in TESTS}
    assert {k: g and sorted(g.tests) for k, g in found.items()} == {k: sorted(t) for k, t in TESTS.items()}


def _run_all(text: str, kernel: str, grid, block, cases, monkeypatch, split: bool) -> list[np.ndarray]:
    """The kernel compiled with the guard split on or off, launched once per case on one device: y after each."""
    monkeypatch.setenv(block_loop.GUARD_ENV, "1" if split else "0")
    binary = HostBackend().compile(
        llvm.parse_assembly(text), kernel, ExperimentConfiguration(grid=1, block=1), "x86_64"
    )
    dev = HostBackend().open_device(0)
    outs = []
    try:
        dev.reserve(BASE, 1 << 28)
        loaded = dev.load(binary)
        for (n, lo, hi), x, y in cases:
            for k, data in enumerate((x, y)):
                dev.map(BASE + k * SPACING, data.nbytes)
                dev.write(BASE + k * SPACING, data.tobytes())
            args = struct.pack("<iii4xQQ", *(v - 2**32 if v >= 2**31 else v for v in (n, lo, hi)), BASE, BASE + SPACING)
            dev.launch(loaded, grid, block, 0, args)
            outs.append(np.frombuffer(dev.read(BASE + SPACING, y.nbytes), np.float32).copy())
    finally:
        dev.close()
    return outs


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kernel", sorted(TESTS))
def test_every_bound_gives_the_bytes_of_the_kernels_own_guard(module_text, monkeypatch, kernel, shape):
    (gx, gy), (bx, by) = (TILE_SHAPES if kernel == "tile" else SHAPES)[shape]
    threads_x, rows = gx * bx, gy * by
    size = 512 * (rows - 1) + threads_x if kernel == "tile" else threads_x
    rng = np.random.default_rng(7)
    cases = []
    for n, lo, hi in BOUNDS + (WRAP_BOUNDS if kernel == "wraps" else []):
        cases.append(((n, lo, hi), rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)))
    grid, block = (gx, gy, 1), (bx, by, 1)
    split = _run_all(module_text, kernel, grid, block, cases, monkeypatch, True)
    whole = _run_all(module_text, kernel, grid, block, cases, monkeypatch, False)
    for ((n, lo, hi), x, y), a, b in zip(cases, split, whole):
        assert a.tobytes() == b.tobytes(), (n, lo, hi)
        if kernel == "tile":  # the tile's index: rows of 512, blocks' threads along x
            ty, tx = np.meshgrid(np.arange(rows), np.arange(threads_x), indexing="ij")
            index = (ty * 512 + tx).ravel()
        else:
            index = np.arange(size)
        signed = (lambda v: v - 2**32 if v >= 2**31 else v) if kernel != "wraps" else (lambda v: v % 2**32)
        covered = np.zeros(size, bool)
        covered[index] = COVERED[kernel](index.astype(np.int64), signed(n), signed(lo), signed(hi))
        assert np.array_equal(a[~covered], y[~covered]), (n, lo, hi)  # untouched
        assert np.all(a[covered] != y[covered]), (n, lo, hi)  # y + 0.5 x + 1, rounded as LLVM contracted it


STRIDE_BOUNDS = [  # (n, lo, hi): hi the grid-stride loop's bound, at most the buffer's 2000 elements
    (-3, 0, 2000),
    (0, 0, 2000),
    (1, -1, 2000),
    (2, 0, 5),
    (77, 5, 2000),
    (1999, -5, 1999),
    (2000, 1000, 2000),
    (2001, 3, 1500),
    (5000, 1999, 2000),
    (600, 700, 2000),
    (2**31 - 1, -(2**31), 2000),
]


def test_a_guard_in_a_grid_stride_loop_runs_its_range_through_a_copy_with_the_guard_taken(tmp_path):
    """The flat form (`grid_stride`) of ``for (i = ...; i < hi; i += S) if (i >= 1 && i > lo && i < n - 1)``, optimized (as
    recorded, the loop is not in the flat form's shape): three copies of the loop, the middle one with its guard's
    branch taken."""
    (tmp_path / "ranges.cu").write_text(SOURCE)
    module = retargeted(build_cuda_ir(tmp_path / "ranges.cu", opt="-O3").read_text(), "stride")
    flat = grid_stride.to_flat(module.text, "stride", module.params, True)
    assert flat is not None and "__mneme_seg1:" in flat and "__mneme_seg2:" in flat
    llvm.parse_assembly(flat).verify()
    copy = flat[flat.index("__mneme_seg1:") : flat.index("__mneme_seg2:")]
    assert re.search(r"br i1 (true|false), label", copy)


@pytest.mark.parametrize("split", [True, False], ids=["split", "whole"])
def test_every_bound_of_a_guard_in_a_grid_stride_loop_gives_the_kernels_bytes(module_text, monkeypatch, split):
    size, rng = 2000, np.random.default_rng(11)
    cases = [
        ((n, lo, hi), rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32))
        for n, lo, hi in STRIDE_BOUNDS
    ]
    got = _run_all(module_text, "stride", (4, 1, 1), (128, 1, 1), cases, monkeypatch, split)
    monkeypatch.setenv(grid_stride.ENV, "0")  # thread after thread: the kernel as written
    plain = _run_all(module_text, "stride", (4, 1, 1), (128, 1, 1), cases, monkeypatch, False)
    for ((n, lo, hi), x, y), a, b in zip(cases, got, plain):
        i = np.arange(size, dtype=np.int64)
        covered = (i < hi) & (i >= 1) & (i > lo) & (i < n - 1)
        assert np.array_equal(a[~covered], y[~covered]), (n, lo, hi)
        assert np.all(a[covered] != y[covered]), (n, lo, hi)
        assert a.tobytes() == b.tobytes(), (n, lo, hi)
