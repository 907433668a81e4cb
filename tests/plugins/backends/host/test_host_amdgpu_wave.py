"""The AMDGPU intrinsics everyday HIP code uses run on the host with AMD's semantics: dot products,
compare ballots, lane reads, DPP, permutes, swizzles, permlanes, the ROCm device libraries' wave
primitives and clocks. Each kernel of tests/data/hip/wave_intrinsics.hip, built by clang-19 at -O3
for gfx90a (wave64) and gfx1100 (wave32), runs on every lane of two blocks and is checked against a
NumPy model of the ISA written here."""

from __future__ import annotations

import numpy as np
import pytest

from irbuild import build_hip_ir, hip_available

from mneme import capture
from paths import DATA

pytestmark = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])

SOURCE = DATA / "hip" / "wave_intrinsics.hip"
ARCHS = {"gfx90a": 64, "gfx1100": 32}
N = 128  # two blocks of 64 work-items
rng = np.random.default_rng(40)


@pytest.fixture(params=sorted(ARCHS), scope="module")
def arch(request):
    return request.param


def _run(tmp_path, arch, kernel, args, *, replay=False):
    ir = build_hip_ir(SOURCE, arch=arch, opt="-O3")
    outputs = {}
    db = capture.capture(ir, kernel, 2, 64, args, tmp_path / kernel, backend="host", outputs=outputs)
    if replay:
        from mneme.core.executor import BaseExecutor

        with BaseExecutor(db) as ex:
            result = ex.execute(ex.default_config())
        assert result.ok and result.verified, result.error
    return outputs


def _waves(values, wave):
    return np.asarray(values).reshape(-1, wave)


def _wrap32(x):
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def _parts(x, bits, signed):
    """The 32 // bits packed fields of each int32 in `x`, lowest first, as int64."""
    u = np.asarray(x).view(np.uint32).astype(np.int64)
    fields = [(u >> (bits * k)) & ((1 << bits) - 1) for k in range(32 // bits)]
    if signed:
        fields = [np.where(f >= 1 << (bits - 1), f - (1 << bits), f) for f in fields]
    return fields


def _dot(a, b, c, bits, sa, sb, sc, clamp):
    total = sum(p * q for p, q in zip(_parts(a, bits, sa), _parts(b, bits, sb)))
    total = total + (np.asarray(c).astype(np.int64) if sc else np.asarray(c).view(np.uint32).astype(np.int64))
    if clamp:
        lo, hi = (-(1 << 31), (1 << 31) - 1) if sc else (0, (1 << 32) - 1)
        return _wrap32(np.clip(total, lo, hi))
    return _wrap32(total)


def test_dot_products_sum_packed_products_wrapping_or_saturating(tmp_path, arch):
    a = rng.integers(-(1 << 31), 1 << 31, N).astype(np.int32)
    b = rng.integers(-(1 << 31), 1 << 31, N).astype(np.int32)
    c = rng.integers(-(1 << 31), 1 << 31, N).astype(np.int32)
    c[:16] = np.int32(2**31 - 5)  # near the edges: the clamped forms saturate, the others wrap
    c[16:32] = np.int32(-(2**31) + 5)
    halves = rng.uniform(-8, 8, (N, 2)).astype(np.float16)
    if ARCHS[arch] == 64:
        a[64:] = halves.view(np.int32).reshape(-1)[64:]  # finite halves for fdot2
        b[64:] = rng.uniform(-8, 8, (N, 2)).astype(np.float16).view(np.int32).reshape(-1)[64:]
    fc = rng.uniform(-50, 50, N).astype(np.float32)
    fc[70:80] = 0.25
    columns = 11 if ARCHS[arch] == 64 else 3
    out = _run(tmp_path, arch, "dot_products", [a, b, c, fc, np.zeros(N * columns, np.int32)])[4].reshape(N, columns)
    if ARCHS[arch] == 32:  # gfx11's mixed-sign forms
        np.testing.assert_array_equal(out[:, 0], _dot(a, b, c, 8, True, False, True, False))
        np.testing.assert_array_equal(out[:, 1], _dot(a, b, c, 8, False, True, True, True))
        np.testing.assert_array_equal(out[:, 2], _dot(a, b, c, 4, True, True, True, False))
        return
    want = [
        _dot(a, b, c, 16, True, True, True, False),
        _dot(a, b, c, 16, True, True, True, True),
        _dot(a, b, c, 16, False, False, False, True),
        _dot(a, b, c, 8, True, True, True, False),
        _dot(a, b, c, 8, True, True, True, True),
        _dot(a, b, c, 8, False, False, False, False),
        _dot(a, b, c, 8, False, False, False, True),
        _dot(a, b, c, 4, True, True, True, False),
        _dot(a, b, c, 4, False, False, False, True),
    ]
    for k, column in enumerate(want):
        np.testing.assert_array_equal(out[:, k], column, err_msg=f"column {k}")
    assert (out[:16, 4] == 2**31 - 1).any() or (out[:16, 1] == 2**31 - 1).any()  # the inputs reach saturation
    ha, hb = (
        a[64:].view(np.float16).reshape(-1, 2).astype(np.float64),
        b[64:].view(np.float16).reshape(-1, 2).astype(np.float64),
    )
    exact = (ha[:, 0] * hb[:, 0] + ha[:, 1] * hb[:, 1]) + fc[64:].astype(np.float64)
    np.testing.assert_array_equal(out[64:, 9].view(np.float32), exact.astype(np.float32))
    np.testing.assert_array_equal(out[64:, 10].view(np.float32), np.clip(exact, 0, 1).astype(np.float32))


def _ballot(pred, wave):
    masks = [sum(1 << lane for lane in range(wave) if p[lane]) for p in _waves(pred, wave)]
    return np.repeat(np.array(masks, dtype=np.uint64), wave)


def test_compare_ballots_follow_llvm_predicates_including_unordered(tmp_path, arch):
    wave = ARCHS[arch]
    f = rng.uniform(-1, 1, N).astype(np.float32)
    g = rng.uniform(-1, 1, N).astype(np.float32)
    g[::5] = f[::5]
    f[::7], g[3::11] = np.nan, np.nan
    v = rng.integers(-4, 4, N).astype(np.int32)
    w = rng.integers(-4, 4, N).astype(np.int32)
    w[::3] = v[::3] * 3
    out = _run(tmp_path, arch, "compare_ballots", [f, g, v, w, np.zeros(N * 7, np.uint64)])[4].reshape(N, 7)
    with np.errstate(invalid="ignore"):
        want = [
            f > 0,
            f < g,
            np.isnan(f) | np.isnan(g),
            (f == g) | np.isnan(f) | np.isnan(g),
            v.view(np.uint32) < w.view(np.uint32),
            v <= w,
            v.astype(np.int64) * 3 == w,
        ]
    for k, pred in enumerate(want):
        np.testing.assert_array_equal(out[:, k], _ballot(pred, wave), err_msg=f"column {k}")


def test_lane_reads_counts_and_wave_size_queries(tmp_path, arch):
    wave = ARCHS[arch]
    v = rng.integers(-1000, 1000, N).astype(np.int32)
    mask = np.array([0xA5A5F00F, 0x0FF0135F], np.uint32)
    src = 13
    out = _run(tmp_path, arch, "lane_reads", [v, mask, src, np.zeros(N * 8, np.int32)])[3].reshape(N, 8)
    lane = np.arange(N) % wave
    base = np.arange(N) - lane
    below = [(1 << int(l)) - 1 for l in lane]
    lo = np.array([bin(int(mask[0]) & b & 0xFFFFFFFF).count("1") for b in below])
    hi = np.array([bin(int(mask[1]) & (b >> 32)).count("1") for b in below])
    np.testing.assert_array_equal(out[:, 0], v[base + src])
    np.testing.assert_array_equal(out[:, 1], v[base])
    np.testing.assert_array_equal(out[:, 2], lo)
    np.testing.assert_array_equal(out[:, 3], hi + lo + 5)
    assert (out[:, 4] == wave).all() and (out[:, 5] == wave).all()
    np.testing.assert_array_equal(out[:, 6], lane)
    np.testing.assert_array_equal(out[:, 7], v[base + src + 1] * 2)


# DPP cases of the .hip file: (control, row mask, bank mask, bound_ctrl).
DPP_CASES = {
    64: [
        (0x1B, 15, 15, False),
        (0xE4, 15, 15, False),
        (0x101, 15, 15, False),
        (0x103, 15, 15, True),
        (0x10F, 15, 15, False),
        (0x111, 15, 15, False),
        (0x118, 15, 15, True),
        (0x121, 15, 15, False),
        (0x12F, 15, 15, False),
        (0x130, 15, 15, False),
        (0x134, 15, 15, False),
        (0x138, 15, 15, True),
        (0x13C, 15, 15, False),
        (0x140, 15, 15, False),
        (0x141, 15, 15, False),
        (0x142, 0xA, 15, False),
        (0x143, 0xC, 15, False),
        (0x111, 0x5, 0x6, False),
        (0x142, 15, 15, True),
    ],
    32: [
        (0x1B, 15, 15, False),
        (0x101, 15, 15, False),
        (0x112, 15, 15, True),
        (0x125, 15, 15, False),
        (0x140, 15, 15, False),
        (0x141, 0x1, 15, False),
        (0x153, 15, 15, False),
        (0x165, 15, 15, False),
        (0x111, 0x2, 0x9, True),
    ],
}


def _dpp_source(ctrl, lane, wave):
    """(source lane, whether it exists) of DPP control `ctrl` for `lane` (the ISA's DPP_CTRL table)."""
    row, i, n = lane & ~15, lane & 15, ctrl & 15
    if ctrl < 0x100:
        return (lane & ~3) | ((ctrl >> (2 * (lane & 3))) & 3), True
    kind = ctrl & ~15
    if kind == 0x100:
        return row + i + n, i + n < 16
    if kind == 0x110:
        return row + i - n, i - n >= 0
    if kind == 0x120:
        return row + ((i - n) & 15), True
    table = {
        0x130: (lane + 1, lane + 1 < wave),
        0x134: ((lane + 1) % wave, True),
        0x138: (lane - 1, lane > 0),
        0x13C: ((lane - 1) % wave, True),
        0x140: (row + 15 - i, True),
        0x141: ((lane & ~7) + 7 - (lane & 7), True),
        0x142: (row - 1, lane >= 16),
        0x143: (31, lane >= 32),
    }
    if ctrl in table:
        return table[ctrl]
    if kind == 0x150:
        return row + n, True
    if kind == 0x160:
        return row + (i ^ n), True
    raise ValueError(hex(ctrl))


def _dpp(v, old, ctrl, rows, banks, bound, wave):
    out = old.copy()
    for w0 in range(0, len(v), wave):
        for lane in range(wave):
            if not (rows >> (lane // 16)) & 1 or not (banks >> ((lane // 4) % 4)) & 1:
                continue
            src, ok = _dpp_source(ctrl, lane, wave)
            if ok:
                out[w0 + lane] = v[w0 + src]
            elif bound:
                out[w0 + lane] = 0
    return out


def test_dpp_moves_and_update_dpp_read_rows_banks_and_bound_ctrl_like_the_isa(tmp_path, arch):
    wave = ARCHS[arch]
    cases = DPP_CASES[wave]
    v = rng.integers(1, 1 << 20, N).astype(np.int32)
    old = -np.arange(N, dtype=np.int32) - 1
    out = _run(tmp_path, arch, "dpp_moves", [v, old, np.zeros(N * len(cases), np.int32)], replay=True)
    got = out[2].reshape(N, len(cases))
    for k, (ctrl, rows, banks, bound) in enumerate(cases):
        np.testing.assert_array_equal(got[:, k], _dpp(v, old, ctrl, rows, banks, bound, wave), err_msg=f"DPP {ctrl:#x}")


def _swizzle(v, offset, wave):
    out = np.empty_like(v)
    for j in range(len(v)):
        lane = j % wave
        if offset >= 0x8000:
            src = (lane & ~3) | ((offset >> (2 * (lane & 3))) & 3)
        else:
            src = (lane & ~31) | ((((lane & 31) & (offset & 31)) | ((offset >> 5) & 31)) ^ ((offset >> 10) & 31))
        out[j] = v[j - lane + src]
    return out


def test_permutes_swizzles_and_permlanes_move_values_between_lanes(tmp_path, arch):
    wave = ARCHS[arch]
    v = rng.integers(1, 1 << 30, N).astype(np.int32)
    lanes = rng.integers(0, wave, N).astype(np.int32)
    lanes[:8] = 5  # several lanes send to lane 5: the highest wins
    columns = 6 if wave == 64 else 9
    out = _run(tmp_path, arch, "permutes", [v, lanes, np.zeros(N * columns, np.int32)])[2].reshape(N, columns)
    forward = np.zeros(N, np.int32)
    for j in range(N):  # in lane order: a later sender overwrites
        forward[j - j % wave + lanes[j]] = v[j]
    base = np.arange(N) - np.arange(N) % wave
    np.testing.assert_array_equal(out[:, 0], forward)
    np.testing.assert_array_equal(out[:, 1], v[base + lanes])
    for k, offset in ((2, 0x801B), (3, 0x0C1F), (4, 0x0030), (5, (8 << 10) | 0x1F)):
        np.testing.assert_array_equal(out[:, k], _swizzle(v, offset, wave), err_msg=f"swizzle {offset:#x}")
    if wave == 32:
        idx = np.arange(N)
        row, i = idx & ~15, idx & 15
        sel16 = (0x89ABCDEF << 32) | 0x01234567
        np.testing.assert_array_equal(out[:, 6], v[row + [(sel16 >> (4 * int(k))) & 15 for k in i]])
        selx = (0xFEDCBA98 << 32) | 0x76543210
        np.testing.assert_array_equal(out[:, 7], v[(row ^ 16) + [(selx >> (4 * int(k))) & 15 for k in i]])
        g = idx & ~7
        np.testing.assert_array_equal(out[:, 8], v[g + [(0x2C688F >> (3 * int(k))) & 7 for k in idx & 7]])


def test_rocm_device_library_wave_reductions_scans_and_broadcasts(tmp_path, arch):
    wave = ARCHS[arch]
    v = rng.integers(-(1 << 28), 1 << 28, N).astype(np.int32)
    f = rng.integers(-100, 100, N).astype(np.float32)  # integers: every summation order is exact
    out = _run(tmp_path, arch, "ockl_wave", [v, f, np.zeros(N * 9, np.int32), np.zeros(N, np.float32)])
    got = out[2].reshape(N, 9)
    w = _waves(v, wave).astype(np.int64)
    rep = lambda x: np.repeat(x, wave)  # noqa: E731
    np.testing.assert_array_equal(got[:, 0], rep(_wrap32(w.sum(axis=1))))
    np.testing.assert_array_equal(got[:, 1], rep(w.min(axis=1)))
    np.testing.assert_array_equal(got[:, 2], rep(w.max(axis=1)))
    np.testing.assert_array_equal(got[:, 3], rep(np.bitwise_or.reduce(_waves(v, wave), axis=1)))
    np.testing.assert_array_equal(got[:, 4], rep(np.bitwise_xor.reduce(_waves(v, wave), axis=1)))
    inclusive = _wrap32(np.cumsum(w, axis=1)).reshape(-1)
    np.testing.assert_array_equal(got[:, 5], inclusive)
    np.testing.assert_array_equal(got[:, 6], _wrap32(inclusive - v))
    np.testing.assert_array_equal(got[:, 7], rep(w[:, 3]))
    np.testing.assert_array_equal(got[:, 8], np.arange(N) % wave)
    np.testing.assert_array_equal(out[3], rep(_waves(f, wave).sum(axis=1)))


def test_clocks_never_run_backwards_across_a_sleep(tmp_path, arch):
    out = _run(tmp_path, arch, "clocks", [np.zeros(N, np.int64), np.zeros(N, np.int64)])
    assert (out[0] > 0).all()
    assert (out[1] >= out[0]).all()


WIDE_IR = """
target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @wide(ptr addrspace(1) %in, ptr addrspace(1) %in64, ptr addrspace(1) %out, ptr addrspace(1) %out64) #0 {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t = zext i32 %tid to i64
  %pi = getelementptr i32, ptr addrspace(1) %in, i64 %t
  %v = load i32, ptr addrspace(1) %pi, align 4
  %pw = getelementptr i64, ptr addrspace(1) %in64, i64 %t
  %w = load i64, ptr addrspace(1) %pw, align 8
  %perm = call i32 @llvm.amdgcn.perm(i32 %v, i32 %tid, i32 u0x0C0B0507)
  %wl = call i32 @llvm.amdgcn.writelane.i32(i32 %v, i32 9, i32 %tid)
  %p64 = call i32 @llvm.amdgcn.permlane64.i32(i32 %v)
  %mov = call i32 @llvm.amdgcn.mov.dpp.i32(i32 %v, i32 273, i32 15, i32 15, i1 false)
  %h = bitcast i32 %v to <2 x half>
  %hd = call half @llvm.amdgcn.fdot2.f16.f16(<2 x half> %h, <2 x half> %h, half 0xH3C00)
  %hdi = bitcast half %hd to i16
  %hdz = zext i16 %hdi to i32
  %bv = bitcast i32 %v to <2 x bfloat>
  %bd = call bfloat @llvm.amdgcn.fdot2.bf16.bf16(<2 x bfloat> %bv, <2 x bfloat> %bv, bfloat 0xR3F80)
  %bdi = bitcast bfloat %bd to i16
  %bdz = zext i16 %bdi to i32
  %base = mul i64 %t, 6
  %o0 = getelementptr i32, ptr addrspace(1) %out, i64 %base
  store i32 %perm, ptr addrspace(1) %o0, align 4
  %o1 = getelementptr i32, ptr addrspace(1) %o0, i64 1
  store i32 %wl, ptr addrspace(1) %o1, align 4
  %o2 = getelementptr i32, ptr addrspace(1) %o0, i64 2
  store i32 %p64, ptr addrspace(1) %o2, align 4
  %o3 = getelementptr i32, ptr addrspace(1) %o0, i64 3
  store i32 %mov, ptr addrspace(1) %o3, align 4
  %o4 = getelementptr i32, ptr addrspace(1) %o0, i64 4
  store i32 %hdz, ptr addrspace(1) %o4, align 4
  %o5 = getelementptr i32, ptr addrspace(1) %o0, i64 5
  store i32 %bdz, ptr addrspace(1) %o5, align 4
  %wd = call i64 @llvm.amdgcn.update.dpp.i64(i64 -1, i64 %w, i32 312, i32 15, i32 15, i1 false)
  %dd = bitcast i64 %w to double
  %rd = call double @llvm.amdgcn.readlane.f64(double %dd, i32 40)
  %rdi = bitcast double %rd to i64
  %b2 = mul i64 %t, 2
  %q0 = getelementptr i64, ptr addrspace(1) %out64, i64 %b2
  store i64 %wd, ptr addrspace(1) %q0, align 8
  %q1 = getelementptr i64, ptr addrspace(1) %q0, i64 1
  store i64 %rdi, ptr addrspace(1) %q1, align 8
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.perm(i32, i32, i32)
declare i32 @llvm.amdgcn.writelane.i32(i32, i32, i32)
declare i32 @llvm.amdgcn.permlane64.i32(i32)
declare i32 @llvm.amdgcn.mov.dpp.i32(i32, i32, i32, i32, i1)
declare half @llvm.amdgcn.fdot2.f16.f16(<2 x half>, <2 x half>, half)
declare bfloat @llvm.amdgcn.fdot2.bf16.bf16(<2 x bfloat>, <2 x bfloat>, bfloat)
declare i64 @llvm.amdgcn.update.dpp.i64(i64, i64, i32, i32, i32, i1)
declare double @llvm.amdgcn.readlane.f64(double, i32)

attributes #0 = { "target-cpu"="gfx90a" }
"""


def _perm(hi, lo, selector):
    data = (int(hi) << 32) | int(lo)
    out = 0
    for k in range(4):
        sel = (selector >> (8 * k)) & 0xFF
        if sel < 8:
            byte = (data >> (8 * sel)) & 0xFF
        elif sel < 12:
            byte = 0xFF if (data >> (16 * (sel - 8) + 15)) & 1 else 0
        else:
            byte = 0 if sel == 12 else 0xFF
        out |= byte << (8 * k)
    return out


def test_byte_permute_writelane_permlane64_and_64_bit_lane_moves(tmp_path):
    (tmp_path / "wide.ll").write_text(WIDE_IR)
    n = 64
    halves = rng.uniform(-2, 2, (n, 2)).astype(np.float16)
    v = halves.view(np.int32).reshape(-1)
    w = rng.integers(-(1 << 62), 1 << 62, n)
    outputs = {}
    capture.capture(
        tmp_path / "wide.ll",
        "wide",
        1,
        n,
        [v, w, np.zeros(6 * n, np.int32), np.zeros(2 * n, np.int64)],
        tmp_path / "db",
        backend="host",
        outputs=outputs,
    )
    out, out64 = outputs[2].reshape(n, 6), outputs[3].reshape(n, 2)
    lane = np.arange(n)
    u = v.view(np.uint32)
    np.testing.assert_array_equal(out[:, 0].view(np.uint32), [_perm(u[i], i, 0x0C0B0507) for i in range(n)])
    np.testing.assert_array_equal(out[:, 1], np.where(lane == 9, v[9], lane))
    np.testing.assert_array_equal(out[:, 2], v[lane ^ 32])
    np.testing.assert_array_equal(out[:, 3], np.where(lane % 16 == 0, 0, v[lane - 1]))  # row_shr:1, unwritten lanes 0
    h = halves.astype(np.float64)
    want = (h[:, 0] * h[:, 0] + h[:, 1] * h[:, 1] + 1.0).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(out[:, 4].astype(np.uint16), want.view(np.uint16))
    bf = (u.astype(np.uint64)[:, None] >> np.array([0, 16], np.uint64)) & 0xFFFF  # the same bits as bfloat16s
    b = (bf.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    exact = (b[:, 0] * b[:, 0] + b[:, 1] * b[:, 1] + 1.0).astype(np.float32).view(np.uint32).astype(np.uint64)
    nearest_even = (exact + 0x7FFF + ((exact >> 16) & 1)) >> 16
    np.testing.assert_array_equal(out[:, 5].astype(np.uint16), nearest_even.astype(np.uint16))
    np.testing.assert_array_equal(out64[:, 0], np.where(lane == 0, -1, w[lane - 1]))  # wave_shr:1 in two halves
    np.testing.assert_array_equal(out64[:, 1], np.repeat(w[40], n))
