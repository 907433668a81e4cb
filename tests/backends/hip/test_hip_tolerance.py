"""The HIP device's tolerant compare kernels: AMDGPU IR built to hsaco, and run on the host backend.

No AMD GPU here: the kernels are compiled for gfx90a/gfx942 by our toolchain (what the HIP
device loads), and the same IR runs on the host backend (which runs AMDGPU IR) over NumPy
data with known mismatches; its verdicts are checked against the host compare's.
"""

from __future__ import annotations

import numpy as np
import pytest

from mneme.core.backend import get_backend
from mneme.core.snapshot import RegionPolicy
from mneme.core.snapshot.compare import compare_buffers
from mneme.core.types import ExperimentConfiguration
from mneme_hip import compare, tolerance

BASE = 0x2D0000000000


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64", "i32", "u64"])
def test_each_tolerant_kernel_builds_into_a_code_object(arch, dtype):
    data = compare.hsaco(arch, dtype)
    assert data[:4] == b"\x7fELF" and tolerance.kernel_name(dtype).encode() in data


@pytest.fixture(scope="module")
def host_run():
    """Run a dtype's compare kernel on the host backend: (expected, actual, policy) -> RegionDiff."""
    import llvmlite.binding as llvm

    host = get_backend("host")
    kernels = {}
    with host.open_device() as device:
        device.reserve(BASE, 1 << 26)

        def run(expected: np.ndarray, actual: np.ndarray, policy: RegionPolicy) -> compare.RegionDiff:
            key, threshold, relative, norm = compare.plan(policy)
            if key not in kernels:
                source = compare.IR if key == "bytes" else tolerance.ir(key)
                name = compare.KERNEL if key == "bytes" else tolerance.kernel_name(key)
                binary = host.compile(
                    llvm.parse_assembly(source), name, ExperimentConfiguration(grid=1, block=compare.BLOCK), host.arch()
                )
                kernels[key] = device.load(binary)
            e, a, out = BASE, BASE + (8 << 20), BASE + (16 << 20)
            words = compare.initial_out() if key == "bytes" else compare.initial_words()
            for addr, array in ((e, expected), (a, actual), (out, words)):
                device.map(addr, max(array.nbytes, 1))
                device.write(addr, array.tobytes())
            n = expected.nbytes if key == "bytes" else expected.size
            grid = compare.grid_for(n, compute_units=4)
            if key == "bytes":
                args = compare.pack_args(e, a, n, out, grid * compare.BLOCK)
            else:
                args = compare.pack_tolerant_args(e, a, n, threshold, relative, out, grid * compare.BLOCK)
            device.launch(kernels[key], grid, compare.BLOCK, 0, args)
            words = np.frombuffer(device.read(out, words.nbytes), dtype=np.uint64).copy()
            return compare.decide(a, expected.nbytes, key, threshold, relative, norm, words)

        yield run


def _host_verdict(expected: np.ndarray, actual: np.ndarray, policy: RegionPolicy):
    return compare_buffers(expected.tobytes(), actual.tobytes(), policy)


def test_f32_elements_beyond_an_absolute_threshold_are_counted_and_the_first_located(host_run):
    expected = np.linspace(-3, 3, 50_000, dtype=np.float32)
    actual = expected.copy()
    actual[[40_000, 123, 7]] += np.float32(0.5)  # beyond 1e-3
    actual[[9, 30_000]] += np.float32(1e-5)  # within it
    policy = RegionPolicy(dtype="f32", threshold=1e-3)
    diff = host_run(expected, actual, policy)
    assert (diff.differing_bytes, diff.first_offset, diff.ok) == (3 * 4, 7 * 4, False)
    assert diff.max_abs == pytest.approx(0.5, rel=1e-6)
    host = _host_verdict(expected, actual, policy)
    assert host.ok == diff.ok and host.violations == 3 and host.max_abs == pytest.approx(diff.max_abs, rel=1e-6)
    ok = host_run(expected, np.where(np.abs(actual - expected) > 0.1, expected, actual), policy)
    assert ok.ok and ok.differing_bytes == 0 and ok.first_offset == -1 and 0 < ok.max_abs <= 1e-3


def test_a_relative_threshold_treats_errors_on_zero_as_infinite(host_run):
    expected = np.array([0.0, 100.0, 200.0, 1.0] * 1000, dtype=np.float64)
    actual = expected.copy()
    actual[401] = 101.0  # 1% off: beyond 0.5%
    actual[802] = 200.2  # 0.1% off: within
    policy = RegionPolicy(dtype="f64", threshold=5e-3, relative=True)
    diff = host_run(expected, actual, policy)
    assert (diff.differing_bytes, diff.first_offset, diff.ok) == (8, 401 * 8, False)
    assert diff.max_rel == pytest.approx(0.01)
    actual[401], actual[0] = 100.0, 1e-300  # an error on an expected zero is infinitely relative
    diff = host_run(expected, actual, policy)
    assert (diff.differing_bytes, diff.first_offset, diff.max_rel) == (8, 0, float("inf"))
    assert _host_verdict(expected, actual, policy).ok is False


def test_nan_against_a_number_fails_and_nan_pairs_match(host_run):
    expected = np.ones(4096, dtype=np.float16)
    expected[[10, 20]] = np.nan
    actual = expected.copy()
    policy = RegionPolicy(dtype="f16", threshold=1e-2)
    assert host_run(expected, actual, policy).ok  # NaN pairs match
    actual[3000] = np.nan
    diff = host_run(expected, actual, policy)
    assert (diff.nan_mismatch, diff.differing_bytes, diff.first_offset, diff.ok) == (1, 2, 3000 * 2, False)
    assert _host_verdict(expected, actual, policy).nan_mismatch == 1


def test_bf16_is_read_as_the_top_half_of_an_f32(host_run):
    values = np.array([1.0, 2.0, -4.0, 8.0] * 256, dtype=np.float32)
    expected = (values.view(np.uint32) >> 16).astype(np.uint16)
    actual = expected.copy()
    actual[5] = (np.array([2.5], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)[0]
    diff = host_run(expected, actual, RegionPolicy(dtype="bf16", threshold=0.25))
    assert (diff.differing_bytes, diff.first_offset, diff.max_abs) == (2, 10, 0.5)


@pytest.mark.parametrize(
    "norm,threshold,ok",
    [("L2", 0.9, False), ("L2", 1.1, True), ("L1", 2.0, True), ("L1", 1.9, False), ("Linf", 0.9, True)],
)
def test_norms_decide_on_the_error_vector_as_the_host_does(host_run, norm, threshold, ok):
    expected = np.zeros(10_000, dtype=np.float32)
    actual = expected.copy()
    actual[[100, 200, 300, 400]] = np.float32(0.5)  # L1 2.0, L2 1.0, Linf 0.5
    policy = RegionPolicy(dtype="f32", threshold=threshold, norm=norm)
    diff = host_run(expected, actual, policy)
    assert diff.ok is ok and diff.l2_abs == pytest.approx(1.0)
    assert _host_verdict(expected, actual, policy).ok is ok


def test_integer_tolerances_use_exact_differences(host_run):
    expected = np.array([np.iinfo(np.int64).min, -5, 0, np.iinfo(np.int64).max] * 500, dtype=np.int64)
    actual = expected.copy()
    actual[1] += 3  # within 3
    actual[6] -= 4  # beyond: -5 -> -9 ... at index 6 the value 0 -> -4
    actual[1003] -= 10  # int64 max - 10
    policy = RegionPolicy(dtype="i64", threshold=3)
    diff = host_run(expected, actual, policy)
    assert (diff.differing_bytes, diff.first_offset, diff.max_abs, diff.ok) == (16, 6 * 8, 10.0, False)
    assert _host_verdict(expected, actual, policy).violations == 2
    unsigned = np.array([2**64 - 1, 0, 7], dtype=np.uint64)
    diff = host_run(unsigned, np.array([0, 0, 7], dtype=np.uint64), RegionPolicy(dtype="u64", threshold=1))
    assert (diff.differing_bytes, diff.first_offset, diff.max_abs) == (8, 0, float(2**64 - 1))
    small = np.array([200, 100, 3], dtype=np.uint8)
    diff = host_run(small, np.array([198, 100, 0], dtype=np.uint8), RegionPolicy(dtype="u8", threshold=2))
    assert (diff.differing_bytes, diff.first_offset) == (1, 2)


def test_policies_pick_the_kernel_and_exact_policies_compare_bytes():
    assert compare.plan(None)[0] == "bytes"
    assert compare.plan(RegionPolicy(dtype="i32"))[0] == "bytes"
    assert compare.plan(RegionPolicy(dtype="f32")) == ("f32", 0.0, False, "none")  # floats: NaN pairs match
    assert compare.plan(RegionPolicy(dtype="i16", threshold=2, relative=True, norm="L1")) == ("i16", 2.0, True, "L1")


def test_a_partial_trailing_element_must_match_exactly():
    words = compare.initial_words()
    diff = compare.decide(0x1000, 4 * 10 + 2, "f32", 1e-3, False, "none", words, tail=(1, 41))
    assert (diff.differing_bytes, diff.first_offset, diff.ok) == (1, 41, False)
    assert compare.decide(0x1000, 42, "f32", 1e-3, False, "none", words).ok
