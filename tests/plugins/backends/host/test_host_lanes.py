"""Threads of a block in lockstep groups on the host backend (lanes.py, issue 40 item 4): kernels with
loops give the same bytes as thread after thread (``MNEME_HOST_LANES=0``) and as NumPy, whatever the
block shape, divergence, local arrays or atomics; bounds checks stay element-exact."""

from __future__ import annotations

import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from host_launches import launch, retargeted
from irbuild import build_cuda_ir

from mneme.core.errors import ExperimentError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import grid_stride, lanes
from mneme.plugins.backends.host.backend import HostBackend

BASE = 0x7E3000000000
SOURCE = r"""
extern "C" __global__ void each(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stride(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}
// a trip count, a switch and an early return that differ from thread to thread
extern "C" __global__ void divergent(int n, const float* x, float* y) {
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < g % 7; k++) {
    switch ((g + k) % 4) {
      case 0: acc += x[(g + k) % n]; break;
      case 1: acc -= 0.5f * x[(g * 3 + k) % n]; break;
      case 2: if (acc > 2.0f) return; acc *= 1.25f; break;
      default: acc += k;
    }
  }
  y[g] = acc;
}
// a private array indexed by a run-time value stays in memory, one per thread
extern "C" __global__ void private_array(int n, const float* x, float* y) {
  float t[8];
  int g = blockIdx.x * blockDim.x + threadIdx.x, m = g % 5 + 4;
  for (int k = 0; k < m; k++) t[k] = x[(g + k) % n];
  float s = 0.0f;
  for (int k = 0; k < m; k++) s += t[(g * 5 + k * 3) % m] * (k + 1);
  if (g < n) y[g] = s;
}
// integer atomics in a loop: the counts do not depend on the order
extern "C" __global__ void histogram(int n, const int* v, int* counts) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) atomicAdd(&counts[v[i] & 15], 1);
}
// 80 KB of locals per thread: 16 lanes' copies would pass the cap on the worker's stack
extern "C" __global__ void big_private(int n, const float* x, float* y) {
  float t[20000];
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < 20000; k++) t[k] = x[(g + k) % n] + k;
  float s = 0.0f;
  for (int k = g % 3; k < 20000; k += 997) s += t[(k * 7 + g) % 20000];
  y[g] = s;
}
// a 3D block whose thread count is no multiple of the group width
extern "C" __global__ void shape3d(int* out) {
  int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int linear = blockIdx.x * blockDim.x * blockDim.y * blockDim.z + t;
  int s = 0;
  for (int k = 0; k <= threadIdx.y + threadIdx.z; k++) s = s * 3 + k;
  out[linear] = threadIdx.x * 10000 + threadIdx.y * 1000 + threadIdx.z * 100 + s;
}
"""


@pytest.fixture(autouse=True)
def _lockstep_not_flat(monkeypatch):
    """The grid-stride kernels here test lockstep groups, not the flat form that would take them first."""
    monkeypatch.setenv(grid_stride.ENV, "0")


@pytest.fixture(scope="module")
def module_text(tmp_path_factory):
    src = tmp_path_factory.mktemp("lanes") / "lanes.cu"
    src.write_text(SOURCE)
    return build_cuda_ir(src, opt="-O3").read_text()


@pytest.fixture
def device():
    dev = HostBackend().open_device(0)
    dev.reserve(BASE, 1 << 28)
    yield dev
    dev.close()


def _lockstep_text(text: str, kernel: str) -> str | None:
    host = retargeted(text, kernel)
    return lanes.to_lanes(host.text, kernel, host.params, lanes.DEFAULT_WIDTH)


def _run(text: str, kernel: str, grid, block, buffers: list[np.ndarray], args: bytes) -> list[np.ndarray]:
    """Launch `kernel` on a fresh device with `buffers` at BASE + k * 16 MiB; returns their contents afterwards."""
    return launch(text, kernel, grid, block, buffers, args, BASE)[1]


def _both(monkeypatch, *run_args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(lockstep result, thread-after-thread result)."""
    locked = _run(*run_args)
    monkeypatch.setenv(lanes.ENV, "0")
    single = _run(*run_args)
    monkeypatch.setenv(lanes.ENV, str(lanes.DEFAULT_WIDTH))
    return locked, single


X, Y = BASE, BASE + (16 << 20)


def test_kernels_with_loops_take_the_lockstep_form_and_straight_kernels_keep_the_thread_loop(module_text):
    for kernel in ("stride", "divergent", "private_array", "histogram", "shape3d"):
        assert _lockstep_text(module_text, kernel) is not None, kernel
    assert _lockstep_text(module_text, "each") is None  # no loop: the thread loop vectorizes as it is


@pytest.mark.parametrize("n", [1000, 4096 * 3 + 5])
def test_a_grid_stride_loop_gives_the_same_bytes_as_thread_after_thread_and_numpy(module_text, monkeypatch, n):
    rng = np.random.default_rng(1)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    args = struct.pack("<ifQQ", n, 2.5, X, Y)
    locked, single = _both(monkeypatch, module_text, "stride", (5,), (96,), [x, y], args)
    assert locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_allclose(locked[1], np.float32(2.5) * x + y, rtol=1e-6)  # the kernel's a * x + y is fused


def test_divergent_trip_counts_switches_and_early_returns_match_thread_after_thread(module_text, monkeypatch):
    n = 3000
    x = np.random.default_rng(2).random(n, dtype=np.float32) * 4
    y = np.full(n, -1.0, np.float32)
    locked, single = _both(monkeypatch, module_text, "divergent", (12,), (256,), [x, y], struct.pack("<i4xQQ", n, X, Y))
    assert locked[1].tobytes() == single[1].tobytes()
    assert (locked[1][::7] == 0.0).all()  # g % 7 == 0: no iteration, acc stays 0
    assert (locked[1] == -1.0).any()  # some threads returned early and left y alone


def test_each_thread_keeps_its_own_private_array(module_text, monkeypatch):
    n = 777
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    locked, single = _both(
        monkeypatch, module_text, "private_array", (7,), (128,), [x, y], struct.pack("<i4xQQ", n, X, Y)
    )
    want = np.zeros(n, np.float32)
    for g in range(n):  # in the kernel's order of additions
        m, s = g % 5 + 4, np.float32(0)
        for k in range(m):
            s = np.float32(s + x[(g + (g * 5 + k * 3) % m) % n] * np.float32(k + 1))
        want[g] = s
    assert locked[1].tobytes() == single[1].tobytes()
    np.testing.assert_allclose(locked[1], want, rtol=1e-5)  # multiply-adds may be fused


def test_atomics_in_a_loop_count_every_element(module_text, monkeypatch):
    n = 10007
    v = np.random.default_rng(3).integers(0, 1 << 20, n, dtype=np.int32)
    counts = np.zeros(16, np.int32)
    locked, single = _both(
        monkeypatch, module_text, "histogram", (3,), (200,), [v, counts], struct.pack("<i4xQQ", n, X, Y)
    )
    np.testing.assert_array_equal(locked[1], np.bincount(v & 15, minlength=16))
    np.testing.assert_array_equal(locked[1], single[1])


def test_a_kernel_whose_locals_times_the_lanes_pass_the_stack_cap_runs_thread_after_thread(module_text, monkeypatch):
    assert _lockstep_text(module_text, "big_private") is None
    monkeypatch.setattr(lanes, "MAX_LANE_BYTES", 1 << 30)
    assert _lockstep_text(module_text, "big_private") is not None  # the cap, not another refusal, kept it out
    monkeypatch.undo()
    n = 64
    x = np.arange(n, dtype=np.float32)
    (_, got) = _run(
        module_text, "big_private", (1,), (8,), [x, np.zeros(8, np.float32)], struct.pack("<i4xQQ", n, X, Y)
    )
    for g in range(8):
        t = x[(g + np.arange(20000)) % n] + np.arange(20000, dtype=np.float32)
        s = np.float32(0)
        for k in range(g % 3, 20000, 997):
            s = np.float32(s + t[(k * 7 + g) % 20000])
        assert got[g] == s


def test_a_3d_block_of_30_threads_gives_each_thread_its_own_index(module_text, monkeypatch):
    block = (5, 3, 2)
    out = np.full(2 * 30, -1, np.int32)
    locked, single = _both(monkeypatch, module_text, "shape3d", (2,), block, [out], struct.pack("<Q", X))
    want = []
    for _ in range(2):
        for z in range(2):
            for y in range(3):
                for x in range(5):
                    s = 0
                    for k in range(y + z + 1):
                        s = s * 3 + k
                    want.append(x * 10000 + y * 1000 + z * 100 + s)
    np.testing.assert_array_equal(locked[0], want)
    assert locked[0].tobytes() == single[0].tobytes()


def test_a_read_one_past_the_end_in_a_lockstep_loop_is_caught_at_its_exact_bytes(module_text, device):
    binary = HostBackend().compile(
        llvm.parse_assembly(module_text), "stride", ExperimentConfiguration(grid=1, block=1), "x86_64"
    )
    loaded = device.load(binary)
    device.map(X, 4000)
    device.map(Y, 4004)
    device.write(X, bytes(4000))
    device.write(Y, bytes(4004))
    with pytest.raises(ExperimentError, match=r"read out of bounds: bytes 4000\.\.4003 of the 4000-byte buffer"):
        device.launch(loaded, (2,), (64,), 0, struct.pack("<ifQQ", 1001, 2.0, X, Y))


def test_a_loop_over_a_volatile_load_compiles_and_runs_unmarked():
    """LLVM's vectorizer asserts on a volatile access in a loop marked parallel; such a lane loop stays unmarked."""
    from kernel_timeout_cases import SPIN_IF_WIDE

    text = _lockstep_text(SPIN_IF_WIDE, "spin_if_wide")
    assert text is not None and "parallel_accesses" in text  # other lane loops of the kernel are still marked
    spin_loop = next(line for line in text.split("\n") if "load volatile" in line)
    assert "llvm.access.group" not in spin_loop
    flag, out = np.zeros(1, np.int32), np.full(32, -1, np.int32)
    (_, got) = _run(SPIN_IF_WIDE, "spin_if_wide", (1,), (32,), [flag, out], struct.pack("<QQ", X, Y))
    np.testing.assert_array_equal(got, np.arange(32))
