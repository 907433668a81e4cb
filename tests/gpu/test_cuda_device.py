"""The CUDA backend on a real GPU: fixed-address memory, copies, compare, compile, load, launch, time."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import types

import attrs
import numpy as np
import pytest
from gpu_corpus import EXTRA, cuda_ir

from mneme.core import ir
from mneme.core.backend import DeviceBinary
from mneme.core.errors import MnemeError
from mneme.core.types import ExperimentConfiguration, dim3

pytest.importorskip("mneme_cuda")
from mneme_cuda.compare import CompareRequest

pytestmark = pytest.mark.gpu

BASE = 0x200000000000  # reservable on the H200 (see issue 6); far from the driver's own mappings
MiB = 1 << 20


@pytest.fixture(scope="module")
def space(cuda_device):
    """A 4 GiB reservation at BASE, with its first 512 MiB mapped."""
    cuda_device.reserve(BASE, 4 << 30)
    cuda_device.map(BASE, 512 * MiB)
    return BASE


def _compile(
    backend, device, source: str, kernel: str, config: ExperimentConfiguration | None = None, internalize: bool = True
):
    module = ir.link([cuda_ir(source)], kernel, internalize=internalize)
    config = config or ExperimentConfiguration(grid=1, block=256)
    binary = backend.compile(module, kernel, config, device.info.arch)
    assert binary.kind in ("cubin", "ptx") and binary.data
    return device.load(binary)


def test_device_reports_its_architecture_name_and_memory(cuda_backend, cuda_device):
    info = cuda_device.info
    assert info.arch == cuda_backend.arch(0)
    assert info.arch.startswith("sm_") and int(info.arch[3:]) >= 70
    assert info.memory_bytes > 1 << 30 and info.name
    assert cuda_backend.fingerprint()["cuda-driver"].startswith("13.")


def test_reservation_is_at_exactly_the_recorded_address_and_round_trips_bytes(cuda_device, space):
    data = np.random.default_rng(1).integers(0, 256, 3 * MiB + 5, dtype=np.uint8)
    addr = space + 4 * MiB + 123  # unaligned inside a mapped page
    cuda_device.write(addr, data)
    assert cuda_device.read(addr, data.nbytes) == data.tobytes()


def test_a_taken_range_cannot_be_reserved_again_and_the_error_names_it(cuda_device, space):
    from mneme_cuda.memory import Reservation

    with pytest.raises(MnemeError, match=f"{space:#x}"):
        Reservation(cuda_device.ordinal, space, 64 * MiB, cuda_device.granularity)


def test_mapping_outside_any_reservation_places_memory_at_that_exact_address(cuda_device):
    addr = 0x300000000000 + 6 * MiB
    cuda_device.map(addr, 1000)
    cuda_device.write(addr, b"mneme")
    assert cuda_device.read(addr, 5) == b"mneme"
    assert cuda_device.mapped(addr, 1000)


def test_large_writes_stream_through_both_staging_buffers(cuda_device, space):
    data = np.random.default_rng(2).integers(0, 256, 200 * MiB, dtype=np.uint8)  # > 2 staging buffers
    cuda_device.write(space, data)
    back = np.empty_like(data)
    cuda_device.read_into(space, back)
    assert np.array_equal(back, data)


def test_chunked_writes_land_consecutively(cuda_device, space):
    chunks = [bytes([i]) * (MiB + i) for i in range(5)]
    written = cuda_device.write_stream(space, chunks)
    assert written == sum(map(len, chunks))
    assert cuda_device.read(space, written) == b"".join(chunks)


@pytest.mark.parametrize("encoding", ["raw", "zstd"])
def test_a_snapshot_region_is_restored_by_decoding_into_pinned_staging(cuda_device, space, tmp_path, encoding):
    from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter

    addr = space + 256 * MiB
    data = np.random.default_rng(7).integers(0, 16, 70 * MiB + 3, dtype=np.uint8)  # > 2 staging buffers
    path = tmp_path / "DeviceState.prologue.test.test.mneme"
    with SnapshotWriter(path, SnapshotType.PROLOGUE, static_hash="test", dynamic_hash="test") as writer:
        writer.set_args(b"")
        writer.add_region(addr, data, encoding=encoding)
    with Snapshot.open(path) as snapshot:
        assert snapshot.region(addr).encoding == encoding
        assert cuda_device.write_snapshot_region(snapshot, addr) == data.nbytes
        assert cuda_device.read(addr, data.nbytes) == data.tobytes()
        other = cuda_device.alloc(data.nbytes)  # elsewhere: how the executor keeps expected bytes on the device
        try:
            cuda_device.write_snapshot_region(snapshot, addr, dst=other.addr)
            assert cuda_device.read(other.addr, data.nbytes) == data.tobytes()
        finally:
            cuda_device.free(other)


def test_an_epilogue_diff_region_is_restored_against_its_prologue(cuda_device, space, tmp_path):
    from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter

    addr = space + 256 * MiB
    before = np.random.default_rng(8).integers(0, 256, 40 * MiB + 5, dtype=np.uint8)
    after = before.copy()
    after[33 * MiB : 33 * MiB + 1000] += 1
    with SnapshotWriter(tmp_path / "p.mneme", SnapshotType.PROLOGUE, static_hash="t", dynamic_hash="t") as writer:
        writer.set_args(b"")
        writer.add_region(addr, before, encoding="raw")
    with SnapshotWriter(tmp_path / "e.mneme", SnapshotType.EPILOGUE, static_hash="t", dynamic_hash="t") as writer:
        writer.set_args(b"")
        writer.add_diff_region(addr, before, after)
    with (
        Snapshot.open(tmp_path / "p.mneme") as prologue,
        Snapshot.open(tmp_path / "e.mneme", base=prologue) as epilogue,
    ):
        cuda_device.write_snapshot_region(epilogue, addr)
    assert cuda_device.read(addr, after.nbytes) == after.tobytes()


def test_the_native_reader_restores_raw_shuffled_and_diff_regions_bit_exact(cuda_device, space, tmp_path):
    from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotType, SnapshotWriter
    from mneme.core.snapshot.format import ENC_DIFF, ENC_SHUFFLE

    assert cuda_device._native() is not None, "the native snapshot reader is missing: run scripts/gpu-suite --prepare"
    rng = np.random.default_rng(9)
    raw = rng.integers(0, 256, 300 * MiB + 3, dtype=np.uint8)  # three staging fills, a partial last chunk
    floats = (np.sin(np.arange(16 * MiB + 5, dtype=np.float32) * 1e-3) * 1000).round().astype(np.float32)
    after = floats.copy()
    after[3 * MiB : 3 * MiB + 100] = -1.0
    a, b = space, space + 320 * MiB
    with SnapshotWriter(tmp_path / "p.mneme", SnapshotType.PROLOGUE, static_hash="t", dynamic_hash="t") as writer:
        writer.set_args(b"")
        writer.add_region(a, raw)
        writer.add_region(b, floats, encoding="zstd", policy=RegionPolicy("f32"))
    with Snapshot.open(tmp_path / "p.mneme") as prologue:
        with SnapshotWriter(tmp_path / "e.mneme", SnapshotType.EPILOGUE, static_hash="t", dynamic_hash="t") as writer:
            writer.set_args(b"")
            writer.add_diff_region(b, prologue, after)
        assert ENC_SHUFFLE in {c.encoding for c in prologue._region(b).chunks}
        assert cuda_device.write_snapshot_region(prologue, a) == raw.nbytes
        assert cuda_device.write_snapshot_region(prologue, b) == floats.nbytes
        assert cuda_device.read(a, raw.nbytes) == raw.tobytes()
        assert cuda_device.read(b, floats.nbytes) == floats.tobytes()
        with Snapshot.open(tmp_path / "e.mneme", base=prologue) as epilogue:
            assert ENC_DIFF in {c.encoding for c in epilogue._region(b).chunks}
            cuda_device.write_snapshot_region(epilogue, b)
        assert cuda_device.read(b, after.nbytes) == after.tobytes()


def test_writes_from_pinned_memory_copy_directly(cuda_device, space):
    pinned = cuda_device.pinned(8 * MiB)
    pinned.array[:] = np.arange(8 * MiB, dtype=np.uint64).astype(np.uint8)
    cuda_device.write(space + 64 * MiB, pinned.array)
    assert cuda_device.read(space + 64 * MiB, 8 * MiB) == pinned.array.tobytes()


@pytest.mark.parametrize(
    ("through", "shift", "size"),
    [
        ("sm", 0, 5 * MiB),
        ("sm", 0, 5 * MiB + 13),
        ("sm", 3, 5 * MiB),
        ("sm", 0, 7),
        ("engine", 0, 5 * MiB + 13),
    ],
)
def test_device_copy_moves_bytes_between_regions(cuda_device, space, through, shift, size):
    data = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
    dst = space + 100 * MiB + shift  # shift 3: unaligned, the copy kernel's byte path
    cuda_device.write(space, data)
    cuda_device.write(dst - 16, np.full(size + 32, 0xA5, np.uint8))
    cuda_device.copy_through = through
    try:
        cuda_device.copy(dst, space, size)
    finally:
        cuda_device.copy_through = "engine"
    assert cuda_device.read(dst, size) == data.tobytes()
    assert cuda_device.read(dst - 16, 16) == cuda_device.read(dst + size, 16) == b"\xa5" * 16  # nothing around it


@pytest.mark.parametrize("shift", [0, 3])
def test_exact_compare_finds_the_first_differing_byte(cuda_device, space, shift):
    size = 40 * MiB + 7
    data = np.random.default_rng(4).integers(0, 256, size, dtype=np.uint8)
    expected = cuda_device.upload(data)
    actual = space + 128 * MiB + shift  # shift 3: unaligned, the byte path
    cuda_device.write(actual, data)
    assert cuda_device.compare(expected.addr, actual, size).ok
    changed = data.copy()
    changed[[1_000_003, 2_000_000, size - 1]] ^= 0xFF
    cuda_device.write(actual, changed)
    diff = cuda_device.compare(expected.addr, actual, size)
    assert (diff.ok, diff.differing_bytes, diff.first_offset) == (False, 3, 1_000_003)
    cuda_device.free(expected)


def test_float_compare_applies_the_region_policy(cuda_device, space):
    rng = np.random.default_rng(5)
    expected = rng.standard_normal(1_000_001).astype(np.float32)
    buffer = cuda_device.upload(expected)
    actual = space + 300 * MiB
    policy = types.SimpleNamespace(dtype="f32", threshold=1e-5, relative=True, norm="none")

    close = expected * np.float32(1 + 1e-7)
    cuda_device.write(actual, close)
    assert cuda_device.compare(buffer.addr, actual, expected.nbytes, policy).ok

    far = close.copy()
    far[777] *= 1.01
    far[900_000] = np.nan
    cuda_device.write(actual, far)
    diff = cuda_device.compare(buffer.addr, actual, expected.nbytes, policy)
    assert not diff.ok
    assert (diff.first_offset, diff.differing_bytes, diff.nan_mismatch) == (777 * 4, 8, 1)
    assert diff.max_rel == pytest.approx(0.01, rel=1e-3)
    # The same bytes batched with an exact region: one synchronization for both.
    both = cuda_device.compare_regions(
        [
            CompareRequest(buffer.addr, actual, expected.nbytes, policy),
            CompareRequest(buffer.addr, buffer.addr, expected.nbytes),
        ]
    )
    assert [d.ok for d in both] == [False, True]
    cuda_device.free(buffer)


def _vector_add_args(a: int, b: int, c: int, n: int) -> bytes:
    return struct.pack("<QQQi4x", a, b, c, n)


def test_corpus_kernel_compiles_loads_and_runs_at_fixed_addresses(cuda_backend, cuda_device, space):
    n = 1 << 20
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    pa, pb, pc = space, space + 8 * MiB, space + 16 * MiB
    cuda_device.write(pa, a)
    cuda_device.write(pb, b)
    cuda_device.fill(pc, 4 * n, 0xFF)
    with _compile(cuda_backend, cuda_device, "vector_add", "vector_add") as kernel:
        cuda_device.launch(kernel, dim3(n // 256), dim3(256), 0, _vector_add_args(pa, pb, pc, n))
        c = np.frombuffer(cuda_device.read(pc, 4 * n), dtype=np.float32)
        assert np.array_equal(c, a + b)
        res = kernel.resources
        assert res.registers > 0 and res.max_threads_per_block >= 256 and res.local_mem == 0
        assert 0 < kernel.occupancy(256) <= 1
        assert [size for _, size in kernel.param_layout()] == [8, 8, 8, 4]


def _vector_add_inputs(cuda_device, space: int, seed: int):
    """vector_add's 2^20 elements: (n, its three addresses in `space`, the two random inputs written there)."""
    n = 1 << 20
    addrs = (space, space + 64 * MiB, space + 128 * MiB)
    rng = np.random.default_rng(seed)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    cuda_device.write(addrs[0], a)
    cuda_device.write(addrs[1], b)
    return n, addrs, (a, b)


@pytest.mark.parametrize("how", ["read", "rewrite"])
def test_a_read_or_rewrite_through_the_sms_before_each_flush_keeps_every_byte_and_the_sum_right(
    cuda_backend, cuda_device, space, how
):
    """MNEME_CUDA_BEFORE_FLUSH (here the attribute it sets): each flushed run first reads, or rewrites in place,
    every mapped range through the SMs; the inputs keep their bytes and vector_add still computes a + b."""
    n, (pa, pb, pc), (a, b) = _vector_add_inputs(cuda_device, space, seed=7)
    cuda_device.before_flush = how
    try:
        with _compile(cuda_backend, cuda_device, "vector_add", "vector_add") as kernel:
            times = cuda_device.time(kernel, dim3(n // 256), dim3(256), 0, _vector_add_args(pa, pb, pc, n), 3)
    finally:
        cuda_device.before_flush = ""
    assert len(times) == 3 and all(0 < t < 0.1 for t in times) and cuda_device.copy_through == "engine"
    assert cuda_device.read(pa, 4 * n) == a.tobytes() and cuda_device.read(pb, 4 * n) == b.tobytes()
    assert np.array_equal(np.frombuffer(cuda_device.read(pc, 4 * n), np.float32), a + b)


def test_timing_with_extra_streams_opens_them_once_and_keeps_the_result_right(cuda_backend, cuda_device, space):
    """MNEME_CUDA_EXTRA_STREAMS (here the attribute it sets): the streams exist, each with its memset run, before
    the first timed run, and vector_add still computes a + b."""
    n, (pa, pb, pc), (a, b) = _vector_add_inputs(cuda_device, space, seed=8)
    cuda_device.extra_streams = 8
    try:
        with _compile(cuda_backend, cuda_device, "vector_add", "vector_add") as kernel:
            args = _vector_add_args(pa, pb, pc, n)
            times = cuda_device.time(kernel, dim3(n // 256), dim3(256), 0, args, 3)
            opened = list(cuda_device._extra_streams)
            cuda_device.time(kernel, dim3(n // 256), dim3(256), 0, args, 2)
    finally:
        cuda_device.extra_streams = 0
    assert len(opened) == 8 and cuda_device._extra_streams == opened  # opened once, kept until the device closes
    assert len(times) == 3 and all(0 < t < 0.1 for t in times)
    assert np.array_equal(np.frombuffer(cuda_device.read(pc, 4 * n), np.float32), a + b)


@pytest.mark.parametrize("timer", ["cupti", "events"])
def test_timing_gives_one_duration_per_run_by_either_timer(cuda_backend, cuda_device, space, timer):
    n = 1 << 24
    pa, pb, pc = space, space + 64 * MiB, space + 128 * MiB
    resets = []
    with _compile(cuda_backend, cuda_device, "vector_add", "vector_add") as kernel:
        times = cuda_device.time(
            kernel,
            dim3(n // 256),
            dim3(256),
            0,
            _vector_add_args(pa, pb, pc, n),
            5,
            before_each=lambda: resets.append(1),
            timer=timer,
        )
    assert len(times) == 5 and len(resets) == 5 and cuda_device.timer_used == timer
    assert all(0 < t < 0.1 for t in times)
    # 192 MiB moved: at least tens of microseconds even at full HBM bandwidth
    assert min(times) > 192 * MiB / 10e12


@pytest.mark.parametrize("kernel", ["transpose_tile", "convolve", "local_array", "many_live"])
def test_resources_read_from_the_cubin_are_the_drivers(cuda_device, kernel):
    # Issue 28: on sm_90 CUDA 13's `ptxas -v` prints no constant bank; the driver's attributes are the reference.
    from mneme.core import build

    [source] = [s for s in EXTRA if s.stem == "resources"]
    module = ir.link([cuda_ir(source)], kernel)
    binary = build.compile(
        module, kernel, ExperimentConfiguration(grid=8, block=128), cuda_device.info.arch, cache=False
    )
    with cuda_device.load(binary) as loaded:
        driver = loaded.resources
    got = binary.resources
    assert (got.registers, got.shared_mem, got.local_mem, got.const_mem) == (
        driver.registers,
        driver.shared_mem,
        driver.local_mem,
        driver.const_mem,
    ), kernel
    assert driver.const_mem == 17 * 4  # the module's `__constant__ float filter[17]`


@pytest.mark.parametrize("assembler", ["ptxas", "nvjitlink"])
def test_constant_banks_of_either_assemblers_cubin_are_the_drivers(cuda_device, assembler):
    # Standalone ptxas leaves the addresses of the globals a kernel uses in a relocated constant bank
    # (`.nv.constant4`, `ptxas -v`: "16 bytes cmem[4]" on sm_80) that nvJitLink's linked cubin does not have:
    # the cubin reading must give what the driver reports for the cubin it loads.
    from mneme.core import build
    from mneme_cuda import codegen, cubin

    config = ExperimentConfiguration(grid=1, block=128)
    module = ir.link([cuda_ir("device_global")], "add_bias", internalize=False)
    ptx = build.compile(module, "add_bias", config, cuda_device.info.arch, emit="ptx", cache=False).data.decode()
    data, log, tool = codegen.assemble_ptx(ptx, cuda_device.info.arch, config, name="add_bias", assembler=assembler)
    got = cubin.resources(data, "add_bias", log, tool)
    with cuda_device.load(DeviceBinary("cuda", cuda_device.info.arch, "cubin", "add_bias", data, got)) as loaded:
        assert got.const_mem == loaded.resources.const_mem, (assembler, got, loaded.resources)


def test_a_repeated_assembly_still_reports_spills_and_the_register_floor(cuda_device):
    # Issue 28 on the GPU machine: with the driver loaded, nvJitLink kept each assembled PTX in the driver's JIT
    # cache and answered the same PTX again from there with an empty report: spills read -1 and a max_registers
    # below the architecture's minimum went through. Each build must come with the assembler's report.
    from mneme.core import build
    from mneme.core.errors import UsageError
    from mneme_cuda import codegen, cubin

    [source] = [s for s in EXTRA if s.stem == "resources"]
    module = ir.link([cuda_ir(source)], "many_live")
    arch = cuda_device.info.arch
    config = ExperimentConfiguration(grid=8, block=128, max_registers=32)
    ptx = build.compile(module, "many_live", config, arch, emit="ptx", cache=False).data.decode()
    readings = []
    for _ in range(2):
        data, report, tool = codegen.assemble_ptx(ptx, arch, config, name="many_live")
        assert "Function properties for many_live" in report, report
        readings.append(cubin.resources(data, "many_live", report, tool))
    assert readings[0] == readings[1] and readings[0].spill_stores > 0, readings  # 32 registers: it spills
    too_few = attrs.evolve(config, max_registers=8)
    for _ in range(2):
        with pytest.raises(UsageError, match="below"):
            build.compile(module, "many_live", too_few, arch, cache=False)


def test_ptx_loads_through_the_driver_jit_with_a_register_cap(cuda_device):
    from mneme_cuda import compare as cmp

    binary = DeviceBinary("cuda", cuda_device.info.arch, "ptx", "mneme_compare_f64", cmp.ptx())
    config = ExperimentConfiguration(grid=1, block=1, max_registers=32, ptxas_opt=2, cache_mode="cg")
    with cuda_device.load(binary, config) as capped, cuda_device.load(binary) as free:
        assert capped.resources.registers <= 32 < free.resources.registers


def test_device_globals_are_set_and_read_by_name(cuda_backend, cuda_device, space):
    n = 1024
    data = np.arange(n, dtype=np.float32)
    cuda_device.write(space, data)
    # Not internalized: LLVM would fold the never-written `bias` into a constant.
    with _compile(cuda_backend, cuda_device, "device_global", "add_bias", internalize=False) as kernel:
        cuda_device.write_global(kernel, "bias", struct.pack("<f", 0.5))
        cuda_device.write_global(kernel, "launch_count", struct.pack("<i", 41))
        cuda_device.launch(kernel, dim3(n // 128), dim3(128), 0, struct.pack("<Qi4x", space, n))
        assert struct.unpack("<i", cuda_device.read_global(kernel, "launch_count"))[0] == 42
        assert np.array_equal(np.frombuffer(cuda_device.read(space, 4 * n), dtype=np.float32), data + 0.5)
        with pytest.raises(MnemeError, match="no_such_global"):
            cuda_device.write_global(kernel, "no_such_global", b"\0")


FAULT_SCRIPT = textwrap.dedent(
    """
    import struct, sys
    sys.path[:0] = {paths!r}
    from gpu_corpus import EXTRA, cuda_ir
    from mneme.core import ir
    from mneme.core.errors import ExperimentError
    from mneme.core.types import ExperimentConfiguration, dim3
    from mneme_cuda.backend import CudaBackend

    base, n, fault = 0x200000000000, 1 << 20, sys.argv[1] == "fault"
    backend = CudaBackend()
    with backend.open_device(0) as device:
        device.reserve(base, 1 << 30)
        device.map(base, 16 << 20)
        module = ir.link([cuda_ir("vector_add")], "vector_add")
        binary = backend.compile(module, "vector_add", ExperimentConfiguration(grid=1, block=256), device.info.arch)
        kernel = device.load(binary)
        out = base + (512 << 20) if fault else base + (8 << 20)  # reserved but never mapped: a fault
        args = struct.pack("<QQQi4x", base, base, out, n)
        try:
            device.launch(kernel, dim3(n // 256), dim3(256), 0, args)
        except ExperimentError as exc:
            print("KIND", exc.kind)
            try:
                device.read(base, 4)
            except ExperimentError as again:
                print("AFTER", again.kind, "fresh process" in str(again))
        else:
            print("RAN")
    """
)


def test_a_fault_is_reported_and_the_next_process_runs_cleanly(tmp_path):
    from pathlib import Path

    here = Path(__file__).resolve().parent
    script = tmp_path / "fault.py"
    script.write_text(FAULT_SCRIPT.format(paths=[str(here), str(here.parent)]))
    faulted = subprocess.run(
        [sys.executable, str(script), "fault"], capture_output=True, text=True, timeout=120, check=False
    )
    assert "KIND fault" in faulted.stdout, faulted.stdout + faulted.stderr
    assert "AFTER fault True" in faulted.stdout
    clean = subprocess.run(
        [sys.executable, str(script), "clean"], capture_output=True, text=True, timeout=120, check=False
    )
    assert clean.stdout.strip() == "RAN", clean.stdout + clean.stderr


def test_closed_device_and_unloaded_kernel_raise_instead_of_crashing(cuda_backend):
    device = cuda_backend.open_device(0)
    kernel = _compile(cuda_backend, device, "vector_add", "vector_add")
    kernel.close()
    with pytest.raises(MnemeError, match="unloaded"):
        device.launch(kernel, dim3(1), dim3(32), 0, _vector_add_args(0, 0, 0, 0))
    device.close()
    with pytest.raises(MnemeError, match="closed"):
        device.read(BASE, 4)
