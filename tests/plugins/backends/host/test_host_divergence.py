"""Frame fields proved alike in every thread of a block (divergence.py, issue 40 item 4): what the analysis proves
and refuses on real kernels, and that a kernel whose proved fields skip their folds gives the bytes of the form
that folds them (``MNEME_HOST_BLOCK_UNIFORM=0``), of the runtime's step form and NumPy's; which proved fields are
kept once per block (block_shared.py) and which stay per thread; which stops every thread of an interval reaches
alike (`divergence.steady_stops`: no fold of the resume points after such a pass)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.plugins.backends.host import block_shared, block_steps, divergence, steps

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
// after the barrier only thread 5 adds: thread 0 returns while thread 5 pauses before its atomic
extern "C" __global__ void late_adder(const float* x, float* out) {
  __shared__ float s[64];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * 64 + t];
  __syncthreads();
  if (t == 5) atomicAdd(out, s[0] + s[63]);
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


def _steady(text: str, kernel: str, monkeypatch) -> dict[int, set[int]]:
    """`divergence.steady_stops` of `kernel`'s step function, as `block_steps` asks it."""
    seen = []

    def spy(lines, start, end, slots):
        seen.append(real(lines, start, end, slots))
        return seen[-1]

    real = divergence.steady_stops
    monkeypatch.setattr(divergence, "steady_stops", spy)
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


FIELD = "{ [0 x <4 x i8>], i32 }"


def _step_function(first_interval: list[str], cases: str = "i32 1, label %__mneme_resume.1") -> list[str]:
    """A step function laid out for lanes: a frame field %f, the first interval's lines, then resume point 1 that
    reads %f and returns."""
    return [
        "define void @k(i1 %c, i32 %__mneme_linear, ptr %__mneme_frame, i32 %__mneme_resume, i64 %__mneme_frame_n) {",
        "__mneme_dispatch:",
        "  %__mneme_resume_at = getelementptr inbounds i32, ptr %__mneme_frame, i32 %__mneme_linear",
        f"  %f = getelementptr inbounds {FIELD}, ptr %__mneme_frame, i32 %__mneme_linear, i32 1",
        f"  switch i32 %__mneme_resume, label %bb [ {cases} ]",
        "bb:",
        *first_interval,
        "__mneme_resume.1:",
        "  %v = load i32, ptr %f, align 4",
        "  %w = add i32 %v, 1",
        "  store i32 %w, ptr %f, align 4",
        "  store i32 -1, ptr %__mneme_resume_at, align 4",
        "  ret void",
        "}",
    ]


def _shared(lines: list[str]) -> list[int]:
    return block_shared.share(lines, 0, len(lines) - 1, {"%f": (1, FIELD)}, {1})[1]


def test_a_field_stored_once_an_interval_is_kept_once_per_block_with_old_and_new_reads():
    barrier = ["  store i32 1, ptr %__mneme_resume_at, align 4", "  ret void"]
    lines = _step_function(["  store i32 7, ptr %f, align 4", "  %u = load i32, ptr %f, align 4", *barrier])
    out, shared, left = block_shared.share(lines, 0, len(lines) - 1, {"%f": (1, FIELD)}, {1})
    assert shared == [1] and left == {}
    text = "\n".join(out)
    assert "load i32, ptr %f.new" in text  # after the thread's own store: the value every thread stored
    assert "%v = load i32, ptr %f.old" in text  # at the pass's start: the value when it began
    assert "store i32 %w, ptr %f.new" in text


def test_a_field_stored_twice_on_a_path_or_read_after_a_store_on_some_paths_stays_per_thread():
    barrier = ["  store i32 1, ptr %__mneme_resume_at, align 4", "  ret void"]
    twice = _step_function(["  store i32 7, ptr %f, align 4", "  store i32 8, ptr %f, align 4", *barrier])
    assert _shared(twice) == []
    some = _step_function(
        [
            "  br i1 %c, label %a, label %b",
            "a:",
            "  store i32 7, ptr %f, align 4",
            "  br label %b",
            "b:",
            "  %u = load i32, ptr %f, align 4",
            *barrier,
        ]
    )
    assert _shared(some) == []
    once = _step_function(["  store i32 7, ptr %f, align 4", *barrier])
    assert _shared(once) == [1]
    yields = f"i32 {steps.YIELD_BIT | 1}, label %__mneme_resume.1"
    looped = _step_function(
        [
            "  store i32 7, ptr %f, align 4",
            f"  store i32 {steps.YIELD_BIT | 1}, ptr %__mneme_resume_at, align 4",
            "  ret void",
        ],
        yields,
    )
    assert _shared(looped) == []  # a thread stopped at a yield may store after another's next pass began


def test_a_tree_reaches_its_barriers_and_its_return_in_every_thread_alike(module_text, monkeypatch):
    steady = _steady(module_text, "tree", monkeypatch)
    first, loop = steady[0], [stops for point, stops in steady.items() if point > 0]
    assert len(first) == 1 and -1 not in first  # the start runs to the first barrier in every thread
    # from the first barrier and from the level's: the next level's barrier, or past the last level the return (thread
    # 0's store of the sum comes before it, in a block every thread runs on to)
    assert loop == [{max(first) + 1, -1}] * 2
    host = retargeted(module_text, "tree")
    text = block_steps.to_block_steps(host.text, "tree", host.params, host.static_shared)
    assert ".st.same:" in text  # the loops over the threads fold no resume point


def test_a_stop_only_some_threads_reach_is_not_steady_and_keeps_the_step_forms_bytes(module_text, monkeypatch):
    steady = _steady(module_text, "late_adder", monkeypatch)
    assert len(steady[0]) == 1 and -1 not in steady[0]
    # thread 0 returns, thread 5 pauses before its atomic: neither stop tells what the other threads did
    assert all(not stops for point, stops in steady.items() if point > 0)
    x = np.random.default_rng(5).random(64 * 3, dtype=np.float32)
    mode, got = _three(
        monkeypatch, module_text, "late_adder", (3,), (64,), [x, np.zeros(1, np.float32)], struct.pack("<QQ", X, Y)
    )
    assert mode == 2
    want = np.float32(0)
    for b in range(3):
        want = np.float32(want + np.float32(x[b * 64] + x[b * 64 + 63]))
    assert got[1][0] == want
