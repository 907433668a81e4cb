"""Grid-stride loops walked in a row (grid_stride_walk.py, issue 40 item 4): which loops the IR shows
independent, what the launch-time check decides for buffers apart, the same, or overlapping, and the same bytes
as the flat form's order and thread after thread on two workers."""

from __future__ import annotations

import ctypes
import re
import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.core.errors import ExperimentError
from mneme.plugins.backends.host import grid_stride, grid_stride_walk, lanes, retarget

BASE = 0x7E4000000000
SPACING = 16 << 20
SOURCE = r"""
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stencil(int n, const float* x, float* y) {
  for (int i = threadIdx.x + blockDim.x * blockIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
// the element after a thread's own: a neighbour's on the GPU, never the same thread's other iteration
extern "C" __global__ void shift(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i + 1] = 2.0f * x[i];
}
// one element every thread reads: its address does not depend on the index
extern "C" __global__ void broadcast(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[0] + i;
}
// pairs of floats: an 8-byte step, 4-byte accesses
extern "C" __global__ void pairs(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[2 * i] = x[2 * i + 1];
    y[2 * i + 1] = x[2 * i];
  }
}
extern "C" __global__ void doubles64(long long n, const double* x, double* y) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
    y[i] = x[i] * 0.5;
}
// not shown independent: an index read from memory, an index not affine, one address every iteration writes
extern "C" __global__ void gather(int n, const int* idx, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[idx[i]];
}
extern "C" __global__ void running(int n, int m, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i % m] = y[i % m] * 0.5f + i;
}
// an index made unsigned before it is widened: not the index's value where i + 1 would be negative
extern "C" __global__ void unsigned_next(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[(unsigned)(i + 1)];
}
extern "C" __global__ void last(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) if (x[i] > 0.5f) y[0] = x[i];
}
"""


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("walk") / "walk.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


def _flat_text(text: str, kernel: str) -> str | None:
    host = retargeted(text, kernel)
    return grid_stride.to_flat(host.text, kernel, host.params, bool(host.flags & retarget.FLAG_BLOCK_RUNS))


def _walk_sites(text: str, kernel: str) -> list[grid_stride_walk.Site] | None:
    """The sites the flat form found in `kernel`'s loop (None: its iterations were not shown independent)."""
    seen = []
    original = grid_stride_walk.sites

    def spy(*args):
        seen.append(original(*args))
        return seen[-1]

    grid_stride_walk.sites = spy
    try:
        assert _flat_text(text, kernel) is not None, kernel
    finally:
        grid_stride_walk.sites = original
    assert len(seen) == 1
    return seen[0]


def test_loops_of_affine_accesses_are_walked_and_the_others_keep_their_order(module_text):
    saxpy = _walk_sites(module_text, "saxpy")
    assert sorted((s.store, s.coef, s.const, s.size) for s in saxpy) == [
        (False, 4, 0, 4),
        (False, 4, 0, 4),
        (True, 4, 0, 4),
    ]
    stencil = _walk_sites(module_text, "stencil")
    assert sorted((s.store, s.coef, s.const) for s in stencil) == [
        (False, 4, -4),
        (False, 4, 0),
        (False, 4, 4),
        (True, 4, 0),
    ]
    # y + 1 is computed once, before the loop (clang hoists it): the store's base is that value
    shift = sorted((s.store, s.coef, s.const) for s in _walk_sites(module_text, "shift"))
    assert shift == [(False, 4, 0), (True, 4, 0)]
    assert sorted((s.store, s.coef, s.const) for s in _walk_sites(module_text, "broadcast")) == [
        (False, 0, 0),
        (True, 4, 0),
    ]
    assert sorted((s.store, s.coef, s.const) for s in _walk_sites(module_text, "pairs")) == [
        (False, 8, 0),
        (False, 8, 4),
        (True, 8, 0),
        (True, 8, 4),
    ]
    assert sorted((s.store, s.coef, s.size) for s in _walk_sites(module_text, "doubles64")) == [
        (False, 8, 8),
        (True, 8, 8),
    ]
    for kernel in ("gather", "running", "unsigned_next"):
        assert _walk_sites(module_text, kernel) is None, kernel
    assert "__mneme_walk" not in _flat_text(module_text, "gather")
    # one address every iteration may write: found, and the launch-time check refuses it (below)
    assert [(s.store, s.coef) for s in _walk_sites(module_text, "last") if s.store] == [(True, 0)]


def _walk_steps(text: str, kernel: str, block: int, grid: int, args: list) -> int:
    """What `kernel`'s walk function returns for a launch of `grid` x `block` with `args` (ctypes values): its
    code alone, compiled with the block and grid sizes as the special registers' values."""
    flat = _flat_text(text, kernel)
    start = flat.index(f"define internal i64 @{kernel}{grid_stride_walk.SUFFIX}(")
    function = flat[start : flat.index("\n}", start) + 2]
    function = re.sub(r"\) #\d+ \{", ") {", function.replace("define internal i64", "define i64", 1), count=1)
    function = re.sub(r", ![-\w.]+ ![0-9]+", "", function)
    module = "\n".join(
        [
            *re.findall(r"(?m)^target (?:datalayout|triple) = .*$", flat),
            function,
            f"define i32 @__mneme.nvvm.read.ptx.sreg.ntid.x() {{\n  ret i32 {block}\n}}",
            f"define i32 @__mneme.nvvm.read.ptx.sreg.nctaid.x() {{\n  ret i32 {grid}\n}}",
        ]
    )
    parsed = llvm.parse_assembly(module)
    parsed.verify()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(parsed, target)
    engine.finalize_object()
    address = engine.get_function_address(f"{kernel}{grid_stride_walk.SUFFIX}")
    types = [type(a) for a in args] + [ctypes.c_int32] * 8
    walk = ctypes.CFUNCTYPE(ctypes.c_int64, *types)(address)
    result = walk(*args, *[ctypes.c_int32(0)] * 8)
    del engine
    return result


def test_the_launch_check_walks_buffers_apart_or_the_same_and_keeps_overlapping_ones_in_order(module_text):
    block, grid = 64, 4
    width = block * grid * 4  # S in bytes: a thread's iterations lie this far apart
    n = 10_000
    steps = -(-n // (block * grid))

    def saxpy(x: int, y: int) -> int:
        return _walk_steps(
            module_text,
            "saxpy",
            block,
            grid,
            [ctypes.c_int32(n), ctypes.c_float(2.0), ctypes.c_uint64(x), ctypes.c_uint64(y)],
        )

    assert saxpy(BASE, BASE + SPACING) == steps  # apart
    assert saxpy(BASE, BASE) == steps  # in place: each thread reads and writes its own elements only
    assert saxpy(BASE + width - 4, BASE) == steps  # x[i] is y[i + S - 1]: another thread's element
    assert saxpy(BASE + width, BASE) == 0  # x[i] is y[i + S]: the same thread's next iteration writes it
    assert saxpy(BASE, BASE + width) == 0  # y[i] is x[i + S]: the same thread read it an iteration earlier
    assert saxpy(BASE + 2 * width, BASE) == 0
    assert saxpy(BASE + 4 * n, BASE) == steps  # x starts where y ends: no byte of the two ranges meets
    for count in (0, -5):  # nothing to run: the flat form's order (it returns at once)
        assert (
            _walk_steps(
                module_text,
                "saxpy",
                block,
                grid,
                [ctypes.c_int32(count), ctypes.c_float(2.0), ctypes.c_uint64(BASE), ctypes.c_uint64(BASE + SPACING)],
            )
            == 0
        )

    def shift(x: int, y: int) -> int:
        return _walk_steps(
            module_text, "shift", block, grid, [ctypes.c_int32(n), ctypes.c_uint64(x), ctypes.c_uint64(y)]
        )

    assert shift(BASE, BASE) == steps  # y[i + 1] = x[i] in place: the next thread's element
    assert shift(BASE, BASE + width - 4) == 0  # y[i + 1] is x[i + S]: the thread's own next iteration reads it
    assert shift(BASE, BASE + width - 8) == steps  # y[i + 1] is x[i + S - 1]: another thread's element
    last = [ctypes.c_int32(n), ctypes.c_uint64(BASE), ctypes.c_uint64(BASE + SPACING)]
    assert _walk_steps(module_text, "last", block, grid, last) == 0  # y[0]: every iteration's, in order


def _run(monkeypatch, text, kernel, grid, block, buffers, args, **env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        return launch(text, kernel, grid, block, buffers, args, BASE)[1]
    finally:
        for name in env:
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("n", "grid", "block"), [(100_003, 8, 64), (4096 * 3 + 5, 7, 64), (50, 4, 32), (1, 2, 32)])
def test_walked_loops_give_the_bytes_of_the_flat_order_and_of_thread_after_thread(
    module_text, monkeypatch, n, grid, block
):
    monkeypatch.setenv("MNEME_HOST_THREADS", "2")
    rng = np.random.default_rng(n)
    x, y = rng.random(n + 1, dtype=np.float32), rng.random(n + 1, dtype=np.float32)
    cases = [
        ("saxpy", struct.pack("<ifQQ", n, 2.5, BASE, BASE + SPACING), [x, y]),
        ("stencil", struct.pack("<i4xQQ", n, BASE, BASE + SPACING), [x, y]),
        ("shift", struct.pack("<i4xQQ", n, BASE, BASE + SPACING), [x, y]),
        ("broadcast", struct.pack("<i4xQQ", n, BASE, BASE + SPACING), [x, y]),
        ("pairs", struct.pack("<i4xQQ", n // 2, BASE, BASE + SPACING), [x, y]),
        (
            "doubles64",
            struct.pack("<qQQ", n // 2, BASE, BASE + SPACING),
            [rng.random(n // 2 + 1), rng.random(n // 2 + 1)],
        ),
    ]
    for kernel, args, buffers in cases:
        walked = _run(monkeypatch, module_text, kernel, (grid,), (block,), buffers, args)
        ordered = _run(
            monkeypatch, module_text, kernel, (grid,), (block,), buffers, args, **{grid_stride_walk.ENV: "0"}
        )
        single = _run(
            monkeypatch, module_text, kernel, (grid,), (block,), buffers, args, **{grid_stride.ENV: "0", lanes.ENV: "0"}
        )
        assert walked[1].tobytes() == ordered[1].tobytes() == single[1].tobytes(), kernel
    walked = _run(monkeypatch, module_text, "saxpy", (grid,), (block,), [x, y], cases[0][1])
    np.testing.assert_allclose(walked[1][:n], np.float32(2.5) * x[:n] + y[:n], rtol=1e-6)
    assert walked[1][n] == y[n]  # nothing past n


def test_in_place_updates_walk_and_stay_exact(module_text, monkeypatch):
    """saxpy with x and y the same buffer (y = 3y): the launch check lets it walk; every element once."""
    monkeypatch.setenv("MNEME_HOST_THREADS", "2")
    n = 70_001
    y = np.arange(n, dtype=np.float32)
    out = _run(monkeypatch, module_text, "saxpy", (6,), (128,), [y], struct.pack("<ifQQ", n, 2.0, BASE, BASE))
    np.testing.assert_array_equal(out[0], 3 * y)


def test_a_fault_in_a_walked_piece_names_the_block_of_its_index(module_text):
    x, y = np.zeros(10_000, np.float32), np.zeros(10_001, np.float32)  # x is one float short of n = 10001
    with pytest.raises(
        ExperimentError, match=r"read out of bounds: bytes 40000\.\.40003 of the 40000-byte buffer"
    ) as err:
        launch(module_text, "saxpy", (3,), (64,), [x, y], struct.pack("<ifQQ", 10_001, 2.0, BASE, BASE + SPACING), BASE)
    assert "block (0, 0, 0)" in str(err.value)  # i = 10000: thread 10000 % 192 = 16 of the 3 x 64 grid


def test_one_worker_walks_the_index_space_in_order(module_text, monkeypatch):
    """What shows the walk is taken at run time: saxpy with x one float past y (y[i] = 2 y[i + 1] + y[i]; the
    check lets it walk: a neighbour's element, never the thread's own other iteration). One worker walking in
    order reads every y[i + 1] before it is written. In the flat form's order the worker's two claims of 32 blocks
    each run every step, so the second claim's last thread at step k (i = 2047 + 2048 k) reads y[i + 1], the first
    claim's at step k + 1, already written."""
    monkeypatch.setenv("MNEME_HOST_THREADS", "1")
    n = 5000
    y = np.random.default_rng(3).random(n + 1, dtype=np.float32)
    args = struct.pack("<ifQQ", n, 2.0, BASE + 4, BASE)
    walked = _run(monkeypatch, module_text, "saxpy", (64,), (32,), [y], args)[0]
    ordered = _run(monkeypatch, module_text, "saxpy", (64,), (32,), [y], args, **{grid_stride_walk.ENV: "0"})[0]
    in_order = y.copy()
    in_order[:n] = np.float32(2.0) * y[1:] + y[:n]  # every y[i + 1] as it was before the launch
    np.testing.assert_array_equal(walked, in_order)
    assert walked.tobytes() != ordered.tobytes()
