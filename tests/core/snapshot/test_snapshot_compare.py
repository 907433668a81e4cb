"""compare(): per-region reports under exact and typed policies, NaN rules, norms, globals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mneme.core.snapshot import (
    RegionPolicy,
    Snapshot,
    SnapshotWriter,
    compare,
    compare_buffers,
)

A, B = 0x1000_0000, 0x2000_0000


def epilogue(path, regions, policies=None, globals_=None, chunk_size=1 << 16):
    with SnapshotWriter(path, "epilogue", chunk_size=chunk_size) as w:
        for addr, data in regions.items():
            w.add_region(addr, data, policy=(policies or {}).get(addr))
        for name, data in (globals_ or {}).items():
            w.add_global(name, data)
    return Snapshot.open(path)


def f32(*values):
    return np.array(values, np.float32)


def test_identical_state_is_ok(tmp_path):
    x = np.linspace(0, 1, 50_000, dtype=np.float32)
    with epilogue(tmp_path / "e.mneme", {A: x, B: b"abc"}, globals_={"g": b"\x01"}) as exp:
        report = compare(exp, {A: x.copy(), B: b"abc"}, actual_globals={"g": b"\x01"})
    assert report.ok and bool(report) and report.mismatches == []
    assert [r.differing_bytes for r in report.regions] == [0, 0]


def test_exact_compare_reports_count_and_first_offset_across_windows(tmp_path):
    x = np.arange(300_000, dtype=np.uint8)
    y = x.copy()
    y[[70_000, 70_001, 250_000]] += 1
    with epilogue(tmp_path / "e.mneme", {A: x}) as exp:
        report = compare(exp, {A: y}, window=1 << 16)
    (region,) = report.regions
    assert not report.ok and not region.ok
    assert (region.differing_bytes, region.first_offset, region.violations) == (3, 70_000, 3)
    assert "region 0x10000000" in report.mismatches[0] and "3 bytes differ" in report.mismatches[0]


def test_exact_compare_treats_nan_by_bits(tmp_path):
    quiet, other = np.uint32(0x7FC00000), np.uint32(0x7FC00001)
    x = np.array([quiet, 0], np.uint32).view(np.float32)
    same, payload = x.copy(), np.array([other, 0], np.uint32).view(np.float32)
    assert compare_buffers(x, same).ok
    assert not compare_buffers(x, payload).ok  # NaN vs NaN with other bits: bytes differ


def test_typed_float_nan_matches_nan_but_never_a_number():
    policy = RegionPolicy("f32", threshold=1e30)  # even a huge tolerance never hides a NaN
    x = f32(1.0, np.nan, 3.0)
    other_nan = np.array([0x3F800000, 0x7FC00123, 0x40400000], np.uint32).view(np.float32)
    assert compare_buffers(x, other_nan, policy).ok
    report = compare_buffers(x, f32(1.0, 2.0, 3.0), policy)
    assert not report.ok and report.nan_mismatch == 1
    report = compare_buffers(f32(1.0, 2.0), f32(np.nan, 2.0), policy)
    assert not report.ok and report.nan_mismatch == 1 and report.first_offset == 2  # byte 2 of element 0


def test_typed_float_infinities_and_signed_zero():
    policy = RegionPolicy("f64", threshold=0.0, norm="Linf")
    x = np.array([np.inf, -np.inf, 0.0], np.float64)
    assert compare_buffers(x, np.array([np.inf, -np.inf, -0.0]), policy).ok  # -0.0 == 0.0 as numbers
    assert not compare_buffers(x, np.array([np.inf, -np.inf, -0.0])).ok  # but not as bytes
    report = compare_buffers(x, np.array([1e308, -np.inf, 0.0]), RegionPolicy("f64", threshold=1e300))
    assert not report.ok and report.max_abs == np.inf


def test_absolute_tolerance_per_element():
    x = np.linspace(1, 2, 10_000, dtype=np.float32)
    y = x + np.float32(1e-5)
    assert compare_buffers(x, y, RegionPolicy("f32", threshold=1e-4)).ok
    report = compare_buffers(x, y, RegionPolicy("f32", threshold=1e-6))
    assert not report.ok and report.violations == 10_000 and 0.9e-5 < report.max_abs < 1.1e-5


def test_relative_tolerance_scales_with_the_expected_value():
    x = f32(1000.0, 0.001, 0.0)
    y = f32(1000.01, 0.00100001, 0.0)
    assert compare_buffers(x, y, RegionPolicy("f32", threshold=1e-4, relative=True)).ok
    report = compare_buffers(x, f32(1000.0, 0.001, 1e-30), RegionPolicy("f32", threshold=1e-4, relative=True))
    assert not report.ok and report.max_rel == np.inf  # any error on an expected zero is infinitely relative


@pytest.mark.parametrize(
    ("norm", "threshold", "ok"),
    [
        ("L1", 4.1, True),
        ("L1", 3.9, False),
        ("L2", 2.01, True),
        ("L2", 1.99, False),
        ("Linf", 1.0, True),
        ("Linf", 0.99, False),
    ],
)
def test_norms_combine_element_errors(norm, threshold, ok):
    x = np.zeros(4, np.float64)
    y = np.ones(4, np.float64)  # errors 1,1,1,1: L1 = 4, L2 = 2, Linf = 1
    report = compare_buffers(x, y, RegionPolicy("f64", threshold=threshold, norm=norm))
    assert report.ok is ok and report.differing_bytes == 4 * 2  # 1.0 is 3ff0 0000 0000 0000: 2 bytes each


def test_relative_norm_divides_by_the_expected_norm_over_the_whole_region():
    x = np.full(1 << 18, 2.0, np.float32)  # spans several windows, only the last differs
    y = x.copy()
    y[-1] = 3.0
    policy = RegionPolicy("f32", threshold=1e-3, relative=True, norm="L2")
    report = compare_buffers(x, y, policy, window=1 << 16)
    assert report.ok and report.error == pytest.approx(1.0 / (2.0 * 512))
    assert not compare_buffers(x, y, RegionPolicy("f32", threshold=1e-3, relative=True, norm="none")).ok


@pytest.mark.parametrize("dtype", ["i64", "u64"])
def test_64_bit_integers_compare_exactly_beyond_float_precision(dtype):
    big = np.array([2**62 + 1, 5], np.int64 if dtype == "i64" else np.uint64)
    other = big.copy()
    other[0] += 1  # invisible in float64
    report = compare_buffers(big, other, RegionPolicy(dtype, threshold=0.5))
    assert not report.ok and report.max_abs == 1.0
    assert compare_buffers(big, other, RegionPolicy(dtype, threshold=1.0)).ok


def test_signed_integers_across_zero():
    report = compare_buffers(np.array([-3], np.int8), np.array([4], np.int8), RegionPolicy("i8", threshold=6))
    assert not report.ok and report.max_abs == 7
    i64 = RegionPolicy("i64", threshold=1)
    assert compare_buffers(np.array([-1], np.int64), np.array([0], np.int64), i64).ok


def test_half_precision_types():
    x16 = np.array([1.0, 2.0, np.nan], np.float16)
    y16 = np.array([1.0, 2.001, np.nan], np.float16)
    assert compare_buffers(x16, y16, RegionPolicy("f16", threshold=1e-2)).ok
    bf = lambda v: (np.array(v, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert compare_buffers(bf([1.0, 256.0]), bf([1.0, 257.0]), RegionPolicy("bf16", threshold=2.0)).ok
    report = compare_buffers(bf([1.0, 256.0]), bf([1.0, 258.0]), RegionPolicy("bf16", threshold=1.0))
    assert not report.ok and report.max_abs == 2.0


def test_partial_trailing_element_must_match_exactly():
    x = np.frombuffer(np.array([1.0, 2.0], np.float32).tobytes() + b"\x01\x02", np.uint8)
    y = bytearray(x.tobytes())
    y[-1] ^= 1
    report = compare_buffers(x, y, RegionPolicy("f32", threshold=1.0))
    assert not report.ok and report.differing_bytes == 1 and report.first_offset == 9


def test_recorded_policy_is_used_and_can_be_overridden(tmp_path):
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    y = x + np.float32(1e-6)
    with epilogue(tmp_path / "e.mneme", {A: x}, policies={A: RegionPolicy("f32", threshold=1e-5)}) as exp:
        assert compare(exp, {A: y}).ok
        assert not compare(exp, {A: y}, policies={A: RegionPolicy()}).ok


def test_missing_or_resized_region_and_globals_are_mismatches(tmp_path):
    with epilogue(tmp_path / "e.mneme", {A: b"1234", B: b"5678"}, globals_={"g": b"\x01\x02"}) as exp:
        report = compare(exp, {A: b"123"}, actual_globals={"g": b"\x01\x03"})
        assert not report.ok
        assert [r.problem for r in report.regions] == [
            "actual region has 3 bytes, expected 4",
            "missing from the actual state",
        ]
        (g,) = report.globals
        assert not g.ok and g.first_offset == 1 and "global g" in report.mismatches[-1]
        assert not compare(exp, {A: b"1234", B: b"5678"}).globals[0].ok  # globals not given: not verified


def test_compare_two_snapshots(tmp_path):
    x = np.arange(100_000, dtype=np.int32)
    y = x.copy()
    y[99_999] = 0
    with (
        epilogue(tmp_path / "a.mneme", {A: x}) as a,
        epilogue(tmp_path / "b.mneme", {A: x}, chunk_size=1 << 12) as b,
        epilogue(tmp_path / "c.mneme", {A: y}) as c,
    ):
        assert compare(a, b).ok
        report = compare(a, c)
        assert not report.ok and report.regions[0].first_offset == 4 * 99_999


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=1, max_size=5000), st.lists(st.integers(0, 4999), max_size=20), st.integers(8, 512))
def test_exact_compare_counts_every_changed_byte(data, positions, window):
    other = bytearray(data)
    changed = sorted({p for p in positions if p < len(data)})
    for p in changed:
        other[p] ^= 0xFF
    report = compare_buffers(data, other, window=window)
    assert report.differing_bytes == len(changed)
    assert report.ok is (not changed)
    assert report.first_offset == (changed[0] if changed else None)
