"""Passes whose threads past a uniform bound do nothing stop their loops at the bound (block_guards.py, issue 40
item 4): tree reductions written in several ways give the bytes of the runtime's step form
(``MNEME_HOST_BLOCK_STEPS=0``) and of the block step form without the bound (``MNEME_HOST_BLOCK_UNIFORM=0``), with
1D, 2D and 3D blocks; branches that are not such a bound (per-thread values, idle threads that store, a bound
that changes within the interval) keep the loops over every thread."""

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
// the classic shared-memory tree, indexed by threadIdx.x itself
extern "C" __global__ void tree_tidx(int n, const float* x, float* out) {
  __shared__ float s[512];
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
// a local copy of the index, signed, the bound on the left of the test
extern "C" __global__ void tree_local(int n, const float* x, float* out) {
  __shared__ float s[512];
  int tid = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  int i = blockIdx.x * size + tid;
  s[tid] = i < n ? x[i] * 0.5f : 0.0f;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (k > tid) s[tid] = s[tid] * 1.0001f + s[tid + k];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}
// the threads at or past the bound skip the level (the test inverted) and the bound is not a power of two
extern "C" __global__ void tree_odd(int n, const float* x, float* out) {
  __shared__ float s[512];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = (blockDim.x + 1) / 2, m = blockDim.x; m > 1; m = k, k = (k + 1) / 2) {
    if (t >= m - k) {
    } else {
      s[t] += s[t + k];
    }
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
// a test on each thread's own value: no bound
extern "C" __global__ void tree_values(int n, const float* x, float* out) {
  __shared__ float s[512];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < (int)(s[t] * 4.0f) + k / 2) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
// the threads past the bound store something too: no bound
extern "C" __global__ void tree_busy(int n, const float* x, float* out) {
  __shared__ float s[512];
  __shared__ int seen[512];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  seen[t] = 0;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    else seen[t] += k;
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
  if (t == 1) out[gridDim.x + blockIdx.x] = (float)seen[blockDim.x - 1];
}
// odd threads store elsewhere and never reach the test on the bound: no bound
extern "C" __global__ void tree_odd_threads(int n, const float* x, float* out) {
  __shared__ float s[512];
  __shared__ float other[512];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  other[t] = 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t & 1) other[t] += 1.0f;
    else if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
  if (t == 1) out[gridDim.x + blockIdx.x] = other[blockDim.x - 1];
}
// the bound changes within the interval (a loop with no barrier in it): no bound
extern "C" __global__ void inner_loop(int n, const float* x, float* out) {
  __shared__ float s[512];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  float acc = 0.0f;
  for (int k = 1; k < 8; k++) {
    if (t < k * 16) acc += s[(t + k) % blockDim.x];
  }
  __syncthreads();
  s[t] = acc;
  __syncthreads();
  if (t == 0) {
    float total = 0.0f;
    for (int j = 0; j < (int)blockDim.x; j++) total += s[j];
    out[blockIdx.x] = total;
  }
}
// a 3D block's tree: the linear index through z (not recognized: the loops over every thread)
extern "C" __global__ void tree_3d(int n, const float* x, float* out) {
  __shared__ float s[512];
  int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int size = blockDim.x * blockDim.y * blockDim.z, i = blockIdx.x * size + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("block_guards") / "block_guards.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


def _block_step_text(text: str, kernel: str) -> str | None:
    host = retargeted(text, kernel)
    return block_steps.to_block_steps(host.text, kernel, host.params, host.static_shared)


def _three(monkeypatch, text, kernel, grid, block, buffers, args):
    """The buffers after a launch in the block step form, without its bound (and other proofs), and in the runtime's
    step form: all the same bytes; the first."""
    mode, got = launch(text, kernel, grid, block, buffers, args, BASE)
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")
    unbounded = launch(text, kernel, grid, block, buffers, args, BASE)[1]
    monkeypatch.delenv(block_steps.UNIFORM_ENV)
    monkeypatch.setenv(block_steps.ENV, "0")
    stepped = launch(text, kernel, grid, block, buffers, args, BASE)[1]
    monkeypatch.delenv(block_steps.ENV)
    assert mode == 2
    assert [b.tobytes() for b in got] == [b.tobytes() for b in unbounded] == [b.tobytes() for b in stepped]
    return got


def _tree(values: np.ndarray, step) -> np.float32:
    """A block's tree over `values` (float32), each level's k from `step`."""
    s = values.astype(np.float32).copy()
    for lo, k in step(len(s)):
        s[:lo] = [step.combine(s[t], s[t + k]) for t in range(lo)]
    return s[0]


def _halving(size):
    k = size // 2
    while k > 0:
        yield k, k
        k //= 2


_halving.combine = lambda a, b: np.float32(a + b)


@pytest.mark.parametrize(
    ("kernel", "block", "bounded"),
    [
        ("tree_tidx", (256,), True),
        ("tree_tidx", (64,), True),
        ("tree_local", (128,), True),
        ("tree_local", (16, 16), True),  # 2D: one loop over the plane's linear index
        ("tree_local", (12, 4), True),  # rows not a power of two: nested loops, no bound (2D)
        ("tree_3d", (8, 4, 4), False),
    ],
)
def test_tree_levels_run_the_threads_below_the_bound_with_the_step_forms_bytes(
    module_text, monkeypatch, kernel, block, bounded
):
    size = int(np.prod(block))
    n = size * 5 - 7
    x = np.random.default_rng(size).random(n, dtype=np.float32)
    grid = (5,)
    got = _three(monkeypatch, module_text, kernel, grid, block, [x, np.zeros(5, np.float32)], _args(n))
    assert ("__mneme_probe." in _block_step_text(module_text, kernel)) is bounded
    padded = np.zeros(size * 5, np.float32)
    padded[:n] = x * (np.float32(0.5) if kernel == "tree_local" else np.float32(1))
    for b in range(5):
        values = padded[b * size : (b + 1) * size]
        if kernel == "tree_local":
            s = values.copy()
            for lo, k in _halving(size):
                s[:lo] = s[:lo] * np.float32(1.0001) + s[k : k + lo]
            np.testing.assert_allclose(got[1][b], s[0], rtol=1e-6)
        else:
            np.testing.assert_allclose(got[1][b], _tree(values, _halving), rtol=1e-6)


@pytest.mark.parametrize("block", [(256,), (100,), (33,)])
def test_an_inverted_test_and_a_bound_not_a_power_of_two_keep_the_step_forms_bytes(module_text, monkeypatch, block):
    n = block[0] * 3
    x = np.random.default_rng(block[0]).random(n, dtype=np.float32)
    got = _three(monkeypatch, module_text, "tree_odd", (3,), block, [x, np.zeros(3, np.float32)], _args(n))
    assert "__mneme_probe." in _block_step_text(module_text, "tree_odd")
    for b in range(3):
        s = x[b * block[0] : (b + 1) * block[0]].copy()
        m, k = block[0], (block[0] + 1) // 2
        while m > 1:
            s[: m - k] = s[: m - k] + s[k:m]
            m, k = k, (k + 1) // 2
        np.testing.assert_allclose(got[1][b], s[0], rtol=1e-6)


@pytest.mark.parametrize("kernel", ["tree_values", "tree_busy", "tree_odd_threads", "inner_loop"])
def test_branches_that_are_not_an_idle_bound_keep_every_thread_in_the_loops(module_text, monkeypatch, kernel):
    n = 256 * 3
    x = np.random.default_rng(3).random(n, dtype=np.float32)
    _three(monkeypatch, module_text, kernel, (3,), (256,), [x, np.zeros(6, np.float32)], _args(n))
    assert "__mneme_probe." not in _block_step_text(module_text, kernel)


def _args(n: int) -> bytes:
    return struct.pack("<i4xQQ", n, X, Y)
