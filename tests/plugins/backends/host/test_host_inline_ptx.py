"""One-instruction inline PTX from CUDA's fp16/bf16 headers runs on the host with the GPU's results (issue 28, point 1)."""

from __future__ import annotations

import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available
from paths import DATA

from mneme import capture
from mneme.plugins.backends.host import inline_ptx

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "realkernels" / "half_ptx.cu"


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (no NaN in the inputs)."""
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _f16(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint16).view(np.float16)


def test_half_and_bfloat16_conversions_and_arithmetic_match_numpy(tmp_path):
    rng = np.random.default_rng(5)
    n = 256
    x = np.concatenate([rng.uniform(-70000, 70000, 64), rng.uniform(-3, 3, 128), rng.normal(0, 1e-5, 32),
                        np.array([0.5, 1.5, 2.5, -2.5, 65504, 65520, -0.0, 1e-8] * 4)]).astype(np.float32)  # fmt: skip
    y = rng.uniform(-100, 100, n).astype(np.float32)
    args = [x, y, np.zeros(n, np.uint16), np.zeros(n, np.float32), np.zeros(4 * n, np.int32),
            np.zeros(3 * n, np.uint16), np.zeros(2 * n, np.uint32), np.zeros(n, np.uint16), n]  # fmt: skip
    outputs: dict = {}
    capture.capture(str(build_cuda_ir(SOURCE)), "half_conversions", 2, 128, args, tmp_path, backend="host",
                    outputs=outputs)  # fmt: skip
    with np.errstate(over="ignore"):
        a, b = x.astype(np.float16), y.astype(np.float16)  # NumPy rounds to nearest even, as cvt.rn does
    assert outputs[2].tobytes() == a.tobytes()
    np.testing.assert_array_equal(outputs[3], a.astype(np.float32))
    wide = a.astype(np.float64)
    expect = np.stack([np.trunc(wide), np.round(wide), np.floor(wide), np.ceil(wide)], axis=1)
    expect = np.clip(np.nan_to_num(expect, posinf=2**31 - 1, neginf=-(2**31)), -(2**31), 2**31 - 1)  # PTX saturates
    np.testing.assert_array_equal(outputs[4].reshape(n, 4), expect.astype(np.int64))
    sums = _f16(outputs[5]).reshape(n, 3)
    with np.errstate(over="ignore", invalid="ignore"):
        for column, value in enumerate([a + b, a - b, a * b]):  # float16 arithmetic, correctly rounded
            np.testing.assert_array_equal(sums[:, column], value)
    pairs = outputs[6].reshape(n, 2)
    low, high = _f16(pairs & 0xFFFF), _f16(pairs >> 16)
    np.testing.assert_array_equal(low[:, 0], a)  # __floats2half2_rn(x, y): x in the low half
    np.testing.assert_array_equal(high[:, 0], b)
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(low[:, 1], a + b)
        np.testing.assert_array_equal(high[:, 1], b + a)
    np.testing.assert_array_equal(outputs[7], _bf16_bits(x))


def test_only_forms_with_exact_host_results_are_implemented():
    assert inline_ptx.body("cvt.rn.f16.f32 $0, $1;", "i16", ["float"]) is not None
    assert inline_ptx.body("cvt.rz.f16.f32 $0, $1;", "i16", ["float"]) is None  # directed rounding: not exact here
    assert inline_ptx.body("cvt.rn.f16.f32 $0, $1;", "i32", ["float"]) is None  # call type disagrees with the PTX
    assert inline_ptx.body("fma.rn.f16 $0, $1, $2, $3;", "i16", ["i16", "i16", "i16"]) is None
    assert inline_ptx.body("{ add.f32 $0, $1, $2; add.f32 $0, $0, $2; }", "float", ["float", "float"]) is None
    # inputs are numbered after the outputs
    assert inline_ptx.body("mov.b32 {$0,$1}, $2;", "{ i16, i16 }", ["i32"]) is not None
    assert inline_ptx.body("ld.global.nc.v2.u64 {$0, $1}, [$2];", "{ i64, i64 }", ["ptr"]) is not None
    assert inline_ptx.body("ld.global.nc.v2.u64 {$0, $1}, [$1];", "{ i64, i64 }", ["ptr"]) is None
    assert inline_ptx.body("ld.shared.u32 $0, [$1];", "i32", ["ptr"]) is None  # another state space: not read here


def test_smid_read_by_inline_asm_is_below_nsmid(tmp_path):
    source = tmp_path / "smid.cu"
    source.write_text('extern "C" __global__ void where(unsigned* out) {\n'
                      '  unsigned sm, count;\n'
                      '  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));\n'
                      '  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(count));\n'
                      '  out[2 * (blockIdx.x * blockDim.x + threadIdx.x)] = sm;\n'
                      '  out[2 * (blockIdx.x * blockDim.x + threadIdx.x) + 1] = count;\n}\n')  # fmt: skip
    outputs: dict = {}
    capture.capture(str(build_cuda_ir(source)), "where", 3, 64, [np.full(2 * 192, 99, np.uint32)], tmp_path / "db",
                    backend="host", outputs=outputs)  # fmt: skip
    sm, count = outputs[0][0::2], outputs[0][1::2]
    assert (count >= 1).all() and (sm < count).all()


def test_non_coherent_loads_and_half2_halves_match_numpy(tmp_path):
    rng = np.random.default_rng(8)
    src = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    pairs = rng.integers(0, 2**63, 128, dtype=np.uint64)
    h2 = rng.uniform(-8, 8, 128).astype(np.float16)
    outputs: dict = {}
    args = [src, pairs, h2, np.zeros(64, np.uint32), np.zeros(128, np.uint64), np.zeros(128, np.float32)]
    capture.capture(str(build_cuda_ir(SOURCE.with_name("ptx_loads.cu"))), "nc_loads", 1, 64, args, tmp_path,
                    backend="host", outputs=outputs)  # fmt: skip
    np.testing.assert_array_equal(outputs[3], src)
    np.testing.assert_array_equal(outputs[4].reshape(64, 2), pairs.reshape(64, 2)[:, ::-1])
    np.testing.assert_array_equal(outputs[5], h2.astype(np.float32))
