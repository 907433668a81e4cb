"""The HIP kernel timer over rocprofiler-sdk: its record parsing, and why it is unusable here.

No rocprofiler-sdk and no AMD GPU on this machine: the dispatch records below are laid out by
hand after rocprofiler-sdk's documented struct (buffer_tracing.h), to test the parsing and the
matching of records to timed runs; nothing here claims the timer works. The `amdgpu` test needs
an AMD GPU with rocprofiler-sdk and has not run on AMD hardware yet.
"""

from __future__ import annotations

import struct

import pytest

from mneme_hip import rocprof


def record(dispatch_id: int, start: int, end: int, block=(256, 1, 1), grid=(1024, 1, 1), kind=11) -> bytes:
    """A kernel dispatch record's bytes: header fields, correlation and thread ids, timestamps, dispatch info."""
    head = struct.pack("<QiiQQQQQ", 184, kind, 2, 77, 0, 4242, start, end)
    info = struct.pack("<QQQQQII3I3I", 128, 1, 2, 99, dispatch_id, 0, 1024, *block, *grid) + bytes(56)
    assert len(head) == 56 and len(info) == 128
    return head + info


def test_a_dispatch_record_yields_its_timestamps_and_geometry():
    d = rocprof.parse_dispatch(record(7, 1_000, 3_500, block=(64, 2, 1), grid=(640, 4, 1)))
    assert (d.dispatch_id, d.kernel_id, d.start_ns, d.end_ns) == (7, 99, 1_000, 3_500)
    assert (d.workgroup, d.grid) == ((64, 2, 1), (640, 4, 1))
    assert d.seconds == pytest.approx(2.5e-6)
    assert rocprof.RECORD_BYTES == len(record(1, 0, 0))


def test_records_of_other_kinds_or_truncated_are_refused():
    with pytest.raises(ValueError, match="not a kernel dispatch record"):
        rocprof.parse_dispatch(record(1, 0, 1, kind=10))  # a memory copy record
    with pytest.raises(ValueError, match="at least"):
        rocprof.parse_dispatch(record(1, 0, 1)[:100])
    assert rocprof.header_is_dispatch(1 | (11 << 32))
    assert not rocprof.header_is_dispatch(1 | (10 << 32)) and not rocprof.header_is_dispatch(3 | (11 << 32))


def test_timed_runs_are_the_dispatches_of_the_launch_geometry_in_dispatch_order():
    block, grid = (256, 1, 1), (4, 1, 1)
    mine = [rocprof.parse_dispatch(record(i, 100 * i, 100 * i + 10 + i)) for i in (3, 1, 2)]
    other = rocprof.parse_dispatch(record(9, 0, 50_000, block=(1024, 1, 1), grid=(1 << 20, 1, 1)))  # e.g. a memset
    assert rocprof.runs_of([*mine, other], block, grid, 3) == pytest.approx([11e-9, 12e-9, 13e-9])
    assert rocprof.runs_of(mine[:2], block, grid, 3) is None  # a record missing: not a timing
    backwards = rocprof.parse_dispatch(record(4, 500, 400))
    assert rocprof.runs_of([*mine, backwards], block, grid, 4) is None


# -- why the timer is unusable here ----------------------------------------------------------------------


@pytest.fixture
def fresh_timer(monkeypatch):
    monkeypatch.setattr(rocprof, "_timer", None)
    rocprof.LOADER.forget()  # each case opens the library its environment names
    yield
    rocprof._timer = None
    rocprof.LOADER.forget()


def test_without_rocprofiler_sdk_the_timer_says_it_was_not_found(fresh_timer, monkeypatch):
    if rocprof.library_path() is not None:
        pytest.skip("this machine has librocprofiler-sdk")
    timer, why = rocprof.kernel_timer()
    assert timer is None and "librocprofiler-sdk was not found" in why and "MNEME_ROCPROFILER_SDK_LIB" in why


def test_a_library_that_is_not_rocprofiler_sdk_is_named_with_the_missing_version_function(fresh_timer, monkeypatch):
    import ctypes.util

    libc = ctypes.util.find_library("c")
    monkeypatch.setenv("MNEME_ROCPROFILER_SDK_LIB", libc)
    timer, why = rocprof.kernel_timer()
    assert timer is None and why.startswith(f"rocprofiler-sdk (the kernel timer) ({libc}):")
    assert "rocprofiler_get_version" in why and "MNEME_ROCPROFILER_SDK_LIB" in why


def test_a_missing_explicit_library_fails_naming_it(fresh_timer, monkeypatch, tmp_path):
    missing = tmp_path / "librocprofiler-sdk.so.1"
    monkeypatch.setenv("MNEME_ROCPROFILER_SDK_LIB", str(missing))
    timer, why = rocprof.kernel_timer()
    assert timer is None and str(missing) in why


def test_the_hip_backend_offers_the_timer_by_name():
    from mneme.core.backend import get_backend

    assert get_backend("hip").timers == ("auto", "rocprofiler", "hip-event", "host-clock")


# -- on an AMD GPU with rocprofiler-sdk (skipped elsewhere; not yet run on AMD hardware) ----------------


@pytest.mark.amdgpu
def test_dispatch_timestamps_time_each_run_on_the_gpu():
    import llvmlite.binding as llvm

    from mneme.core.backend import get_backend
    from mneme.core.types import ExperimentConfiguration
    from mneme_hip import compare

    backend = get_backend("hip")
    with backend.open_device(0) as device:  # the timer registered when hip-python was first imported
        timer, why = rocprof.kernel_timer()
        if timer is None:
            pytest.skip(f"rocprofiler-sdk kernel timer unusable: {why}")
        arch = backend.arch(0)
        binary = backend.compile(
            llvm.parse_assembly(compare.IR), compare.KERNEL, ExperimentConfiguration(grid=4, block=compare.BLOCK), arch
        )
        kernel = device.load(binary)
        base = 0x7F2B00000000
        device.reserve(base, 8 << 20)
        device.map(base, 8 << 20)
        device.write(base, bytes(8 << 20))
        args = compare.pack_args(base, base + (4 << 20), 4 << 20, base + (8 << 20) - 16, 4 * compare.BLOCK)
        times = device.time(kernel, 4, compare.BLOCK, 0, args, iterations=5, timer="rocprofiler")
        assert device.timer_used == "rocprofiler" and len(times) == 5 and all(0 < t < 1 for t in times)


def test_rocprofiler_sdk_loads_through_the_core_loader_where_installed(fresh_timer):
    if rocprof.library_path() is None:
        pytest.skip("librocprofiler-sdk is not installed here (ROCm 6.2+; or set MNEME_ROCPROFILER_SDK_LIB)")
    lib = rocprof.LOADER.load()  # its version is OLDEST_VERSION or newer, its functions declared
    assert lib.rocprofiler_force_configure.argtypes == [rocprof._CONFIGURE_CB]


@pytest.mark.parametrize(
    ("minor", "failure"),
    [
        (3, "it is rocprofiler-sdk 0.3.1; the kernel timer needs 0.4 or newer"),
        (5, "it has no function rocprofiler_force_configure"),  # the right version, not the whole library
    ],
)
def test_a_rocprofiler_sdk_of_another_version_is_refused_in_the_loaders_style(
    fresh_timer, monkeypatch, tmp_path, minor, failure
):
    import subprocess

    from mneme.core.native import c_compiler

    if c_compiler() is None:
        pytest.skip("no C compiler to build the test's library")
    source, fake = tmp_path / "sdk.c", tmp_path / "librocprofiler-sdk.so.1"
    source.write_text(
        "#include <stdint.h>\nint rocprofiler_get_version(uint32_t *major, uint32_t *minor, uint32_t "
        f"*patch) {{ *major = 0; *minor = {minor}; *patch = 1; return 0; }}\n"
    )
    subprocess.run([*c_compiler().split(), "-shared", "-fPIC", "-o", str(fake), str(source)], check=True)
    monkeypatch.setenv("MNEME_ROCPROFILER_SDK_LIB", str(fake))
    timer, why = rocprof.kernel_timer()
    assert timer is None and why.startswith(f"rocprofiler-sdk (the kernel timer) ({fake}): {failure}")
    assert why.endswith("or set MNEME_ROCPROFILER_SDK_LIB to its librocprofiler-sdk.so")
