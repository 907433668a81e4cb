"""One-instruction inline PTX from CUDA's fp16/bf16 headers runs on the host with the GPU's results (issue 28, point 1)."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from irbuild import build_cuda_ir, cuda_available
from paths import DATA

from mneme import capture
from mneme.plugins.backends.host import inline_ptx, intrinsics, ptx_blocks

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
    x = np.concatenate(
        [
            rng.uniform(-70000, 70000, 64),
            rng.uniform(-3, 3, 128),
            rng.normal(0, 1e-5, 32),
            np.array([0.5, 1.5, 2.5, -2.5, 65504, 65520, -0.0, 1e-8] * 4),
        ]
    ).astype(np.float32)
    y = rng.uniform(-100, 100, n).astype(np.float32)
    args = [
        x,
        y,
        np.zeros(n, np.uint16),
        np.zeros(n, np.float32),
        np.zeros(4 * n, np.int32),
        np.zeros(3 * n, np.uint16),
        np.zeros(2 * n, np.uint32),
        np.zeros(n, np.uint16),
        n,
    ]
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE)), "half_conversions", 2, 128, args, tmp_path, backend="host", outputs=outputs
    )
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
    source.write_text(
        'extern "C" __global__ void where(unsigned* out) {\n'
        "  unsigned sm, count;\n"
        '  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));\n'
        '  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(count));\n'
        "  out[2 * (blockIdx.x * blockDim.x + threadIdx.x)] = sm;\n"
        "  out[2 * (blockIdx.x * blockDim.x + threadIdx.x) + 1] = count;\n}\n"
    )
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(source)),
        "where",
        3,
        64,
        [np.full(2 * 192, 99, np.uint32)],
        tmp_path / "db",
        backend="host",
        outputs=outputs,
    )
    sm, count = outputs[0][0::2], outputs[0][1::2]
    assert (count >= 1).all() and (sm < count).all()


def test_non_coherent_loads_and_half2_halves_match_numpy(tmp_path):
    rng = np.random.default_rng(8)
    src = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    pairs = rng.integers(0, 2**63, 128, dtype=np.uint64)
    h2 = rng.uniform(-8, 8, 128).astype(np.float16)
    outputs: dict = {}
    args = [src, pairs, h2, np.zeros(64, np.uint32), np.zeros(128, np.uint64), np.zeros(128, np.float32)]
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("ptx_loads.cu"))),
        "nc_loads",
        1,
        64,
        args,
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    np.testing.assert_array_equal(outputs[3], src)
    np.testing.assert_array_equal(outputs[4].reshape(64, 2), pairs.reshape(64, 2)[:, ::-1])
    np.testing.assert_array_equal(outputs[5], h2.astype(np.float32))


def _segment_sums(x: np.ndarray, width: int) -> np.ndarray:
    """The shuffle-down tree of `segment_sums` in NumPy: a lane adds the lane `offset` above it while that
    lane is inside its segment of `width` lanes, and keeps its value otherwise."""
    x = x.copy()
    lane = np.arange(x.size) % width
    offset = 1
    while offset < width:
        shifted = np.roll(x, -offset)
        x = np.where(lane + offset < width, x + shifted, x)
        offset *= 2
    return x


@pytest.mark.parametrize("width", [32, 8])
def test_ptx_blocks_with_predicated_shuffles_match_numpy(tmp_path, width):
    rng = np.random.default_rng(width)
    n = 128
    xf = rng.uniform(-10, 10, n).astype(np.float32)
    xu = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    xl = rng.integers(0, 2**64, n, dtype=np.uint64)
    a, b = (rng.integers(-1000, 1000, n, dtype=np.int32) for _ in range(2))
    args = [
        xf,
        xu,
        xl,
        a,
        b,
        np.zeros(n, np.float32),
        np.zeros(n, np.uint32),
        np.zeros(n, np.uint64),
        np.zeros(n, np.int32),
        width,
    ]
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("ptx_blocks.cu"))),
        "segment_sums",
        2,
        64,
        args,
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outputs[5], _segment_sums(xf, width))  # the same f32 additions, in order
        np.testing.assert_array_equal(outputs[6], _segment_sums(xu, width))  # wrapping, as add.u32 does
        np.testing.assert_array_equal(outputs[7], _segment_sums(xl, width))
    np.testing.assert_array_equal(outputs[8], np.maximum(a, b))


def _fp8_values(byte: np.ndarray, exponent_bits: int) -> np.ndarray:
    """The value of each fp8 byte (1 sign bit, `exponent_bits`, the rest mantissa), from the format's definition."""
    mantissa_bits = 7 - exponent_bits
    bias = 2 ** (exponent_bits - 1) - 1
    sign = np.where(byte & 0x80, -1.0, 1.0)
    e = (byte >> mantissa_bits) & (2**exponent_bits - 1)
    m = (byte & (2**mantissa_bits - 1)) / 2**mantissa_bits
    value = sign * np.where(e == 0, m * 2.0 ** (1 - bias), (1 + m) * 2.0 ** (e.astype(np.float64) - bias))
    if exponent_bits == 4:  # e4m3: no infinities; S.1111.111 is NaN
        return np.where((byte & 0x7F) == 0x7F, np.nan, value)
    top = e == 2**exponent_bits - 1  # e5m2: infinities and NaN, as in IEEE formats
    return np.where(top & (m == 0), sign * np.inf, np.where(top, np.nan, value))


def test_fp8_pairs_widen_to_half_pairs_exactly(tmp_path):
    pairs = np.arange(0, 1 << 16, 257, dtype=np.uint16)  # every byte value, in both halves
    pairs = np.concatenate([pairs, np.arange(256, dtype=np.uint16) << 8 | np.arange(256, dtype=np.uint16)[::-1]])
    n = pairs.size
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("ptx_blocks.cu"))),
        "fp8_to_half",
        (n + 63) // 64,
        64,
        [pairs, np.zeros(n, np.uint32), np.zeros(n, np.uint32), n],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    for index, exponent_bits in ((1, 4), (2, 5)):
        got = outputs[index]
        for half, byte in (((got & 0xFFFF), pairs & 0xFF), ((got >> 16), pairs >> 8)):
            value = half.astype(np.uint16).view(np.float16).astype(np.float64)
            want = _fp8_values(byte.astype(np.int64), exponent_bits)
            np.testing.assert_array_equal(value, want)
            assert (half[np.isnan(want)] == 0x7FFF).all()  # one canonical NaN: no sign, no payload


def test_ptx_blocks_read_only_what_they_implement():
    reduce = (
        "{ .reg .f32 r; .reg .pred p; shfl.sync.down.b32 r|p, $1, $2, 31, -1; @p add.f32 r, r, $1; mov.f32 $0, r; }"
    )
    assert ptx_blocks.body(reduce, "float", ["float", "i32"]) is not None
    assert ptx_blocks.body(reduce.replace("add.f32", "add.ftz.f32"), "float", ["float", "i32"]) is None
    assert ptx_blocks.body(reduce.replace("mov.f32 $0, r;", ""), "float", ["float", "i32"]) is None  # $0 unset
    assert ptx_blocks.body(reduce.replace(".reg .f32 r;", ""), "float", ["float", "i32"]) is None  # undeclared
    assert ptx_blocks.body("{ .reg .u32 r; mov.u32 r, %laneid; mov.u32 $0, r; }", "i32", []) is None
    assert ptx_blocks.body("{ .reg .u32 r; mov.u32 r, $1; mov.u32 $0, r; }", "float", ["float"]) is not None
    assert ptx_blocks.body("{ .reg .u64 r; mov.u64 r, $1; mov.u64 $0, r; }", "i32", ["i32"]) is None  # widths differ
    # "+r": an output written only under a guard keeps the caller's value, which the reader is not given
    guarded = "{ .reg .pred p; setp.ne.u32 p, $1, 0; @p mov.u32 $0, $2; }"
    assert ptx_blocks.body(guarded, "i32", ["i32", "i32", "i32"]) is None
    # a bare mul may be fused with the add after it by ptxas: only mul.rn is read
    fused = "{ .reg .f32 r; mul.f32 r, $1, $2; add.f32 $0, r, $3; }"
    assert ptx_blocks.body(fused, "float", ["float"] * 3) is None
    assert ptx_blocks.body(fused.replace("mul.f32", "mul.rn.f32"), "float", ["float"] * 3) is not None
    # float immediates keep their bits, a signalling NaN's payload included
    snan = ptx_blocks.body("{ .reg .f32 x; mov.f32 x, 0f7F800001; mov.f32 $0, x; }", "float", [])
    assert snan[-1] == "ret float 0x7FF0000020000000"


_POOLS = {"U": ["a", "b", "$1"], "X": ["x", "y", "$2"], "W": ["w", "$3"], "P": ["p", "q"]}
_PRELUDE = (
    "{ .reg .u32 a, b; .reg .f32 x, y; .reg .u64 w; .reg .pred p, q; mov.u32 a, $1; mov.u32 b, $1; "
    "mov.f32 x, $2; mov.f32 y, $2; mov.u64 w, $3; setp.eq.u32 p, a, b; setp.ne.u32 q, a, b; "
)
_STATEMENTS = st.sampled_from(
    [
        "mov.u32 u, U",
        "mov.u32 u, 0xffffffff",
        "mov.f32 x, 0f3F800000",
        "add.u32 u, U, U",
        "sub.s32 u, U, U",
        "mul.lo.s32 u, U, U",
        "min.s32 u, U, U",
        "max.u32 u, U, U",
        "xor.b32 u, U, U",
        "and.b32 u, U, 255",
        "setp.lt.u32 p, U, U",
        "setp.ge.s32 p, U, U",
        "selp.u32 u, U, U, P",
        "shfl.sync.down.b32 u|p, U, U, 31, -1",
        "shfl.sync.bfly.b32 x|p, X, 1, 31, -1",
        "shfl.sync.idx.b32 u, U, 0, 7199, 0xffffffff",
        "add.f32 x, X, X",
        "max.f32 x, X, X",
        "mul.rn.f32 x, X, X",
        "setp.gtu.f32 p, X, X",
        "selp.f32 x, X, X, P",
        "mov.b64 {u, u}, W",
        "mov.b64 w, {U, U}",
        "add.u64 w, W, W",
        "@P add.f32 x, X, X",
        "@!P mov.u32 u, U",
        "@P add.u64 w, W, 1",
        "mov.b32 u, X",
        "add.ftz.f32 x, X, X",
        "mov.u32 u, %laneid",
        "mul.wide.u32 w, U, U",
    ]
)
_FINISH = {"i32": "mov.u32 $0, U;", "float": "mov.f32 $0, X;", "i64": "mov.u64 $0, W;"}


@st.composite
def _blocks(draw):
    """A block over declared registers (mostly well-typed, sometimes not), then its output written."""

    def fill(template: str) -> str:
        for pool, names in _POOLS.items():
            while pool in template:
                template = template.replace(pool, draw(st.sampled_from(names)), 1)
        for dest, names in (("u", ["a", "b"]), ("x", ["x", "y"]), ("w", ["w"]), ("p", ["p", "q"])):
            template = re.sub(rf"(?<![\w.%]){dest}(?![\w])", lambda _m: draw(st.sampled_from(names)), template)
        return template

    ret = draw(st.sampled_from(sorted(_FINISH)))
    lines = [fill(t) + ";" for t in draw(st.lists(_STATEMENTS, min_size=1, max_size=10))]
    return _PRELUDE + " ".join(lines) + " " + fill(_FINISH[ret]) + " }", ret, ["i32", "float", "i64"]


@settings(max_examples=400, deadline=None)
@given(_blocks())
def test_every_body_the_block_reader_writes_is_valid_ir(block):
    # Inline asm comes from recordings other people made: the reader answers None or a verified body, never raises.
    text, ret, args = block
    body = ptx_blocks.body(text, ret, args)
    if body is None:
        return
    header = intrinsics.Signature(ret, args).header("f")
    module = "declare i64 @__mneme_shfl(i32, i32, i32, i32, i32)\n" + header + "\n" + "\n".join(body) + "\n}\n"
    llvm.parse_assembly(module).verify()


def _nearest_fp8(x: np.ndarray, exponent_bits: int) -> np.ndarray:
    """The fp8 code of each value by search: the nearest finite fp8 value (ties to the even code), the largest
    finite one beyond it (`.satfinite`, infinities too), NaN as 0x7F."""
    codes = np.arange(0x80)
    values = _fp8_values(codes, exponent_bits)
    finite = codes[np.isfinite(values)]
    values = values[finite]
    with np.errstate(invalid="ignore"):  # signalling NaNs (from f16 payloads) say so when cast
        magnitude = np.nan_to_num(np.abs(x.astype(np.float64)), nan=0.0)  # NaN is answered below
    distance = np.abs(values[None, :] - np.minimum(magnitude, values.max())[:, None])
    nearest = distance == distance.min(axis=1, keepdims=True)
    # ties: of two nearest codes, the even one (its mantissa's last bit is 0)
    chosen = np.where(nearest & (finite[None, :] % 2 == 0), finite[None, :], -1).max(axis=1)
    chosen = np.where(nearest.sum(axis=1) == 1, finite[np.argmax(nearest, axis=1)], chosen)
    out = chosen | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), 0x7F, out).astype(np.uint16)


def test_f32_and_f16_pairs_narrow_to_fp8_rounded_to_nearest_even_and_saturated(tmp_path):
    rng = np.random.default_rng(3)
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    midpoints = []
    for exponent_bits in (4, 5):  # exact ties between neighbouring fp8 values, and just beside them
        v = _fp8_values(np.arange(0x80), exponent_bits)
        v = np.sort(v[np.isfinite(v)])
        mid = (v[1:] + v[:-1]) / 2
        midpoints += [
            mid,
            np.nextafter(mid.astype(np.float32), np.float32(0)),
            np.nextafter(mid.astype(np.float32), np.float32(np.inf)),
        ]
    x = np.concatenate(
        [
            every_half.astype(np.float32),
            *[m.astype(np.float32) for m in midpoints],
            rng.normal(0, 100, 4096).astype(np.float32),
            np.float32([1e-30, -1e-30, 3e38, -np.inf, 1e6]),
        ]
    )
    x = np.concatenate([x, -x])
    if x.size % 2:
        x = np.append(x, np.float32(0))
    n = x.size // 2
    halves = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("ptx_blocks.cu"))),
        "to_fp8",
        (n + 127) // 128,
        128,
        [x, halves, *(np.zeros(n, np.uint16) for _ in range(4)), n],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    pairs = x.reshape(n, 2)  # .x to the low byte, .y to the high byte
    h = np.stack(
        [(halves & 0xFFFF).astype(np.uint16).view(np.float16), (halves >> 16).astype(np.uint16).view(np.float16)],
        axis=1,
    ).astype(np.float32)
    for index, source, exponent_bits in ((2, pairs, 4), (3, pairs, 5), (4, h, 4), (5, h, 5)):
        want = _nearest_fp8(source[:, 0], exponent_bits) | _nearest_fp8(source[:, 1], exponent_bits) << 8
        np.testing.assert_array_equal(outputs[index], want)


def _fields(words: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """Each 32-bit word's fields of `bits` bits, lowest first, widened as `signed` says (int64)."""
    raw = words.astype(np.uint32).view(np.uint8 if bits == 8 else np.uint16).reshape(words.size, 32 // bits)
    return raw.view(np.int8 if bits == 8 else np.int16).astype(np.int64) if signed else raw.astype(np.int64)


def _dot_model(a, b, c, op: str, a_signed: bool, b_signed: bool) -> np.ndarray:
    """PTX's dp4a / dp2a.lo / dp2a.hi in NumPy: c plus the products of the widened fields, modulo 2^32."""
    b_bytes = _fields(b, 8, b_signed)
    if op == "dp4a":
        sums = (_fields(a, 8, a_signed) * b_bytes).sum(axis=1)
    else:
        first = 2 if op == "dp2a.hi" else 0
        sums = (_fields(a, 16, a_signed) * b_bytes[:, first : first + 2]).sum(axis=1)
    return ((sums + c.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def test_int8_dot_products_match_numpy_for_every_signedness(tmp_path):
    rng = np.random.default_rng(61)
    n = 256
    a, b, c = (rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(3))
    # the extremes of every field: all ones, 0x7F and 0x80 bytes, 0x7FFF and 0x8000 halves
    a[:4] = np.array([0xFFFFFFFF, 0x7F7F7F7F, 0x80808080, 0x7FFF8000], np.uint32).view(np.int32)
    b[:4] = np.array([0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0xFFFFFFFF], np.uint32).view(np.int32)
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("dot_products.cu"))),
        "dots",
        2,
        128,
        [a, b, c, np.zeros(8 * n, np.int32)],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    got = outputs[3].reshape(n, 8)
    forms = [
        ("dp4a", True, True),
        ("dp4a", False, False),
        ("dp2a.lo", True, True),
        ("dp2a.hi", True, True),
        ("dp2a.lo", False, False),
        ("dp2a.hi", False, False),
        ("dp4a", True, False),
        ("dp2a.hi", False, True),
    ]
    for column, (op, a_signed, b_signed) in enumerate(forms):
        np.testing.assert_array_equal(got[:, column], _dot_model(a, b, c, op, a_signed, b_signed), err_msg=op)


def _video_model(a, b, op: str, bits: int, signed: bool, saturate: bool = False) -> np.ndarray:
    """A SIMD video instruction in NumPy: per field of `bits` bits, both sides widened as `signed` says (the
    destination's too), combined, clamped with `saturate`, truncated into the field."""
    x, y = _fields(a, bits, signed), _fields(b, bits, signed)
    compare = {"eq": np.equal, "lt": np.less, "ge": np.greater_equal}
    if op in compare:
        t = compare[op](x, y).astype(np.int64)
    else:
        t = {"add": x + y, "sub": x - y, "max": np.maximum(x, y), "min": np.minimum(x, y), "absdiff": abs(x - y)}[op]
    if saturate:
        t = np.clip(t, -(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else np.clip(t, 0, (1 << bits) - 1)
    t &= (1 << bits) - 1
    return (t << (np.arange(32 // bits, dtype=np.int64) * bits)).sum(axis=1).astype(np.uint32)


def test_simd_video_instructions_match_numpy_on_every_field(tmp_path):
    rng = np.random.default_rng(47)
    n = 256
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    a[:6] = [0, 0xFFFFFFFF, 0x7F7F7F7F, 0x80808080, 0x7FFF8000, 0x01020304]
    b[:6] = [0xFFFFFFFF, 0x01010101, 0x80808080, 0x7F7F7F7F, 0x80007FFF, 0x01020304]
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE.with_name("simd_video.cu"))),
        "video",
        2,
        128,
        [a, b, np.zeros(13 * n, np.uint32)],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    got = outputs[2].reshape(n, 13)
    want = [
        _video_model(a, b, "add", 8, False, True),
        _video_model(a, b, "sub", 8, True, True),
        _video_model(a, b, "sub", 8, False),
        _video_model(a, b, "max", 8, True),
        _video_model(a, b, "min", 16, False),
        _video_model(a, b, "absdiff", 8, False),
        _video_model(a, b, "add", 16, True, True),
        _video_model(a, b, "eq", 8, False),
        _video_model(a, b, "lt", 8, True),
        _video_model(a, b, "ge", 16, False),
        _video_model(a, b, "sub", 8, True, True),  # __vsubss4
        _video_model(a, b, "eq", 8, False) * np.uint32(0xFF),  # __vcmpeq4: 0xff where equal
        _video_model(a, b, "sub", 8, False),  # __vsub4
    ]
    for column, expected in enumerate(want):
        np.testing.assert_array_equal(got[:, column], expected, err_msg=f"column {column}")
