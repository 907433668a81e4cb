"""Barrier kernels run a block per call on the host backend (block_steps.py, issue 40 item 4): the passes of the
step form in IR give the same bytes as the runtime's step form (``MNEME_HOST_BLOCK_STEPS=0``), as the block step
form without its lanes layout (``MNEME_HOST_BLOCK_LANES=0``: whole frames, no recomputed values, pauses or
pass-start parameters), as the form that folds every field (``MNEME_HOST_BLOCK_UNIFORM=0``), as the form with no
loop over a plane's linear index (``MNEME_HOST_BLOCK_FLAT=0``), as the form without the next blocks' prefetch
(``MNEME_HOST_BLOCK_PREFETCH=0``) and as NumPy, with 1D, 2D and 3D blocks, threads that return before a barrier, private arrays kept across barriers, atomics after
a barrier, values the same in every thread and values that differ."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.plugins.backends.host import block_prefetch, block_steps, steps

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
// the tree sum of a 3D block: the stride kept once per block, every plane's rows in one loop
extern "C" __global__ void block_sum3(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int size = blockDim.x * blockDim.y * blockDim.z, i = blockIdx.x * size + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}
// the sum of 2D tiles of a 64-wide array (the benchmark's tile shape): its first pass reads x by tid.y and tid.x
extern "C" __global__ void tile_sum(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 64 + blockIdx.x * blockDim.x + threadIdx.x;
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
// every thread adds to one float after the barrier: the atomics' order (thread order) shows in the bits
extern "C" __global__ void atomic_tail(int n, const float* x, float* out) {
  __shared__ float s[128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (i >= n) return;
  s[t] = x[i];
  __syncthreads();
  atomicAdd(out, s[t > 0 ? t - 1 : 0] * 1.0001f + 0.3f);
}
// a pointer and a counter the same in every thread, a sum that differs, all across barriers
extern "C" __global__ void walk(int rounds, const float* x, float* y) {
  __shared__ float s[64];
  int t = threadIdx.x;
  const float* p = x + blockIdx.x * 64 * rounds;
  float acc = t;
  for (int r = 0; r < rounds; r++) {
    s[t] = p[t] + acc;
    __syncthreads();
    acc += s[63 - t] * 0.5f;
    p += 64;
    __syncthreads();
  }
  y[blockIdx.x * 64 + t] = acc;
}
// each thread's grid-stride loop before the tree (a stop at the loop's header: one iteration per pass), then
// a loop whose trip count differs from thread to thread (some threads stop at its header, others at the barrier)
extern "C" __global__ void stride_sum(int n, const float* x, float* out) {
  __shared__ float s[128];
  int t = threadIdx.x;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];
  int steps = 0;
  for (float w = v; w > 1.0f; w *= 0.5f) steps++;
  s[t] = v + steps;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}
// grid-stride sums whose index is thread 0's plus the linear thread index in every pass (1D blocks, and 2D blocks
// indexed by the linear index), is not (2D blocks indexed by threadIdx.x alone: rows repeat an index; a
// descending index), or is a size_t: the pass reads x through the index twin (`block_uniform.thread_indexed`)
// where the fold finds it, through each thread's own index elsewhere
extern "C" __global__ void stride_linear(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  float v = 0.0f;
  for (int i = blockIdx.x * size + t; i < n; i += size * gridDim.x) v += x[i] * (1.0f + 0.001f * t);
  s[t] = v;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void stride_by_x(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  float v = threadIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  s[t] = v;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void stride_down(int n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.x;
  float v = 0.0f;
  for (int i = n - 1 - (int)(blockIdx.x * blockDim.x + t); i >= 0; i -= blockDim.x * gridDim.x) v = v * 0.5f + x[i];
  s[t] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void stride_wide(long n, const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.x;
  float v = 0.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + t; i < n; i += (size_t)blockDim.x * gridDim.x) v = v * 0.5f + x[i];
  s[t] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
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
    """(block steps, the runtime's step form): each (mode, buffers); block steps without the lanes layout, with
    every field folded (no divergence analysis), with no loop over a plane's linear index and without the next
    blocks' prefetch give the same bytes as with them."""
    blocked = _run(*run_args)
    monkeypatch.setenv(block_steps.LANES_ENV, "0")
    whole = _run(*run_args)
    monkeypatch.delenv(block_steps.LANES_ENV)
    assert [b.tobytes() for b in whole[1]] == [b.tobytes() for b in blocked[1]]
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")
    folded = _run(*run_args)
    monkeypatch.delenv(block_steps.UNIFORM_ENV)
    assert [b.tobytes() for b in folded[1]] == [b.tobytes() for b in blocked[1]]
    monkeypatch.setenv(block_steps.FLAT_ENV, "0")
    nested = _run(*run_args)
    monkeypatch.delenv(block_steps.FLAT_ENV)
    assert [b.tobytes() for b in nested[1]] == [b.tobytes() for b in blocked[1]]
    monkeypatch.setenv(block_steps.PREFETCH_ENV, "0")
    unfetched = _run(*run_args)
    monkeypatch.delenv(block_steps.PREFETCH_ENV)
    assert [b.tobytes() for b in unfetched[1]] == [b.tobytes() for b in blocked[1]]
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


def test_kernels_that_read_at_the_global_index_prefetch_a_later_blocks_slice_and_no_others(module_text, monkeypatch):
    # x (parameter 1) read at blockIdx.x * blockDim.x + threadIdx.x, and the slice of a block 2 later (`AHEAD`)
    for kernel in ("sums", "reverse_some", "atomic_tail", "private_across"):
        assert block_prefetch.indexed_reads(retargeted(module_text, kernel).text.split("\n"), kernel) == [(1, 4)]
        text = _block_step_text(module_text, kernel)
        assert "call void @llvm.prefetch.p0(ptr %nb.p1, i32 0, i32 3, i32 1)" in text, kernel
        assert f"%nb.b = add i64 %nb.bx, {block_prefetch.AHEAD}" in text
    # other indices: the block's size from two extents, 2D tiles, a pointer moved per round, a grid-stride loop
    # (each thread's later reads are not the next block's)
    for kernel in ("block_sum", "tile_sum", "walk", "stride_sum"):
        assert block_prefetch.indexed_reads(retargeted(module_text, kernel).text.split("\n"), kernel) == [], kernel
        assert "@llvm.prefetch.p0(" not in _block_step_text(module_text, kernel), kernel
    monkeypatch.setenv(block_steps.PREFETCH_ENV, "0")
    assert "@llvm.prefetch.p0(" not in _block_step_text(module_text, "sums")
    assert block_steps.key().endswith("-unfetched")  # another build product


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


@pytest.mark.parametrize("block", [(16, 16), (8, 4, 4), (16, 2, 8)])
def test_a_stride_kept_once_per_block_runs_each_plane_as_one_loop_with_the_step_forms_bytes(
    module_text, monkeypatch, block
):
    text = _block_step_text(module_text, "block_sum3")
    assert "ptr %__mneme_cells" in text  # the stride is kept once per block
    assert ".f:" in text and ".f.lz.latch:" in text  # and the passes have copies over each plane's linear index
    monkeypatch.setenv(block_steps.FLAT_ENV, "0")
    assert ".f:" not in _block_step_text(module_text, "block_sum3")
    monkeypatch.delenv(block_steps.FLAT_ENV)
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # one worker: the blocks' atomics in one order
    size = int(np.prod(block))
    n = size * 7 - 5
    x = np.random.default_rng(size + len(block)).random(n, dtype=np.float32)
    (mode, got), (old_mode, want) = _both(
        monkeypatch,
        module_text,
        "block_sum3",
        (7,),
        block,
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert (mode, old_mode) == (2, 3)
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


def test_the_lanes_layout_keeps_only_values_live_across_barriers_one_array_per_field(module_text, monkeypatch):
    text = _block_step_text(module_text, "block_sum")
    frame = text.split("%__mneme_frame_t = type ")[1].split("\n")[0]
    assert frame.count("[0 x <") == 2  # the tree's stride and its half; the index and shared addresses recomputed
    assert "i64 %__mneme_frame_n" in text  # field k of thread l at frames + n * offset(k) + l * size(k)
    assert f"i32 {steps.PAUSE_BIT | 3}, label" in text  # a pause before the block's atomicAdd
    # the stride, proved the same in every thread (divergence.py), kept once per block (block_shared.py)
    assert "ptr %__mneme_cells" in text and "%__mneme_snap_at" not in text
    looped = _block_step_text(module_text, "stride_sum")
    assert looped.count(f"i32 {steps.YIELD_BIT | 1}, label") + looped.count(f"i32 {steps.YIELD_BIT | 2}, label") >= 1
    assert "ptr %__mneme_cells" not in looped  # yields: a stopped thread may store after another's pass began
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")
    folded = _block_step_text(module_text, "block_sum")
    assert "%__mneme_cells" not in folded
    assert "%__mneme_snap_at" in folded  # the stride read once per pass where the folds find every thread's alike
    monkeypatch.delenv(block_steps.UNIFORM_ENV)
    monkeypatch.setenv(block_steps.LANES_ENV, "0")
    whole = _block_step_text(module_text, "block_sum")
    assert "%__mneme_frame_n" not in whole and "%__mneme_snap_at" not in whole
    assert whole.split("%__mneme_frame_t = type ")[1].split("\n")[0].count("[0 x <") > 2


def test_atomics_after_a_barrier_keep_thread_order_with_threads_that_returned(module_text, monkeypatch):
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # one worker: the blocks in one order
    n = 128 * 3 - 37
    x = np.random.default_rng(11).random(n, dtype=np.float32)
    (mode, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "atomic_tail",
        (3,),
        (128,),
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()
    total = np.float32(0)
    for b in range(3):  # thread order within each block, as thread after thread
        live = min(128, n - b * 128)
        for t in range(live):
            # a fused multiply-add (clang contracts it): the exact product, one rounding
            term = np.float64(x[b * 128 + max(t - 1, 0)]) * np.float64(np.float32(1.0001)) + np.float64(np.float32(0.3))
            total = np.float32(total + np.float32(term))
    assert got[1][0] == total


def test_values_alike_and_unlike_across_threads_keep_each_threads_result(module_text, monkeypatch):
    rounds, blocks = 5, 3
    x = np.random.default_rng(5).random(blocks * 64 * rounds, dtype=np.float32)
    (mode, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "walk",
        (blocks,),
        (64,),
        [x, np.zeros(blocks * 64, np.float32)],
        struct.pack("<i4xQQ", rounds, X, Y),
    )
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()
    acc = np.tile(np.arange(64, dtype=np.float32), (blocks, 1))
    tiles = x.reshape(blocks, rounds, 64)
    for r in range(rounds):
        shared = tiles[:, r, :] + acc
        acc = acc + shared[:, ::-1] * np.float32(0.5)
    np.testing.assert_array_equal(got[1], acc.reshape(-1))


@pytest.mark.parametrize("n", [128 * 4 * 6, 128 * 4 * 6 - 77])
def test_loops_between_barriers_run_an_iteration_per_pass_with_the_step_forms_bytes(module_text, monkeypatch, n):
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # one worker: the blocks' atomics in one order
    x = np.random.default_rng(n).random(n, dtype=np.float32) * 4
    (mode, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "stride_sum",
        (4,),
        (128,),
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()
    expect = 0.0
    for g in range(4 * 128):
        v = np.float32(0)
        for i in range(g, n, 4 * 128):
            v = np.float32(v + x[i])
        w, count = v, 0
        while w > 1:
            w, count = np.float32(w * np.float32(0.5)), count + 1
        expect += float(v) + count
    np.testing.assert_allclose(got[1][0], expect, rtol=1e-4)


def test_a_kernel_too_large_to_copy_keeps_one_loop_per_pass_and_the_same_bytes(module_text, monkeypatch):
    monkeypatch.setenv(block_steps.UNIFORM_ENV, "0")  # the stride folded: the copies that read it as a parameter
    full = _block_step_text(module_text, "block_sum")
    assert ".u:" in full and ".f:" in full  # pass-start and flat copies
    monkeypatch.setattr(block_steps, "MAX_COPY_LINES", 10)
    lean = _block_step_text(module_text, "block_sum")
    assert ".u:" not in lean and ".f:" not in lean and len(lean) < len(full)
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")
    n = 256 * 5 - 3
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    (mode, got), (_, want) = _both(
        monkeypatch,
        module_text,
        "block_sum",
        (5,),
        (16, 16),
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("block", [(16, 16), (32, 8), (8, 8)])
def test_a_pass_reading_buffers_by_tile_index_runs_rows_in_chunks_with_the_step_forms_bytes(
    module_text, monkeypatch, block
):
    text = _block_step_text(module_text, "tile_sum")
    chunked = [line.split(":")[0] for line in text.split("\n") if line.endswith(".f.lc:")]
    assert chunked == ["at0.f.lc"]  # only the first pass reads x; the tree's levels read shared memory
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")  # one worker: the blocks' atomics in one order
    rows = 40
    n = 64 * rows - 9
    x = np.random.default_rng(block[0]).random(n, dtype=np.float32)
    grid = (64 // block[0], (rows + block[1] - 1) // block[1])
    (mode, got), (old_mode, want) = _both(
        monkeypatch,
        module_text,
        "tile_sum",
        grid,
        block,
        [x, np.zeros(1, np.float32)],
        struct.pack("<i4xQQ", n, X, Y),
    )
    assert (mode, old_mode) == (2, 3)
    assert got[1].tobytes() == want[1].tobytes()
    np.testing.assert_allclose(got[1][0], x.astype(np.float64).sum(), rtol=1e-4)


def _stride_reference(kernel: str, x: np.ndarray, grid: int, block: tuple[int, ...]) -> np.ndarray:
    """Each block's tree sum of its threads' grid-stride sums, in float32 as the kernels add (NumPy)."""
    n, size = len(x), int(np.prod(block))
    out = np.zeros(grid, np.float32)
    for b in range(grid):
        s = np.zeros(size, np.float32)
        for t in range(size):
            tx, ty = t % block[0], t // block[0]
            v = np.float32(ty if kernel == "stride_by_x" else 0)
            if kernel == "stride_linear":
                for i in range(b * size + t, n, size * grid):
                    v = np.float32(v + x[i] * np.float32(np.float32(1) + np.float32(0.001) * np.float32(t)))
            elif kernel == "stride_by_x":
                for i in range(b * block[0] + tx, n, block[0] * grid):
                    v = np.float32(v + x[i])
            elif kernel == "stride_down":
                for i in range(n - 1 - (b * size + t), -1, -size * grid):
                    v = np.float32(v * np.float32(0.5) + x[i])
            else:
                for i in range(b * size + t, n, size * grid):
                    v = np.float32(v * np.float32(0.5) + x[i])
            s[t] = v
        k = size // 2
        while k > 0:
            s[:k] = s[:k] + s[k : 2 * k]
            k //= 2
        out[b] = s[0]
    return out


@pytest.mark.parametrize(
    ("kernel", "block", "n"),
    [
        ("stride_linear", (128,), 128 * 3 * 8),  # every thread the same trip count: the twin in every pass
        ("stride_linear", (128,), 128 * 3 * 8 - 77),  # the last pass's threads differ: each thread's own index
        ("stride_linear", (16, 8), 128 * 3 * 5 + 9),  # 2D blocks indexed by the linear index
        ("stride_by_x", (16, 8), 16 * 3 * 7),  # the rows repeat an index: never the twin
        ("stride_down", (64,), 64 * 3 * 6 - 5),  # a descending index: never the twin
        ("stride_wide", (64,), 64 * 3 * 6),  # a size_t index
    ],
)
def test_a_grid_stride_index_read_as_thread_0s_plus_the_thread_index_keeps_the_step_forms_bytes(
    module_text, monkeypatch, kernel, block, n
):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    args = struct.pack("<q" if kernel == "stride_wide" else "<i4x", n) + struct.pack("<QQ", X, Y)
    (mode, got), (_, want) = _both(monkeypatch, module_text, kernel, (3,), block, [x, np.zeros(3, np.float32)], args)
    assert mode == 2 and got[1].tobytes() == want[1].tobytes()
    np.testing.assert_allclose(got[1], _stride_reference(kernel, x, 3, block), rtol=1e-5)  # contracted: FMAs


def test_the_fields_a_thread_index_feeds_read_thread_0s_value_plus_the_index(module_text):
    """The grid-stride index is read as the parameter plus the linear index; a kernel whose only field read at a
    pass's start is the tree's stride (the same in every thread) gets no such twin."""
    for kernel in ("stride_linear", "stride_wide", "stride_sum"):
        lines = _block_step_text(module_text, kernel).split("\n")
        twins = [line for line in lines if ".af = add " in line]
        assert twins and all("%__mneme_snap." in line for line in twins), kernel
        assert all("%__mneme_linear" in line or ".lx" in line for line in twins), kernel
    assert ".af = add " not in _block_step_text(module_text, "block_sum")
