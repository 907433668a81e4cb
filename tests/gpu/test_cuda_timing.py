"""Timing on a real GPU: by the kernel's own timestamps (CUPTI), and by CUDA events behind the launch gate.

The replay side (the CUDA device's `time`: mneme_cuda.cupti's kernel timer, or events behind
mneme_cuda.gate.LaunchGate) and the recorder's side (the timed launches inside the application,
reported in counts-<pid>.json "kernel_times"/"app_times" and "app_timing").
"""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import time
from pathlib import Path

import pytest
from gpu_corpus import ROOT

from mneme.core.types import dim3

pytest.importorskip("mneme_cuda")

pytestmark = pytest.mark.gpu

LATE_S = 0.05  # how late the host submits the work after its start event is queued


def _late_submission_seconds(device, buffer, gated: bool) -> float:
    """Seconds between two events around a memset that the host queues LATE_S after the start event."""
    from mneme_cuda.driver import check, driver

    cu = driver()
    device.synchronize()
    start, stop = (check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate") for _ in range(2))
    gate = device.launch_gate
    ticket = gate.hold(device.stream) if gated else 0
    try:
        check(cu.cuEventRecord(start, device.stream), "cuEventRecord")
        time.sleep(LATE_S)
        device.fill(buffer.addr, buffer.size, 7)
        check(cu.cuEventRecord(stop, device.stream), "cuEventRecord")
    finally:
        gate.release(ticket)
    check(cu.cuEventSynchronize(stop), "cuEventSynchronize")
    seconds = check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime") / 1e3
    cu.cuEventDestroy(start)
    cu.cuEventDestroy(stop)
    return seconds


def test_a_gated_stream_runs_start_event_work_and_stop_event_back_to_back(cuda_device):
    buffer = cuda_device.alloc(1 << 20)
    try:
        assert cuda_device.launch_gate.usable, cuda_device.launch_gate.unavailable
        ungated = _late_submission_seconds(cuda_device, buffer, gated=False)
        gated = _late_submission_seconds(cuda_device, buffer, gated=True)
        assert cuda_device.read(buffer.addr, 16) == b"\x07" * 16
    finally:
        cuda_device.free(buffer)
    assert ungated >= 0.8 * LATE_S  # the start event fired while the host was still busy
    assert gated < 0.1 * LATE_S  # held: the memset alone (a 1 MiB memset takes microseconds)


def test_a_released_gate_lets_the_stream_run_on_when_nothing_was_queued_behind_it(cuda_device):
    gate = cuda_device.launch_gate
    first, second = gate.hold(cuda_device.stream), gate.hold(cuda_device.stream)
    assert 0 < first < second
    gate.release(second)  # releasing the later ticket releases the earlier wait too
    cuda_device.synchronize()


def _counts(raw: Path) -> dict:
    (path,) = raw.glob("counts-*.json")
    return json.loads(path.read_text())


def _run_recorded(
    name: str, raw: Path, kernel: str, *args: str, env: dict[str, str | None] | None = None, **options
) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The prebuilt test program `name` (with `args`), run under the recorder (`recorder.environment`'s
    `options`; `env` on top, None removing a variable); it must pass. (its process, its environment)"""
    from mneme_cuda import recorder

    app = ROOT / ".gpu" / "bin" / name
    if not app.exists():
        pytest.skip(f"no prebuilt {name} in .gpu/bin (scripts/gpu-suite --prepare)")
    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    environment = recorder.environment(raw, kernel=kernel, library=prebuilt if prebuilt.exists() else None, **options)
    for key, value in (env or {}).items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    proc = subprocess.run([str(app), *args], env=environment, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and f"{name} OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    return proc, environment


@pytest.mark.parametrize(("gate", "gated", "ungated"), [("1", 17, 0), ("0", 0, 17)])
def test_the_recorder_times_repeated_launches_behind_the_gate_and_says_how(
    cuda_backend, tmp_path, gate, gated, ungated
):
    from mneme_cuda import recorder

    proc, _ = _run_recorded(
        "pitch_app", tmp_path / "raw", "scale_add_2d", timer="events", env={"MNEME_RECORD_TIMING_GATE": gate}
    )
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["gated"], timing["ungated"]) == (gated, ungated)  # the recorded launch and the next 16
    assert ("MNEME_RECORD_TIMING_GATE=0" in timing["ungated_because"]) == (gate == "0"), timing
    assert ("without the gate" in proc.stderr) == (gate == "0"), proc.stderr[-2000:]
    assert (timing["exclusive"], timing["shared"]) == (17, 0)  # each timed alone on the device
    (times,) = recorder.in_application(tmp_path / "raw")[0].values()
    assert len(times) == 17 and all(0 < t < 0.1 for t in times)


@pytest.mark.parametrize(("exclusive", "alone", "beside"), [(None, 34, 0), ("0", 0, 34)])
def test_two_threads_launching_at_once_run_on_while_each_timed_launch_runs_alone(
    cuda_backend, tmp_path, exclusive, alone, beside
):
    from mneme_cuda import recorder

    # lockstep: both threads launch at the same moment, every time, so each timed launch has a rival
    _run_recorded(
        "streams_app", tmp_path / "raw", "^saxpy$", "lockstep", env={"MNEME_RECORD_TIMING_EXCLUSIVE": exclusive}
    )
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["exclusive"], timing["shared"], timing["late"]) == (alone, beside, 0), timing
    times = recorder.in_application(tmp_path / "raw")[0]
    assert sorted(len(t) for t in times.values()) == [17, 17]  # both threads' instances, every launch timed


# -- the kernel timer (CUPTI) ------------------------------------------------------------------------

# A kernel that spins until `n` clock cycles have passed (the clock register keeps ptxas from
# dropping the loop): an empty one and a long one, timed by both timers.
SPIN_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry mneme_spin(.param .u64 n)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [n];
    setp.eq.u64 %p, %rd1, 0;
    @%p bra DONE;
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra LOOP;
DONE:
    ret;
}
"""


@pytest.fixture(scope="module")
def spin(cuda_device):
    from mneme.core.backend import DeviceBinary
    from mneme_cuda import cupti

    if cupti.kernel_timer()[0] is None:
        pytest.fail(f"no kernel timer on the GPU machine: {cupti.kernel_timer()[1]}")  # never a silent skip here
    kernel = cuda_device.load(DeviceBinary("cuda", cuda_device.info.arch, "ptx", "mneme_spin", SPIN_PTX))
    yield kernel
    kernel.close()


ONE, WARP = dim3(1), dim3(32)


def _median_time(device, kernel, rounds: int, timer: str) -> float:
    times = device.time(kernel, ONE, WARP, 0, struct.pack("<Q", rounds), 21, timer=timer)
    assert device.timer_used == timer and len(times) == 21 and all(t > 0 for t in times)
    return statistics.median(times[1:])


def test_the_kernel_timer_takes_the_kernel_alone_and_agrees_with_events_on_a_long_kernel(cuda_device, spin):
    long_rounds = 200_000  # cycles: about 100 us at the H200's clock; the events' front end is a few percent of it
    by_kernel, by_events = (_median_time(cuda_device, spin, long_rounds, t) for t in ("cupti", "events"))
    assert by_kernel > 20e-6 and abs(by_kernel / by_events - 1) < 0.05, (by_kernel, by_events)
    empty_kernel, empty_events = (_median_time(cuda_device, spin, 0, t) for t in ("cupti", "events"))
    # an empty kernel: its own time is a microsecond or two; the event window adds the front end's work
    assert 0 < empty_kernel < 5e-6 and empty_kernel < empty_events, (empty_kernel, empty_events)
    cuda_device.time(spin, ONE, WARP, 0, struct.pack("<Q", 0), 3)  # auto: the kernel timer
    assert cuda_device.timer_used == "cupti"


def test_a_replay_reports_its_timer_and_takes_every_run_by_the_kernel_timer(cuda_device, spin):
    """The default match (windows): every timed run found by its own record, no correlation tag handed out, and
    the primed runs' records outside the windows (they run before each window opens)."""
    from mneme_cuda import cupti

    timer, _ = cupti.kernel_timer()
    assert timer.windows
    first = timer.ids(0)
    kernels, tags = timer.seen()
    times = cuda_device.time(spin, ONE, WARP, 0, struct.pack("<Q", 1000), 50, cache="primed", timer="cupti")
    assert cuda_device.timer_used == "cupti" and len(times) == 50 and all(0 < t < 1e-4 for t in times)
    assert timer.ids(0) == first and timer.seen()[1] == tags  # no tags, no correlation records
    assert timer.seen()[0] - kernels >= 100  # every run's kernel record came, primed and timed


def test_the_recorder_times_by_kernel_timestamps_and_the_record_says_so(cuda_backend, tmp_path):
    from mneme.core.records import RecordedExecution
    from mneme_cuda import recorder

    _, env = _run_recorded("pitch_app", tmp_path / "raw", "scale_add_2d")
    assert env["MNEME_RECORD_TIMER"] == "auto" and env.get("MNEME_CUPTI_LIB"), "libcupti was not found"
    counts = _counts(tmp_path / "raw")
    timing = counts["app_timing"]
    assert (timing["cupti"], timing["cupti_missed"], timing["gated"], timing["ungated"]) == (17, 0, 0, 0), timing
    assert (timing["exclusive"], timing["events_because"], timing["flushed"]) == (17, "", 1), timing  # one recorded
    (entry,) = counts["kernels"].values()
    assert entry["app_times"] == {} and [len(t) for t in entry["kernel_times"].values()] == [17]
    times, _, timers = recorder.in_application(tmp_path / "raw")
    assert list(timers.values()) == ["cupti"] and all(0 < t < 0.01 for t in next(iter(times.values())))
    (db,) = recorder.finalize(tmp_path / "raw", tmp_path / "db", arch=cuda_backend.arch(0))
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.app_timer == "cupti" and len(inst.app_times) == 17


@pytest.mark.parametrize("choice", ["auto", "cupti"])
def test_without_libcupti_the_recorder_times_with_events_and_says_why(cuda_backend, tmp_path, choice):
    from mneme_cuda import recorder

    proc, _ = _run_recorded(
        "pitch_app",
        tmp_path / "raw",
        "scale_add_2d",
        timer=choice,
        env={"MNEME_CUPTI_LIB": str(tmp_path / "no-such-libcupti.so")},
    )
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["cupti"], timing["gated"]) == (0, 17), timing
    assert "no-such-libcupti.so" in timing["events_because"], timing
    assert ("MNEME_RECORD_TIMER=cupti, but cannot open" in proc.stderr) == (choice == "cupti"), proc.stderr[-2000:]
    (times,) = recorder.in_application(tmp_path / "raw")[2].values()
    assert times == "events"


@pytest.mark.parametrize(("park", "parks", "resumes"), [("2", 2, 1), ("0", 0, 0)])
def test_the_kernel_timer_parks_between_timings_and_resumes_for_the_next_recorded_instance(
    cuda_backend, tmp_path, park, parks, resumes
):
    from mneme_cuda import recorder

    # "seq": thread 0's 17 launches of one instance, then thread 1's of another. Each instance: its
    # recorded launch and 4 repeats timed, then 12 untimed launches, of which the second parks the records
    # (MNEME_RECORD_TIMER_PARK=2); thread 1's recorded launch turns them on again before it is timed.
    # With parking off (0) the records stay on throughout, and every timing comes all the same.
    _run_recorded(
        "streams_app",
        tmp_path / "raw",
        "^saxpy$",
        "seq",
        env={"MNEME_RECORD_TIMED": "4", "MNEME_RECORD_TIMER_PARK": park},
    )
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["cupti"], timing["cupti_missed"], timing["events_because"]) == (10, 0, ""), timing
    assert (timing["timer_parks"], timing["timer_resumes"], timing["timer_park_stopped"]) == (parks, resumes, False)
    times, _, timers = recorder.in_application(tmp_path / "raw")
    assert sorted(len(t) for t in times.values()) == [5, 5] and set(timers.values()) == {"cupti"}
    assert all(0 < t < 0.01 for seconds in times.values() for t in seconds), times
    (entry,) = _counts(tmp_path / "raw")["kernels"].values()
    assert len(entry["recorded_time"]) == 2, entry  # both recorded launches timed, the second after any resume


def test_matched_by_correlation_tags_the_kernel_timer_agrees_with_events_on_a_long_kernel(cuda_device, tmp_path):
    """MNEME_CUPTI_MATCH=tags (a fresh process: the mode is the process's): each timed run tagged by a correlation
    id, found by it; on a ~100 us kernel it agrees with CUDA events within 5%, and every run has its record."""
    import os
    import sys

    ptx = tmp_path / "spin.ptx"
    ptx.write_bytes(SPIN_PTX)
    script = (
        "import statistics, struct, sys\n"
        "from pathlib import Path\n"
        "from mneme.core.backend import DeviceBinary\n"
        "from mneme.core.types import dim3\n"
        "from mneme_cuda.device import CudaDevice\n"
        "from mneme_cuda import cupti\n"
        "device = CudaDevice(0)\n"
        "kernel = device.load(DeviceBinary('cuda', device.info.arch, 'ptx', 'mneme_spin', Path(sys.argv[1]).read_bytes()))\n"
        "out = []\n"
        "for timer in ('cupti', 'events'):\n"
        "    times = device.time(kernel, dim3(1), dim3(32), 0, struct.pack('<Q', 200_000), 15, timer=timer)\n"
        "    out.append((device.timer_used, len(times), statistics.median(times[1:])))\n"
        "print(cupti.kernel_timer()[0].windows, *[x for row in out for x in row])\n"
    )
    env = {**os.environ, "MNEME_CUPTI_MATCH": "tags"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ptx)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    windows, used, n, by_kernel, used_events, _, by_events = proc.stdout.split()
    assert (windows, used, n, used_events) == ("False", "cupti", "15", "events"), proc.stdout
    assert float(by_kernel) > 20e-6 and abs(float(by_kernel) / float(by_events) - 1) < 0.05, proc.stdout
