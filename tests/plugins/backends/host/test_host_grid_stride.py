"""Grid-stride loops run as one loop over the index space on the host backend (grid_stride.py, issue 40 item 4):
the same bytes as lockstep groups and as thread after thread, for the launch shapes and bounds where the form
applies and where it must not (2D blocks, an index that would wrap, a loop that leaves early, other index reads)."""

from __future__ import annotations

import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.core.errors import ExperimentError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import grid_stride, lanes, retarget
from mneme.plugins.backends.host.backend import HostBackend

BASE = 0x7E4000000000
X, Y = BASE, BASE + (16 << 20)
SOURCE = r"""
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stencil(int n, const float* x, float* y) {
  for (int i = threadIdx.x + blockDim.x * blockIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
// unsigned indices: the comparison is unsigned
extern "C" __global__ void scale_unsigned(unsigned n, const float* x, float* y) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = 3.0f * x[i];
}
// a 64-bit index (size_t): the 32-bit start widened, the width a product of the widened registers
extern "C" __global__ void saxpy64(size_t n, float a, const float* x, float* y) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale64(long long n, const float* x, float* y) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) y[i] = 3.0f * x[i];
}
// a chain of updates of one element by one thread: each thread's iterations must keep their order
extern "C" __global__ void running(int n, int m, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i % m] = y[i % m] * 0.5f + i;
}
// not the canonical loop: each thread also writes its own index, and one leaves its loop early
extern "C" __global__ void reads_tid(int n, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = threadIdx.x;
}
extern "C" __global__ void leaves(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    if (x[i] < 0.0f) break;
    y[i] = x[i] + 1.0f;
  }
}
// a per-thread sum carried across iterations is not an independent body
extern "C" __global__ void carried(int n, const float* x, float* y) {
  float s = 0.0f;
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = t; i < n; i += blockDim.x * gridDim.x) s += x[i];
  if (t < n) y[t] = s;
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("grid_stride") / "grid_stride.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


def _flat_text(text: str, kernel: str) -> str | None:
    host = retargeted(text, kernel)
    return grid_stride.to_flat(host.text, kernel, host.params, bool(host.flags & retarget.FLAG_BLOCK_RUNS))


def _run(text, kernel, grid, block, buffers, args):
    """Launch `kernel` with `buffers` at BASE + k * 16 MiB; returns their contents afterwards."""
    return launch(text, kernel, grid, block, buffers, args, BASE)[1]


def _three(monkeypatch, *run_args):
    """(flat, lockstep groups, thread after thread) results of one launch."""
    flat = _run(*run_args)
    monkeypatch.setenv(grid_stride.ENV, "0")
    locked = _run(*run_args)
    monkeypatch.setenv(lanes.ENV, "0")
    single = _run(*run_args)
    monkeypatch.delenv(grid_stride.ENV)
    monkeypatch.delenv(lanes.ENV)
    return flat, locked, single


def test_canonical_grid_stride_loops_take_the_flat_form_and_others_do_not(module_text):
    for kernel in ("saxpy", "stencil", "scale_unsigned", "running", "saxpy64", "scale64"):
        assert _flat_text(module_text, kernel) is not None, kernel
    for kernel in ("reads_tid", "leaves", "carried"):
        assert _flat_text(module_text, kernel) is None, kernel


@pytest.mark.parametrize(("n", "grid", "block"), [(1000, 5, 96), (4096 * 3 + 5, 7, 64), (50, 4, 32), (0, 3, 32)])
def test_saxpy_and_the_stencil_give_the_same_bytes_in_every_form(module_text, monkeypatch, n, grid, block):
    rng = np.random.default_rng(n)
    x, y = rng.random(max(n, 1), dtype=np.float32), rng.random(max(n, 1), dtype=np.float32)
    flat, locked, single = _three(
        monkeypatch, module_text, "saxpy", (grid,), (block,), [x, y], struct.pack("<ifQQ", n, 2.5, X, Y)
    )
    assert flat[1].tobytes() == locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_allclose(flat[1][:n], np.float32(2.5) * x[:n] + y[:n], rtol=1e-6)
    flat, locked, single = _three(
        monkeypatch, module_text, "stencil", (grid,), (block,), [x, y], struct.pack("<i4xQQ", n, X, Y)
    )
    assert flat[1].tobytes() == locked[1].tobytes() == single[1].tobytes()
    if n > 2:
        want = (x[:-2] + x[1:-1] + x[2:]) * np.float32(1.0 / 3.0)
        np.testing.assert_allclose(flat[1][1 : n - 1], want[: n - 2], rtol=1e-6)


def test_a_2d_block_runs_every_row_of_threads_as_on_the_gpu(module_text, monkeypatch):
    """Threads with the same x and another y repeat the same elements: y = 2x + y once per row of threads."""
    n = 700
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    flat, locked, single = _three(
        monkeypatch, module_text, "saxpy", (3,), (32, 3), [x, y], struct.pack("<ifQQ", n, 2.0, X, Y)
    )
    assert flat[1].tobytes() == locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_array_equal(flat[1], 1 + 6 * x)  # three rows of threads: y = 2x + y three times


def test_each_thread_updates_its_elements_in_its_own_order(module_text, monkeypatch):
    n, m = 5000, 64 * 3  # the grid's width is 3 x 64: every element of y is one thread's, updated in turn
    y = np.zeros(m, np.float32)
    flat, locked, single = _three(monkeypatch, module_text, "running", (3,), (64,), [y], struct.pack("<iiQ", n, m, X))
    want = np.zeros(m, np.float32)
    for i in range(n):
        want[i % m] = np.float32(want[i % m] * np.float32(0.5) + np.float32(i))
    np.testing.assert_array_equal(flat[0], want)
    assert flat[0].tobytes() == locked[0].tobytes() == single[0].tobytes()


def test_unsigned_indices_past_the_signed_range_stay_exact(module_text, monkeypatch):
    n = 3001
    x = np.random.default_rng(5).random(n, dtype=np.float32)
    flat, _, single = _three(
        monkeypatch,
        module_text,
        "scale_unsigned",
        (4,),
        (100,),
        [x, np.zeros(n, np.float32)],
        struct.pack("<I4xQQ", n, X, Y),
    )
    assert flat[1].tobytes() == single[1].tobytes()
    np.testing.assert_array_equal(flat[1], np.float32(3.0) * x)


def test_the_flat_call_hands_a_launch_whose_index_could_wrap_to_the_thread_loop(module_text):
    """With n - 1 + stride past INT_MAX a thread's i + stride wraps on the GPU (2^31 iterations: not run here);
    the flat function checks that before running anything and returns 2, which sends the entry to the thread loop."""
    text = _flat_text(module_text, "running")
    flat = text[text.index("define internal i32 @running.__mneme_flat") :]
    checks = flat[: flat.index("__mneme_fguard:")]
    assert "icmp sle i64 %__mneme_top, 2147483648" in checks and "ret i32 2" in checks
    assert "label %threads [ i32 0, label %done i32 1, label %bnext ]" in text


def test_a_read_one_past_the_end_in_a_flat_loop_is_caught_at_its_exact_bytes(module_text):
    binary = HostBackend().compile(
        llvm.parse_assembly(module_text), "saxpy", ExperimentConfiguration(grid=1, block=1), "x86_64"
    )
    dev = HostBackend().open_device(0)
    try:
        dev.reserve(BASE, 1 << 28)
        loaded = dev.load(binary)
        dev.map(X, 4000)
        dev.map(Y, 4004)
        dev.write(X, bytes(4000))
        dev.write(Y, bytes(4004))
        with pytest.raises(
            ExperimentError, match=r"read out of bounds: bytes 4000\.\.4003 of the 4000-byte buffer"
        ) as err:
            dev.launch(loaded, (2,), (64,), 0, struct.pack("<ifQQ", 1001, 2.0, X, Y))
        assert "block (1, 0, 0)" in str(err.value)  # i = 1000: thread 1000 % 128 = 104 of the 2 x 64 grid
    finally:
        dev.close()


def test_every_row_of_blocks_of_a_2d_grid_runs_the_loop_as_on_the_gpu(module_text, monkeypatch):
    """Blocks of another grid row repeat the same indices (the kernel reads only blockIdx.x): y = 2x + y per row."""
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # the rows write the same elements: one worker orders them
    n = 3000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    flat, locked, single = _three(
        monkeypatch, module_text, "saxpy", (5, 2), (64,), [x, y], struct.pack("<ifQQ", n, 2.0, X, Y)
    )
    assert flat[1].tobytes() == locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_array_equal(flat[1], 1 + 4 * x)


def test_a_kernel_built_with_debug_information_takes_the_flat_form(tmp_path, monkeypatch):
    src = tmp_path / "debug.cu"
    src.write_text(SOURCE)
    text = build_cuda_ir(src, opt="-O3", flags=("-g",)).read_text()
    assert "!dbg" in text
    flat = _flat_text(text, "saxpy")
    assert flat is not None
    llvm.parse_assembly(flat).verify()  # the copy carries no location of the kernel's subprogram
    n = 777
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    got, _, single = _three(monkeypatch, text, "saxpy", (3,), (64,), [x, y], struct.pack("<ifQQ", n, 2.0, X, Y))
    assert got[1].tobytes() == single[1].tobytes()
    np.testing.assert_array_equal(got[1], 1 + 2 * x)


@pytest.mark.parametrize("n", [0, 1, 4096 * 2 + 77])
def test_64_bit_indices_give_the_same_bytes_in_every_form(module_text, monkeypatch, n):
    rng = np.random.default_rng(9)
    x, y = rng.random(max(n, 1), dtype=np.float32), rng.random(max(n, 1), dtype=np.float32)
    flat, locked, single = _three(
        monkeypatch, module_text, "saxpy64", (6,), (128,), [x, y], struct.pack("<Qf4xQQ", n, 1.5, X, Y)
    )
    assert flat[1].tobytes() == locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_allclose(flat[1][:n], np.float32(1.5) * x[:n] + y[:n], rtol=1e-6)
    flat, _, single = _three(
        monkeypatch, module_text, "scale64", (6,), (128,), [x, np.zeros_like(x)], struct.pack("<qQQ", n, X, Y)
    )
    assert flat[1].tobytes() == single[1].tobytes()
    np.testing.assert_array_equal(flat[1][:n], np.float32(3.0) * x[:n])
