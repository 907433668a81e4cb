"""Out-of-bounds accesses of every kind fail the verified launch on the host backend, element-exactly (issue 36).

Each kernel (clang-19 CUDA at test time, or LLVM IR text for the masked intrinsics clang does not emit
for NVPTX) makes one access at an index it is given; `x`, a buffer of 1000 ints, starts a page, so one
element past its end lands in the page's slack, where nothing faults. In bounds, the launch runs and
its result is checked; one element past the end, it fails naming the buffer, the bytes past the end
and the argument that points to the buffer.
"""

from __future__ import annotations

import re
import struct

import pytest
from irbuild import build_cuda_ir, build_hip_ir, cuda_available, hip_available
from paths import DATA

from mneme.core import ir
from mneme.core.errors import ExperimentError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host.backend import HostBackend

SOURCE = DATA / "host" / "out_of_bounds.cu"
BASE = 0x7E1000000000  # X_BASE in out_of_bounds.cu
X, OUT = BASE, BASE + 64 * 1024
N = 1000  # ints in x
X_VALUES = list(range(100, 100 + N))
BUFFER = r"of the 4000-byte buffer at 0x7e1000000000 \(the pointer at byte 0 of the arguments\), past its end"

needs_clang = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])


@pytest.fixture
def device():
    dev = HostBackend().open_device(0)
    dev.reserve(BASE, 1 << 20)
    dev.map(X, 4 * N)
    dev.map(OUT, 4 * 2 * N)
    yield dev
    dev.close()


def _reset(dev) -> None:
    dev.write(X, struct.pack(f"<{N}i", *X_VALUES))
    dev.write(OUT, struct.pack(f"<{2 * N}i", *range(-1, -1 - 2 * N, -1)))


@pytest.fixture(scope="module")
def cuda_ir() -> str:
    if not cuda_available()[0]:
        pytest.skip(cuda_available()[1])
    return build_cuda_ir(SOURCE).read_text()


def _launch(dev, text: str, kernel: str, args: bytes) -> None:
    """A fresh load, so the launch is a first one: the one a replay verifies, which runs the checked copy."""
    binary = HostBackend().compile(ir.load(text), kernel, ExperimentConfiguration(grid=1, block=1), "x86_64")
    _reset(dev)
    dev.launch(dev.load(binary), 1, 1, 0, args)


def _ints(dev, addr: int, count: int) -> list[int]:
    return list(struct.unpack(f"<{count}i", dev.read(addr, 4 * count)))


def _args(index: int) -> bytes:
    return struct.pack("<QQi", X, OUT, index)


# kernel, index in bounds, index one element past the end, what the message says, bytes past the end
CASES = [
    ("rmw_add_zero", N - 1, N, "accessed atomically", "4000..4003"),
    ("compare_and_swap", N - 1, N, "accessed atomically", "4000..4003"),
    ("block_atomic_add", N - 1, N, "accessed atomically", "4000..4003"),
    ("vector_load", N // 4 - 1, N // 4, "read", "4000..4015"),
    ("vector_store", N // 4 - 1, N // 4, "wrote", "4000..4015"),
    ("store_canary_bytes", N - 1, N, "wrote", "4000..4003"),
    ("copy_from", N, N + 1, "read", "4000..4003"),
    ("copy_into", N, N + 1, "wrote", "4000..4003"),
    ("fill_canary", N, N + 1, "wrote", "4000..4003"),
]


@needs_clang
@pytest.mark.parametrize("kernel,inside,past,verb,bytes_", CASES, ids=[c[0] for c in CASES])
def test_one_element_past_the_end_fails_naming_the_buffer_and_in_bounds_runs(
    device, cuda_ir, kernel, inside, past, verb, bytes_
):
    _launch(device, cuda_ir, kernel, _args(inside))
    x, out = _ints(device, X, N), _ints(device, OUT, 8)
    expected_x, expected_out = list(X_VALUES), list(range(-1, -9, -1))
    if kernel in ("rmw_add_zero", "compare_and_swap"):
        expected_out[0] = X_VALUES[inside]
    elif kernel == "block_atomic_add":
        assert out[0] == X_VALUES[inside]  # the bits of x[i], read and written back unchanged (+0.0 on a denormal)
        expected_out[0] = out[0]
    elif kernel == "vector_load":
        expected_out[:4] = X_VALUES[4 * inside : 4 * inside + 4]
    elif kernel == "vector_store":
        expected_x[4 * inside : 4 * inside + 4] = [-1, -2, -3, -4]
    elif kernel == "store_canary_bytes":
        expected_x[inside] = struct.unpack("<i", b"\xa5" * 4)[0]
    elif kernel == "copy_from":
        expected_out = X_VALUES[:8]
        assert _ints(device, OUT, N) == X_VALUES
    elif kernel == "copy_into":
        expected_x = list(range(-1, -1 - N, -1))
    elif kernel == "fill_canary":
        expected_x = [struct.unpack("<i", b"\xa5" * 4)[0]] * N
    assert (x, out) == (expected_x, expected_out)

    with pytest.raises(ExperimentError, match=rf"{verb} out of bounds: bytes {re.escape(bytes_)} {BUFFER}"):
        _launch(device, cuda_ir, kernel, _args(past))


@needs_clang
def test_a_load_from_a_constant_address_one_element_past_the_end_fails(device, cuda_ir):
    _launch(device, cuda_ir, "constant_address_in_bounds", struct.pack("<QQ", X, OUT))
    assert _ints(device, OUT, 1) == [X_VALUES[N - 1]]
    with pytest.raises(ExperimentError, match=rf"read out of bounds: bytes 4000\.\.4003 {BUFFER}"):
        _launch(device, cuda_ir, "constant_address_past_end", struct.pack("<QQ", X, OUT))


# -- masked vector intrinsics: LLVM IR text, as LLVM's vectorizers write them ----------------------------------

MASKED = """target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

; lane k touches x[996 + k], on where 996 + k < n: with n = 1000 the four lanes past the end are off
define void @masked_load(ptr %x, ptr %out, i32 %n) {
  %base = getelementptr i32, ptr %x, i64 996
  %mask = call <8 x i1> @lanes(i32 %n)
  %v = call <8 x i32> @llvm.masked.load.v8i32.p0(ptr %base, i32 4, <8 x i1> %mask, <8 x i32> zeroinitializer)
  store <8 x i32> %v, ptr %out, align 4
  ret void
}

define void @masked_store(ptr %x, ptr %out, i32 %n) {
  %base = getelementptr i32, ptr %x, i64 996
  %mask = call <8 x i1> @lanes(i32 %n)
  call void @llvm.masked.store.v8i32.p0(<8 x i32> <i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8>, ptr %base, i32 4, <8 x i1> %mask)
  ret void
}

define void @masked_gather(ptr %x, ptr %out, i32 %n) {
  %ptrs = getelementptr i32, ptr %x, <8 x i64> <i64 996, i64 997, i64 998, i64 999, i64 1000, i64 1001, i64 1002, i64 1003>
  %mask = call <8 x i1> @lanes(i32 %n)
  %v = call <8 x i32> @llvm.masked.gather.v8i32.v8p0(<8 x ptr> %ptrs, i32 4, <8 x i1> %mask, <8 x i32> zeroinitializer)
  store <8 x i32> %v, ptr %out, align 4
  ret void
}

define void @masked_scatter(ptr %x, ptr %out, i32 %n) {
  %ptrs = getelementptr i32, ptr %x, <8 x i64> <i64 996, i64 997, i64 998, i64 999, i64 1000, i64 1001, i64 1002, i64 1003>
  %mask = call <8 x i1> @lanes(i32 %n)
  call void @llvm.masked.scatter.v8i32.v8p0(<8 x i32> <i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8>, <8 x ptr> %ptrs, i32 4, <8 x i1> %mask)
  ret void
}

define void @expand_load(ptr %x, ptr %out, i32 %n) {
  %base = getelementptr i32, ptr %x, i64 996
  %mask = call <8 x i1> @lanes(i32 %n)
  %v = call <8 x i32> @llvm.masked.expandload.v8i32(ptr %base, <8 x i1> %mask, <8 x i32> zeroinitializer)
  store <8 x i32> %v, ptr %out, align 4
  ret void
}

define void @compress_store(ptr %x, ptr %out, i32 %n) {
  %base = getelementptr i32, ptr %x, i64 996
  %mask = call <8 x i1> @lanes(i32 %n)
  call void @llvm.masked.compressstore.v8i32(<8 x i32> <i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8>, ptr %base, <8 x i1> %mask)
  ret void
}

define internal <8 x i1> @lanes(i32 %n) noinline {
  %ins = insertelement <8 x i32> poison, i32 %n, i64 0
  %splat = shufflevector <8 x i32> %ins, <8 x i32> poison, <8 x i32> zeroinitializer
  %mask = icmp slt <8 x i32> <i32 996, i32 997, i32 998, i32 999, i32 1000, i32 1001, i32 1002, i32 1003>, %splat
  ret <8 x i1> %mask
}

declare <8 x i32> @llvm.masked.load.v8i32.p0(ptr, i32 immarg, <8 x i1>, <8 x i32>)
declare void @llvm.masked.store.v8i32.p0(<8 x i32>, ptr, i32 immarg, <8 x i1>)
declare <8 x i32> @llvm.masked.gather.v8i32.v8p0(<8 x ptr>, i32 immarg, <8 x i1>, <8 x i32>)
declare void @llvm.masked.scatter.v8i32.v8p0(<8 x i32>, <8 x ptr>, i32 immarg, <8 x i1>)
declare <8 x i32> @llvm.masked.expandload.v8i32(ptr, <8 x i1>, <8 x i32>)
declare void @llvm.masked.compressstore.v8i32(<8 x i32>, ptr, <8 x i1>)
"""

MASKED_CASES = ["masked_load", "masked_store", "masked_gather", "masked_scatter", "expand_load", "compress_store"]


@pytest.mark.parametrize("kernel", MASKED_CASES)
def test_masked_lanes_past_the_end_fail_only_when_the_mask_switches_them_on(device, kernel):
    _launch(device, MASKED, kernel, _args(N))  # lanes 996..999 on, 1000..1003 off
    x, out = _ints(device, X, N), _ints(device, OUT, 8)
    if kernel.endswith("load") or kernel.endswith("gather"):
        assert (x, out) == (X_VALUES, X_VALUES[996:] + [0, 0, 0, 0])
    else:
        assert (x[:996], x[996:], out[0]) == (X_VALUES[:996], [1, 2, 3, 4], -1)
    verb = "read" if kernel.endswith(("load", "gather")) else "wrote"
    with pytest.raises(ExperimentError, match=rf"{verb} out of bounds: bytes 4000\.\.4003 {BUFFER}"):
        _launch(device, MASKED, kernel, _args(N + 1))


# -- AMDGPU atomics (clang-19 HIP) ---------------------------------------------------------------------------


@pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
@pytest.mark.parametrize("kernel", ["global_fadd", "wrapping_increment"])
def test_amdgpu_atomics_one_element_past_the_end_fail_and_in_bounds_run(device, kernel):
    text = build_hip_ir(DATA / "hip" / "out_of_bounds_atomics.hip").read_text()
    _launch(device, text, kernel, _args(N - 1))
    x, out = _ints(device, X, N), _ints(device, OUT, 1)
    if kernel == "global_fadd":  # x[i] + 0.0: the same bits (a denormal), returned as they were
        assert (x, out) == (X_VALUES, [X_VALUES[N - 1]])
    else:  # x[i] + 1 (it wraps only at 0xffffffff)
        assert (x[:-1], x[-1], out) == (X_VALUES[:-1], X_VALUES[-1] + 1, [X_VALUES[-1]])
    with pytest.raises(ExperimentError, match=rf"accessed atomically out of bounds: bytes 4000\.\.4003 {BUFFER}"):
        _launch(device, text, kernel, _args(N))


# -- the whole flow: a recording whose kernel reads past a buffer atomically is not verified ------------------


@needs_clang
def test_a_replay_of_an_atomic_read_one_element_past_the_end_is_not_verified(tmp_path, monkeypatch):
    import numpy as np

    from mneme import capture
    from mneme.core.executor import BaseExecutor
    from mneme.plugins.backends.host import boundscheck

    x = np.arange(100, 100 + N, dtype=np.int32)
    monkeypatch.setenv(boundscheck.ENV, "0")  # captured as before the atomics were checked: no error
    db = capture.capture(
        build_cuda_ir(SOURCE),
        "rmw_add_zero",
        1,
        1,
        [x, np.zeros(4, np.int32), np.int32(N)],
        tmp_path / "rec",
        backend="host",
    )
    monkeypatch.delenv(boundscheck.ENV)
    with BaseExecutor(db) as ex:
        result = ex.execute(ex.default_config())
    assert not result.verified and not result.ok
    assert re.search(
        r"accessed atomically out of bounds: bytes 4000\.\.4003 of the 4000-byte buffer at 0x[0-9a-f]+ "
        r"\(the pointer at byte 0 of the arguments\)",
        result.error,
    ), result.error
