"""The CUDA recorder's memory bookkeeping and in-application figures, without a GPU.

The native library is built against the CUDA headers; its exported helpers (pitch rounding,
the interval set that tracks the application's own VMM mappings) run on real inputs, and
finalize reads counts files laid out exactly as the recorder writes them.
"""

from __future__ import annotations

import ctypes
import struct

import pytest

recorder = pytest.importorskip("mneme_cuda.recorder")

from raw_launches import BASE, MiB, needs_nvcc, write_counts, write_saxpy_launch

from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.records import RecordedExecution


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    try:
        library = recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")
    lib = ctypes.CDLL(str(library))
    lib.mneme_recorder_pitch.restype = ctypes.c_uint64
    lib.mneme_recorder_pitch.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    lib.mneme_recorder_intervals.restype = ctypes.c_size_t
    lib.mneme_recorder_intervals.argtypes = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.c_size_t,
    ]
    u64p = ctypes.POINTER(ctypes.c_uint64)
    lib.mneme_recorder_outside_params.restype = ctypes.c_size_t
    lib.mneme_recorder_outside_params.argtypes = [
        u64p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        u64p,
        ctypes.c_size_t,
        u64p,
        ctypes.c_size_t,
    ]
    return lib


@pytest.mark.parametrize(
    ("width", "alignment", "pitch"),
    [
        (1000, 512, 1024),
        (1024, 512, 1024),
        (1, 32, 32),
        (4097, 32, 4128),
        (4000, 0, 4000),
        (0, 512, 0),
        (3 * 4, 12, 12),  # an alignment that is no power of two still rounds up to a multiple
    ],
)
def test_a_pitched_row_is_its_width_rounded_up_to_the_alignment(native, width, alignment, pitch):
    assert native.mneme_recorder_pitch(width, alignment) == pitch


def _intervals(native, ops):
    flat = (ctypes.c_uint64 * (3 * len(ops)))(*[v for op in ops for v in op])
    out = (ctypes.c_uint64 * 64)()
    n = native.mneme_recorder_intervals(flat, len(ops), out, 32)
    return [(out[2 * i], out[2 * i + 1]) for i in range(n)]


ADD, REMOVE = 1, 0
Z = BASE + (1 << 40)  # the zone above the placed range


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        # PyTorch maps an expandable segment 20 MiB at a time, then makes each piece accessible.
        ([(ADD, Z, Z + 20 * MiB), (ADD, Z + 20 * MiB, Z + 40 * MiB)], [(Z, Z + 40 * MiB)]),
        (
            [(ADD, Z + 40 * MiB, Z + 60 * MiB), (ADD, Z, Z + 20 * MiB)],
            [(Z, Z + 20 * MiB), (Z + 40 * MiB, Z + 60 * MiB)],
        ),
        (
            [(ADD, Z, Z + 20 * MiB), (ADD, Z + 40 * MiB, Z + 60 * MiB), (ADD, Z + 10 * MiB, Z + 50 * MiB)],
            [(Z, Z + 60 * MiB)],
        ),
        (
            [(ADD, Z, Z + 60 * MiB), (REMOVE, Z + 20 * MiB, Z + 40 * MiB)],
            [(Z, Z + 20 * MiB), (Z + 40 * MiB, Z + 60 * MiB)],
        ),
        ([(ADD, Z, Z + 60 * MiB), (REMOVE, Z, Z + 20 * MiB)], [(Z + 20 * MiB, Z + 60 * MiB)]),
        (
            [(ADD, Z, Z + 20 * MiB), (ADD, Z + 40 * MiB, Z + 60 * MiB), (REMOVE, Z + 10 * MiB, Z + 50 * MiB)],
            [(Z, Z + 10 * MiB), (Z + 50 * MiB, Z + 60 * MiB)],
        ),
        ([(ADD, Z, Z + 20 * MiB), (REMOVE, Z - 2 * MiB, Z + 22 * MiB)], []),  # cuMemAddressFree of the whole range
        ([(REMOVE, Z, Z + 2 * MiB), (ADD, Z, Z)], []),  # nothing to remove; an empty range adds nothing
    ],
)
def test_the_applications_mapped_ranges_merge_and_split_as_it_maps_and_unmaps(native, ops, expected):
    assert _intervals(native, ops) == expected


def test_in_application_times_and_graph_launches_add_up_over_processes(tmp_path):
    raw = tmp_path / "raw"
    write_counts(
        raw,
        1,
        {
            "saxpy": {
                "seen": 20,
                "instances": {"00000000000000aa": 20},
                "graph_launches": 0,
                "app_times": {"00000000000000aa": [1.0e-5, 1.1e-5]},
            },
            "step": {"seen": 0, "instances": {}, "graph_launches": 7, "app_times": {}},
        },
    )
    write_counts(
        raw,
        2,
        {
            "saxpy": {
                "seen": 3,
                "instances": {"00000000000000aa": 3},
                "graph_launches": 2,
                "app_times": {"00000000000000aa": [1.2e-5]},
            }
        },
    )
    write_counts(raw, 3, {"saxpy": {"seen": 1, "instances": {"00000000000000aa": 1}}})  # an older recorder's file
    times, graphs, timers = recorder.in_application(raw)
    assert times == {("saxpy", "00000000000000aa"): [1.0e-5, 1.1e-5, 1.2e-5]}
    assert timers == {("saxpy", "00000000000000aa"): "events"}
    assert graphs == {"step": 7, "saxpy": 2}
    assert recorder.occurrences(raw) == {("saxpy", "00000000000000aa"): 24}


def test_kernel_timestamps_of_any_process_win_over_event_times_and_the_two_never_mix(tmp_path):
    raw = tmp_path / "raw"
    write_counts(
        raw,
        1,
        {
            "saxpy": {
                "seen": 3,
                "instances": {"aa": 3, "bb": 3},
                "graph_launches": 0,
                "app_times": {"aa": [3.5e-6]},
                "kernel_times": {"bb": [1.3e-6]},
            }
        },
    )
    write_counts(
        raw,
        2,
        {
            "saxpy": {
                "seen": 3,
                "instances": {"aa": 3, "bb": 3},
                "graph_launches": 0,
                "app_times": {"bb": [3.7e-6]},
                "kernel_times": {"aa": [1.12e-6, 1.13e-6]},
            }
        },
    )
    times, _, timers = recorder.in_application(raw)
    assert times == {("saxpy", "aa"): [1.12e-6, 1.13e-6], ("saxpy", "bb"): [1.3e-6]}
    assert timers == {("saxpy", "aa"): "cupti", ("saxpy", "bb"): "cupti"}


def test_unreadable_in_application_times_are_an_error_naming_the_file_and_field(tmp_path):
    raw = tmp_path / "raw"
    write_counts(raw, 9, {"saxpy": {"seen": 1, "instances": {"1": 1}, "app_times": {"1": [-1.0]}}})
    with pytest.raises(FormatError, match="positive seconds") as err:
        recorder.in_application(raw)
    assert str(err.value).startswith(str(raw / "counts-9.json")) and err.value.field == "kernels.saxpy.app_times.1"
    write_counts(raw, 9, {"saxpy": {"seen": 1, "instances": {"1": 1}, "kernel_times": {"1": ["1e-6"]}}})
    with pytest.raises(FormatError, match="positive seconds") as err:
        recorder.in_application(raw)
    assert err.value.field == "kernels.saxpy.kernel_times.1"


@needs_nvcc
def test_finalize_gives_each_instance_its_in_application_times(tmp_path):
    raw = tmp_path / "raw"
    write_saxpy_launch(raw, tmp_path, "00000000000000aa")
    write_counts(
        raw,
        5,
        {
            "saxpy": {
                "seen": 17,
                "instances": {"00000000000000aa": 17},
                "graph_launches": 0,
                "app_times": {"00000000000000aa": [2.5e-6, 2.25e-6, 2.5e-6]},
            }
        },
    )
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.app_times == [2.5e-6, 2.25e-6, 2.5e-6] and inst.occ == 17 and inst.app_timer == "events"
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")  # finalizing again changes nothing
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.app_times == [2.5e-6, 2.25e-6, 2.5e-6]
    write_counts(
        raw,
        6,
        {
            "saxpy": {
                "seen": 17,
                "instances": {"00000000000000aa": 17},
                "graph_launches": 0,
                "kernel_times": {"00000000000000aa": [1.1e-6, 1.2e-6]},
            }
        },
    )
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.app_times == [1.1e-6, 1.2e-6] and inst.app_timer == "cupti"


def test_timed_launches_reach_the_recorder_through_its_environment(tmp_path):
    env = recorder.environment(tmp_path, library=tmp_path / "lib.so", timed_launches=4)
    assert env["MNEME_RECORD_TIMED"] == "4"
    with pytest.raises(MnemeError, match="timed launches"):
        recorder.environment(tmp_path, library=tmp_path / "lib.so", timed_launches=-1)


def test_the_timer_reaches_the_recorder_with_the_libcupti_it_should_open(tmp_path, monkeypatch):
    from mneme_cuda import cupti

    fake = tmp_path / "libcupti.so.13"
    monkeypatch.delenv("MNEME_CUPTI_LIB", raising=False)
    monkeypatch.setattr(cupti, "cupti_library", lambda: fake)  # what the search found
    env = recorder.environment(tmp_path, library=tmp_path / "lib.so")
    assert (env["MNEME_RECORD_TIMER"], env["MNEME_CUPTI_LIB"]) == ("auto", str(fake))
    assert "MNEME_CUPTI_LIB" not in recorder.environment(tmp_path, library=tmp_path / "lib.so", timer="events")
    monkeypatch.setenv("MNEME_CUPTI_LIB", str(tmp_path / "mine.so"))  # the user's own choice stays
    assert recorder.environment(tmp_path, library=tmp_path / "lib.so")["MNEME_CUPTI_LIB"] == str(tmp_path / "mine.so")
    assert recorder.environment(tmp_path, library=tmp_path / "lib.so", timer="events")["MNEME_RECORD_TIMER"] == "events"
    with pytest.raises(UsageError, match="^the cuda backend has no timer 'stopwatch'; use one of auto, cupti, events$"):
        recorder.environment(tmp_path, library=tmp_path / "lib.so", timer="stopwatch")


PINNED = 0x7F0000000000  # where pinned host memory lands in a Linux process


def _outside(native, ranges, params):
    """The indexes of `params` (struct format, value) that point into `ranges`, as the recorder finds them."""
    args, layout = b"", []
    for fmt, value in params:
        size = struct.calcsize(fmt)
        args += b"\0" * (-len(args) % size)
        layout += [len(args), size]
        args += struct.pack("<" + fmt, value)
    flat = (ctypes.c_uint64 * max(1, 2 * len(ranges)))(*[v for r in ranges for v in r])
    lay = (ctypes.c_uint64 * max(1, len(layout)))(*layout)
    out = (ctypes.c_uint64 * 16)()
    n = native.mneme_recorder_outside_params(flat, len(ranges), args, len(args), lay, len(params), out, 16)
    return [out[i] for i in range(n)]


@pytest.mark.parametrize(
    ("ranges", "params", "expected"),
    [
        # saxpy(n, a, x, y) with x in pinned host memory, y placed: x is found, y is not
        ([(PINNED, 4096)], [("i", 1024), ("f", 2.0), ("Q", PINNED + 16), ("Q", BASE)], [2]),
        ([(PINNED, 4096)], [("Q", PINNED + 4095), ("Q", PINNED + 4096), ("Q", PINNED - 1)], [0]),  # the range's ends
        ([(PINNED, 4096), (PINNED + 8192, 64)], [("Q", PINNED + 8200), ("Q", PINNED)], [0, 1]),
        ([], [("Q", PINNED)], []),  # nothing outside the recording: nothing to warn about
        ([(PINNED, 4096)], [("I", PINNED & 0xFFFFFFFF)], []),  # only pointer-sized parameters are pointers
    ],
)
def test_launch_arguments_that_point_into_memory_a_recording_does_not_hold_are_found(native, ranges, params, expected):
    assert _outside(native, ranges, params) == expected
