"""Barrier kernels run a block per call on the host backend (block_steps.py, issue 40 item 4): the passes of the
step form in IR give the same bytes as the runtime's step form (``MNEME_HOST_BLOCK_STEPS=0``) and as NumPy, with
1D and 2D blocks, threads that return before a barrier, private arrays kept across barriers and atomics."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.plugins.backends.host import block_steps

BASE = 0x7E6000000000
X, Y = BASE, BASE + (16 << 20)
SOURCE = r"""
// the tree sum of a block, one atomic per block (the throughput benchmark's reduction)
extern "C" __global__ void block_sum(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  int i = blockIdx.x * size + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}
// each block's sum, no atomics: every interval runs as vector lanes
extern "C" __global__ void sums(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
// threads past n leave before the barrier: the passes then mix returned and waiting threads
extern "C" __global__ void reverse_some(int n, const float* x, float* y) {
  __shared__ float s[128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (i >= n) return;
  s[t] = x[i];
  __syncthreads();
  int last = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x)) - 1;
  y[i] = s[last - t] * 2.0f + t;
}
// a private array indexed at run time lives across the barrier (in each thread's frame)
extern "C" __global__ void private_across(int n, const float* x, float* y) {
  __shared__ float s[64];
  float p[16];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  for (int k = 0; k < 16; k++) p[k] = x[(i + k) % n];
  s[t] = p[(int)x[i] % 16];
  __syncthreads();
  y[i] = s[(t + 1) % blockDim.x] + p[(int)x[(i + 3) % n] % 16];
}
// a shuffle: the block step form does not take it
extern "C" __global__ void shuffled(float* y) {
  __shared__ float s[32];
  float v = __shfl_down_sync(0xffffffffu, (float)threadIdx.x, 1);
  s[threadIdx.x] = v;
  __syncthreads();
  y[threadIdx.x] = s[31 - threadIdx.x];
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("block_steps") / "block_steps.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


def _block_step_text(text: str, kernel: str) -> str | None:
    host = retargeted(text, kernel)
    return block_steps.to_block_steps(host.text, kernel, host.params, host.static_shared)


def _run(text, kernel, grid, block, buffers, args):
    """(the runtime's mode, the buffers' contents after the launch)."""
    return launch(text, kernel, grid, block, buffers, args, BASE)


def _both(monkeypatch, *run_args):
    """(block steps, the runtime's step form): each (mode, buffers)."""
    blocked = _run(*run_args)
    monkeypatch.setenv(block_steps.ENV, "0")
    stepped = _run(*run_args)
    monkeypatch.delenv(block_steps.ENV)
    return blocked, stepped


def test_barrier_only_kernels_take_the_block_step_form_and_shuffles_do_not(module_text):
    for kernel in ("block_sum", "sums", "reverse_some", "private_across"):
        assert _block_step_text(module_text, kernel) is not None, kernel
    assert _block_step_text(module_text, "shuffled") is None
    sums = _block_step_text(module_text, "sums")
    assert sums.count("!llvm.access.group") >= 3  # every interval's loop over the threads is marked parallel
    across = _block_step_text(module_text, "private_across")
    assert "x float]" in across.split("%__mneme_frame_t = type ")[1].split("\n")[0]  # the array is in the frame


@pytest.mark.parametrize(("block", "n"), [((256,), 256 * 37 - 11), ((64,), 64 * 5), ((16, 16), 256 * 9 + 100)])
def test_a_tree_sum_matches_the_step_form_and_numpy(module_text, monkeypatch, block, n):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    size = int(np.prod(block))
    grid = ((n + size - 1) // size,)
    (mode, got), (old_mode, want) = _both(
        monkeypatch,
        module_text,
        "sums",
        grid,
        (size,),  # `sums` reads blockDim.x only
        [x, np.zeros(grid[0], np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert (mode, old_mode) == (2, 3)  # a block per call (MODE_BLOCK), then the runtime's steps
    assert got[1].tobytes() == want[1].tobytes()
    np.testing.assert_allclose(got[1], np.pad(x, (0, grid[0] * size - n)).reshape(grid[0], size).sum(1), rtol=1e-5)
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # one worker: the blocks' atomics in one order
    (_, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "block_sum",
        grid,
        block,
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert got[1].tobytes() == want[1].tobytes()
    np.testing.assert_allclose(got[1][0], x.astype(np.float64).sum(), rtol=1e-4)


def test_threads_that_return_before_the_barrier_leave_the_others_to_finish(module_text, monkeypatch):
    n = 128 * 3 - 50
    x = np.arange(n, dtype=np.float32)
    y = np.full(128 * 3, -1.0, np.float32)
    (_, got), (_, want) = _both(
        monkeypatch, module_text, "reverse_some", (3,), (128,), [x, y], struct.pack("<i4xQQ", n, X, Y)
    )
    assert got[1].tobytes() == want[1].tobytes()
    expect = y.copy()
    for i in range(n):
        b, t = divmod(i, 128)
        last = min(128, n - b * 128) - 1
        expect[i] = x[b * 128 + last - t] * 2 + t
    np.testing.assert_array_equal(got[1], expect)


def test_a_private_array_keeps_each_threads_values_across_the_barrier(module_text, monkeypatch):
    n = 64 * 4
    x = np.random.default_rng(7).integers(0, 1000, n).astype(np.float32)
    (_, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "private_across",
        (4,),
        (64,),
        [x, np.zeros(n, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert got[1].tobytes() == want[1].tobytes()
    expect = np.zeros(n, np.float32)
    for i in range(n):
        b, t = divmod(i, 64)
        j = b * 64 + (t + 1) % 64
        expect[i] = x[(j + int(x[j]) % 16) % n] + x[(i + int(x[(i + 3) % n]) % 16) % n]
    np.testing.assert_array_equal(got[1], expect)


def test_a_kernel_built_with_debug_information_takes_the_block_step_form(tmp_path, monkeypatch):
    src = tmp_path / "debug.cu"
    src.write_text(SOURCE)
    text = build_cuda_ir(src, opt="-O3", flags=("-g",)).read_text()
    assert _block_step_text(text, "sums") is not None
    n = 64 * 7
    x = np.random.default_rng(3).random(n, dtype=np.float32)
    (mode, got), (_, want) = _both(
        monkeypatch, text, "sums", (7,), (64,), [x, np.zeros(7, np.float32)], struct.pack("<i4xQQ", n, X, Y)
    )
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()
    np.testing.assert_allclose(got[1], x.reshape(7, 64).sum(1), rtol=1e-5)
