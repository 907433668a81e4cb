"""The HIP device layer: its arithmetic and compare kernel on any machine, the rest on an AMD GPU (`amdgpu`).

The address, staging and argument-buffer arithmetic are pure functions; the device-side compare
kernel is AMDGPU IR, compiled to a code object here and run on the host backend (which runs
AMDGPU IR) to check what it computes. Tests marked `amdgpu` need an AMD GPU with ROCm 6.x and
hip-python, and skip elsewhere: none of them has run on AMD hardware yet.
"""

from __future__ import annotations

import ctypes
import struct
import sys

import numpy as np
import pytest
from irbuild import build_hip_ir, hip_available

from mneme.core.backend import DeviceBinary, get_backend
from mneme.core.errors import ExperimentError, MnemeError
from mneme.core.types import ExperimentConfiguration
from mneme_hip import compare, hipapi, launch, vmm

GRAN = 2 << 20
BASE = 0x7F2A00000000


# -- fixed-address memory arithmetic ------------------------------------------------------------------


def test_a_reservation_covers_the_recorded_range_rounded_to_the_granularity():
    assert vmm.reservation_span(BASE + 100, 10, GRAN) == (BASE, GRAN)
    assert vmm.reservation_span(BASE + GRAN - 1, 2, GRAN) == (BASE, 2 * GRAN)
    assert vmm.reservation_span(BASE, 3 * GRAN, GRAN) == (BASE, 3 * GRAN)
    with pytest.raises(MnemeError, match="power of two"):
        vmm.reservation_span(BASE, 1, 3 << 20)
    with pytest.raises(MnemeError, match="must be positive"):
        vmm.reservation_span(BASE, 0, GRAN)


def test_only_the_granules_not_mapped_yet_are_mapped():
    mapped = [(BASE + GRAN, GRAN), (BASE + 4 * GRAN, 2 * GRAN)]
    assert vmm.unmapped_pieces(mapped, BASE + 10, 7 * GRAN - 20, GRAN) == [
        (BASE, GRAN),
        (BASE + 2 * GRAN, 2 * GRAN),
        (BASE + 6 * GRAN, GRAN),
    ]
    assert vmm.unmapped_pieces(mapped, BASE + GRAN + 5, 100, GRAN) == []
    assert vmm.unmapped_pieces([], BASE, 1, GRAN) == [(BASE, GRAN)]


def test_writes_stream_in_staging_chunks_that_cover_every_byte_once():
    chunks = list(vmm.staging_chunks(40 << 20, 16 << 20))
    assert chunks == [(0, 16 << 20), (16 << 20, 16 << 20), (32 << 20, 8 << 20)]
    assert list(vmm.staging_chunks(0, 16)) == []
    with pytest.raises(MnemeError):
        list(vmm.staging_chunks(10, 0))


def test_the_l2_flush_writes_twice_the_cache():
    assert vmm.l2_flush_bytes(8 << 20) == 16 << 20  # gfx90a: 8 MiB of L2 per GCD
    assert vmm.l2_flush_bytes(0) == 4 << 20


# -- launches ------------------------------------------------------------------------------------------


def test_the_extra_array_passes_the_buffer_and_its_size_as_hip_expects():
    assert launch.extra_words(0x1000, 0x2000) == (1, 0x1000, 2, 0x2000, 3)
    args = struct.pack("<QQi", 0xAA, 0xBB, 7)
    buffer = launch.ArgumentBuffer(args)
    assert buffer.size.value == len(args) == 20
    assert ctypes.string_at(ctypes.addressof(buffer.buffer), 24) == args + bytes(4)
    assert [w or 0 for w in buffer.extra()] == [1, ctypes.addressof(buffer.buffer), 2, ctypes.addressof(buffer.size), 3]
    with pytest.raises(ExperimentError, match="takes 24 bytes"):
        launch.ArgumentBuffer(args, param_bytes=24)


def test_launches_hip_would_refuse_are_refused_first():
    launch.check_geometry("k", (1 << 20, 1, 1), (256, 1, 1), 1024)
    with pytest.raises(ExperimentError, match="grid.x \\* block.x"):
        launch.check_geometry("k", (1 << 24, 1, 1), (256, 1, 1), 1024)
    with pytest.raises(ExperimentError, match="at most 256"):
        launch.check_geometry("k", (1, 1, 1), (512, 1, 1), 256)


# -- the compare kernel -------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_the_compare_kernel_builds_into_a_code_object_for_each_architecture(arch):
    data = compare.hsaco(arch)
    assert data[:4] == b"\x7fELF" and compare.KERNEL.encode() in data


def test_the_compare_kernel_counts_and_locates_differing_bytes_when_run_on_the_host():
    import llvmlite.binding as llvm

    host = get_backend("host")
    binary = host.compile(
        llvm.parse_assembly(compare.IR),
        compare.KERNEL,
        ExperimentConfiguration(grid=1, block=compare.BLOCK),
        host.arch(),
    )
    expected = np.arange(100_000, dtype=np.uint32).view(np.uint8).copy()
    actual = expected.copy()
    actual[[70_001, 5, 399_999]] ^= 0xFF
    with host.open_device() as device:
        base = 0x2C0000000000
        device.reserve(base, 1 << 24)
        e, a, out = base, base + (1 << 20), base + (2 << 20)
        for addr, array in ((e, expected), (a, actual), (out, compare.initial_out())):
            device.map(addr, array.nbytes)
            device.write(addr, array.tobytes())
        kernel = device.load(binary)
        grid = compare.grid_for(expected.nbytes, compute_units=8)
        device.launch(
            kernel, grid, compare.BLOCK, 0, compare.pack_args(e, a, expected.nbytes, out, grid * compare.BLOCK)
        )
        words = np.frombuffer(device.read(out, 16), dtype=np.uint64)
        assert compare.result(words) == (3, 5)
        device.write(out, compare.initial_out().tobytes())
        device.launch(
            kernel, grid, compare.BLOCK, 0, compare.pack_args(e, e, expected.nbytes, out, grid * compare.BLOCK)
        )
        assert compare.result(np.frombuffer(device.read(out, 16), dtype=np.uint64)) == (0, -1)


# -- availability ----------------------------------------------------------------------------------------


def test_without_hip_python_the_backend_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "hip", None)  # what `import hip` sees where it is not installed
    hipapi._import.cache_clear()
    try:
        availability = get_backend("hip").availability()
        assert not availability.usable
        assert "hip-python is not installed" in availability.reason and "mneme-hip[device]" in availability.reason
        with pytest.raises(MnemeError, match="hip-python is not installed"):
            hipapi.bindings()
    finally:
        hipapi._import.cache_clear()


def test_runtime_versions_read_as_rocm_releases():
    assert hipapi.runtime_version_text(60_400_000) == "6.4.0"
    assert hipapi.runtime_version_text(50_221_153) == "5.2.21153"


# -- on an AMD GPU (skipped elsewhere; not yet run on AMD hardware) -------------------------------------


@pytest.fixture
def hip_device():
    with get_backend("hip").open_device(0) as device:
        yield device


@pytest.mark.amdgpu
def test_memory_lives_at_the_recorded_addresses_on_the_gpu(hip_device):
    hip_device.reserve(BASE, 64 << 20)
    hip_device.map(BASE + 4096, 40 << 20)
    data = np.random.default_rng(0).integers(0, 255, 40 << 20, dtype=np.uint8).tobytes()
    hip_device.write(BASE + 4096, data)
    assert hip_device.read(BASE + 4096, len(data)) == data


@pytest.mark.amdgpu
@pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
def test_a_compiled_kernel_runs_times_and_verifies_on_the_gpu(hip_device):
    import llvmlite.binding as llvm

    backend = get_backend("hip")
    arch = backend.arch(0)
    module = llvm.parse_assembly(build_hip_ir("vector_add").read_text())
    binary = backend.compile(module, "vector_add", ExperimentConfiguration(grid=4, block=256), arch)
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    hip_device.reserve(BASE, 16 << 20)
    pa, pb, pc = BASE, BASE + (4 << 20), BASE + (8 << 20)
    for addr, array in ((pa, a), (pb, b), (pc, np.zeros(n, np.float32))):
        hip_device.map(addr, array.nbytes)
        hip_device.write(addr, array.tobytes())
    kernel = hip_device.load(binary)
    args = struct.pack("<QQQi", pa, pb, pc, n)
    hip_device.launch(kernel, 4, 256, 0, args)
    np.testing.assert_array_equal(np.frombuffer(hip_device.read(pc, 4 * n), np.float32), a + b)
    times = hip_device.time(kernel, 4, 256, 0, args, iterations=3)
    assert len(times) == 3 and all(t > 0 for t in times) and hip_device.timer_used in ("rocprofiler", "hip-event")
    times = hip_device.time(kernel, 4, 256, 0, args, iterations=3, timer="hip-event")
    assert len(times) == 3 and all(t > 0 for t in times) and hip_device.timer_used == "hip-event"
    assert hip_device.compare_bytes(pc, pc, 4 * n) == (0, -1)
    from mneme.core.snapshot import RegionPolicy

    class Request:  # the executor's compare request: expected copy, actual region, size, policy
        def __init__(self, expected, policy):
            self.expected, self.actual, self.size, self.policy = expected, pc, 4 * n, policy

    # c = a + 1: every element differs from a by exactly 1.0
    policies = [None, RegionPolicy(dtype="f32", threshold=1.5), RegionPolicy(dtype="f32", threshold=0.5)]
    exact, within, beyond = hip_device.compare_regions([Request(pa, p) for p in policies])
    assert (exact.ok, exact.first_offset, exact.dtype) == (False, 0, "u8")
    assert (within.ok, within.dtype, within.max_abs, within.differing_bytes) == (True, "f32", 1.0, 0)
    assert (beyond.ok, beyond.differing_bytes, beyond.first_offset) == (False, 4 * n, 0)
    assert isinstance(binary, DeviceBinary) and binary.kind == "hsaco"
    assert 0 < kernel.occupancy(256) <= 1


def test_the_structures_and_launch_array_are_accepted_by_the_real_bindings():
    hip = pytest.importorskip("hip.hip", reason="needs hip-python: pip install 'mneme-hip[device]'")
    from hip import _hip_helpers

    prop = vmm.allocation_prop(hip, 3)
    assert prop.type == hip.hipMemAllocationType.hipMemAllocationTypePinned
    assert prop.location.type == hip.hipMemLocationType.hipMemLocationTypeDevice and prop.location.id == 3
    buffer = launch.ArgumentBuffer(struct.pack("<Qi", 0xAB, 5))
    extra = _hip_helpers.HipModuleLaunchKernel_extra(buffer.extra())
    words = (ctypes.c_void_p * 5).from_address(int(extra))
    assert [w or 0 for w in words] == [1, ctypes.addressof(buffer.buffer), 2, ctypes.addressof(buffer.size), 3]


def test_device_names_keep_the_architecture_and_drop_features_for_code_generation():
    from mneme_hip.device import _text, base_arch

    assert _text(b"gfx90a:sramecc+:xnack-\0\0\0") == "gfx90a:sramecc+:xnack-"
    assert base_arch("gfx90a:sramecc+:xnack-") == "gfx90a" and base_arch("gfx942") == "gfx942"
    assert get_backend("hip").claims("gfx942:sramecc+:xnack-")
