"""Frame fields proved alike in every thread of a block (divergence.py, issue 40 item 4): what the analysis proves
and refuses on real kernels, and that a kernel whose proved fields skip their folds gives the bytes of the form
that folds them (``MNEME_HOST_BLOCK_UNIFORM=0``), of the runtime's step form and NumPy's."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.plugins.backends.host import block_steps, divergence

BASE = 0x7E8000000000
X, Y = BASE, BASE + (16 << 20)
SOURCE = r"""
// the tree's stride: the same in every thread (from blockDim), and the thread's own sum (a float)
extern "C" __global__ void tree(int n, const float* x, float* out) {
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
// a scan's stride that thread 0 writes to shared memory: the same in every thread, but read from memory
extern "C" __global__ void scan(int n, const float* x, float* y) {
  __shared__ float s[128];
  __shared__ int first;
  int t = threadIdx.x, i = blockIdx.x * 128 + t;
  if (t == 0) first = n > 1000 ? 64 : 32;
  s[t] = x[i];
  __syncthreads();
  for (int k = first; k > 0; k >>= 1) {
    float v = t >= k ? s[t - k] : 0.0f;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  y[i] = s[t];
}
// a counter each thread counts to its own bound across barriers
extern "C" __global__ void own_rounds(const int* rounds, float* y) {
  __shared__ float s[64];
  int t = threadIdx.x;
  float acc = 0.0f;
  for (int r = 0; r < rounds[t]; r++) {
    s[t] = acc + r;
    __syncthreads();
    acc += s[63 - t];
    __syncthreads();
  }
  y[t] = acc;
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("divergence") / "divergence.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


def _proved(text: str, kernel: str, monkeypatch) -> tuple[set[int], dict[int, str]]:
    """(the fields `divergence` proves alike, every frame slot's field index -> its value type) for `kernel`."""
    seen = []

    def spy(lines, start, end, slots):
        proved = real(lines, start, end, slots)
        seen.append((proved, {k: f.rsplit("], ", 1)[1].rstrip(" }") for k, f in slots.values()}))
        return proved

    real = divergence.uniform_fields
    monkeypatch.setattr(divergence, "uniform_fields", spy)
    host = retargeted(text, kernel)
    assert block_steps.to_block_steps(host.text, kernel, host.params, host.static_shared) is not None
    return seen[0]


def _three(monkeypatch, *run_args):
    """(mode, buffers) of the launch with proved fields unfolded; with them folded and in the runtime's step form,
    the same bytes."""
    got = launch(*run_args, BASE)
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")
    folded = launch(*run_args, BASE)
    monkeypatch.setenv(block_steps.ENV, "0")
    stepped = launch(*run_args, BASE)
    monkeypatch.delenv(block_steps.ENV)
    monkeypatch.delenv(block_steps.UNIFORM_ENV)
    for other in (folded, stepped):
        assert [b.tobytes() for b in other[1]] == [b.tobytes() for b in got[1]]
    return got


def test_a_stride_from_the_block_extent_is_proved_alike_and_skips_its_folds(module_text, monkeypatch):
    proved, types = _proved(module_text, "tree", monkeypatch)
    assert proved and all(types[k] == "i32" for k in proved)
    host = retargeted(module_text, "tree")
    text = block_steps.to_block_steps(host.text, "tree", host.params, host.static_shared)
    assert "%fmin." not in text and ".g:" not in text  # no fold, no per-thread copy
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")
    folded = block_steps.to_block_steps(host.text, "tree", host.params, host.static_shared)
    assert "%fmin." in folded and ".g:" in folded
    n = 256 * 7 - 30
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    mode, got = _three(
        monkeypatch, module_text, "tree", (7,), (256,), [x, np.zeros(7, np.float32)], struct.pack("<i4xQQ", n, X, Y)
    )
    assert mode == 2
    np.testing.assert_allclose(got[1], np.pad(x, (0, 30)).reshape(7, 256).sum(1), rtol=1e-5)


@pytest.mark.parametrize("n", [3 * 128, 9 * 128])
def test_a_stride_read_from_shared_memory_is_not_proved_and_keeps_the_scans_bytes(module_text, monkeypatch, n):
    proved, _ = _proved(module_text, "scan", monkeypatch)
    assert proved == set()  # the same in every thread, but loaded from memory threads write
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    mode, got = _three(
        monkeypatch,
        module_text,
        "scan",
        (n // 128,),
        (128,),
        [x, np.zeros(n, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert mode == 2
    first = 64 if n > 1000 else 32
    want = x.reshape(-1, 128).copy()
    k = first
    while k > 0:
        shifted = np.zeros_like(want)
        shifted[:, k:] = want[:, :-k]
        want = want + shifted
        k >>= 1
    np.testing.assert_array_equal(got[1], want.reshape(-1))


def test_a_counter_bounded_per_thread_is_not_proved_and_keeps_each_threads_result(module_text, monkeypatch):
    proved, _ = _proved(module_text, "own_rounds", monkeypatch)
    assert proved == set()  # its barriers run under a branch on the thread's own bound
    rounds = np.full(64, 3, np.int32)
    mode, got = _three(
        monkeypatch,
        module_text,
        "own_rounds",
        (1,),
        (64,),
        [rounds, np.zeros(64, np.float32)],
        struct.pack("<QQ", X, Y),
    )
    assert mode == 2
    acc = np.zeros(64, np.float32)
    for r in range(3):
        acc = acc + (acc + np.float32(r))[::-1]
    np.testing.assert_array_equal(got[1], acc)
