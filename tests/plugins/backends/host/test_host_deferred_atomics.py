"""Atomic updates nothing reads back, to memory the kernel reaches no other way, are gathered per worker on the host
(deferred_atomics.py, runtime_parts/deferred.inc): the sums, extremes and bit masks they make equal NumPy's, with
more addresses than a worker has slots too; an update whose old value is read, or whose memory the kernel also
loads, stays an atomic; a bad address still fails the launch; ``MNEME_HOST_DEFER_ATOMICS=0`` gives the same bytes."""

from __future__ import annotations

import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from host_launches import SPACING, launch, retargeted
from irbuild import build_cuda_ir

from mneme.core.errors import ExperimentError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import deferred_atomics
from mneme.plugins.backends.host.backend import HostBackend

BASE = 0x7E7000000000
SOURCE = r"""
// a block's sum, one atomic per block into one address
extern "C" __global__ void block_sums(int n, const float* x, float* out) {
  __shared__ float s[128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}
// one atomic per thread, of each integer kind, each into an address of its own parameter
extern "C" __global__ void int_ops(int n, const int* x, int* sum, int* top, int* low, unsigned* any,
                                   unsigned* all, unsigned* odd, unsigned long long* wide, double* dsum) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  atomicAdd(sum, v);
  atomicMax(top, v);
  atomicMin(low, v);
  atomicOr(any, 1u << (v & 31));
  atomicAnd(all, ~(1u << (v & 7)));
  atomicXor(odd, (unsigned)v);
  atomicAdd(wide, (unsigned long long)(v & 0xff));
  atomicAdd(dsum, (double)(v & 0xf) * 0.5);
}
// a histogram over more bins than a worker has slots
extern "C" __global__ void histogram(int n, const int* x, unsigned* bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[x[i] & 63], 1u);
}
// the old value read: each block's ticket is its place in the order the blocks took them
extern "C" __global__ void tickets(unsigned* counter, unsigned* order) {
  if (threadIdx.x == 0) order[blockIdx.x] = atomicAdd(counter, 1u);
}
// the memory read too (by the last thread of each block, after its own update)
extern "C" __global__ void add_then_read(float* acc, float* seen) {
  atomicAdd(acc, 1.0f);
  if (threadIdx.x == blockDim.x - 1) seen[blockIdx.x] = *acc;
}
"""


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    source = tmp_path_factory.mktemp("deferred") / "deferred.cu"
    source.write_text(SOURCE)
    return build_cuda_ir(source, opt="-O3").read_text()


def _marked(text: str, kernel: str) -> int:
    return deferred_atomics.mark(retargeted(text, kernel).text, kernel).count(deferred_atomics.SCOPE)


def _object(text: str, kernel: str) -> bytes:
    config = ExperimentConfiguration(grid=1, block=1)
    return HostBackend().compile(llvm.parse_assembly(text), kernel, config, "x86_64").data


def _block_sums(text: str, n: int, out: int = BASE + SPACING) -> tuple[np.ndarray, list[np.ndarray]]:
    """`block_sums` over n small integers (every order of the additions gives the same sum) into `out` (mapped
    where it is the second buffer's address): the input and the buffers after the launch."""
    x = (np.arange(n) % 8).astype(np.float32)
    buffers = [x, np.zeros(4, np.float32)] if out == BASE + SPACING else [x]
    args = struct.pack("<i4xQQ", n, BASE, out)
    return x, launch(text, "block_sums", (n // 128,), (128,), buffers, args, BASE)[1]


def test_a_block_sum_into_one_address_is_gathered_and_equals_numpy(text):
    assert _marked(text, "block_sums") == 1
    assert b"__mneme_defer_fadd_f32" in _object(text, "block_sums")
    x, (_, out) = _block_sums(text, 1 << 16)
    assert out[0] == np.float32(x.astype(np.float64).sum())


def test_every_integer_kind_and_a_double_sum_equal_numpy(text):
    assert _marked(text, "int_ops") == 8
    n = 20000
    x = np.random.default_rng(7).integers(-50000, 50000, n).astype(np.int32)
    start = [
        np.zeros(1, np.int32),
        np.full(1, -(2**31), np.int32),
        np.full(1, 2**31 - 1, np.int32),
        np.zeros(1, np.uint32),
        np.full(1, 0xFFFFFFFF, np.uint32),
        np.zeros(1, np.uint32),
        np.zeros(1, np.uint64),
        np.zeros(1, np.float64),
    ]
    args = struct.pack("<i4x9Q", n, *(BASE + k * SPACING for k in range(9)))
    _, out = launch(text, "int_ops", ((n + 255) // 256,), (256,), [x, *start], args, BASE)
    u = x.astype(np.int64)
    assert int(out[1][0]) == int(np.int64(u.sum()).astype(np.int32))
    assert out[2][0] == x.max() and out[3][0] == x.min()
    assert out[4][0] == np.bitwise_or.reduce(np.uint32(1) << (x.astype(np.uint32) & 31))
    assert out[5][0] == np.bitwise_and.reduce(~(np.uint32(1) << (x.astype(np.uint32) & 7)))
    assert out[6][0] == np.bitwise_xor.reduce(x.astype(np.uint32))
    assert out[7][0] == (u & 0xFF).sum()
    assert out[8][0] == ((u & 0xF) * 0.5).sum()  # halves of small integers: exact in any order


def test_more_addresses_than_slots_count_every_update(text):
    assert _marked(text, "histogram") == 1
    n = 50000
    x = np.random.default_rng(3).integers(0, 1 << 20, n).astype(np.int32)
    _, (_, bins) = launch(
        text,
        "histogram",
        ((n + 127) // 128,),
        (128,),
        [x, np.zeros(64, np.uint32)],
        struct.pack("<i4xQQ", n, BASE, BASE + SPACING),
        BASE,
    )
    np.testing.assert_array_equal(bins, np.bincount(x & 63, minlength=64).astype(np.uint32))


def test_an_update_whose_old_value_is_read_stays_an_atomic(text):
    assert _marked(text, "tickets") == 0
    blocks = 300
    _, (counter, order) = launch(
        text,
        "tickets",
        (blocks,),
        (32,),
        [np.zeros(1, np.uint32), np.zeros(blocks, np.uint32)],
        struct.pack("<QQ", BASE, BASE + SPACING),
        BASE,
    )
    assert counter[0] == blocks
    np.testing.assert_array_equal(np.sort(order), np.arange(blocks, dtype=np.uint32))


def test_an_update_to_memory_the_kernel_also_reads_stays_an_atomic(text):
    assert _marked(text, "add_then_read") == 0
    blocks = 40
    _, (acc, seen) = launch(
        text,
        "add_then_read",
        (blocks,),
        (64,),
        [np.zeros(1, np.float32), np.zeros(blocks, np.float32)],
        struct.pack("<QQ", BASE, BASE + SPACING),
        BASE,
    )
    assert acc[0] == 64 * blocks
    assert (seen >= 64).all()  # each block read after its own 64 updates


def test_switched_off_every_atomic_stays_and_the_sum_is_the_same(text, monkeypatch):
    monkeypatch.setenv(deferred_atomics.ENV, "0")
    assert _marked(text, "block_sums") == 0
    assert b"__mneme_defer" not in _object(text, "block_sums")
    x, (_, out) = _block_sums(text, 1 << 14)
    assert out[0] == np.float32(x.astype(np.float64).sum())


def test_a_gathered_update_to_an_unmapped_address_fails_the_launch(text):
    with pytest.raises(ExperimentError, match=r"invalid memory access \(SIGSEGV\)") as info:
        _block_sums(text, 1 << 12, out=BASE + 3 * SPACING)  # reserved, never mapped
    assert info.value.kind == "fault"
