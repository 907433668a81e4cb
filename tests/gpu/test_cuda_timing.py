"""Timing behind the launch gate on a real GPU: CUDA events time the work, not the host's submission of it.

The replay side (mneme_cuda.gate.LaunchGate, used by the CUDA device's `time`) and the recorder's
side (the timed launches inside the application, reported in counts-<pid>.json "app_timing").
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from gpu_corpus import ROOT

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


@pytest.mark.parametrize(("gate", "gated", "ungated"), [("1", 17, 0), ("0", 0, 17)])
def test_the_recorder_times_repeated_launches_behind_the_gate_and_says_how(cuda_backend, tmp_path, gate, gated,
                                                                           ungated):  # fmt: skip
    from mneme_cuda import recorder

    app = ROOT / ".gpu" / "bin" / "pitch_app"
    if not app.exists():
        pytest.skip("no prebuilt pitch_app in .gpu/bin (scripts/gpu-suite --prepare)")
    prebuilt = ROOT / ".gpu" / "lib" / recorder.LIBRARY
    env = recorder.environment(tmp_path / "raw", kernel="scale_add_2d",
                               library=prebuilt if prebuilt.exists() else None)  # fmt: skip
    env["MNEME_RECORD_TIMING_GATE"] = gate
    proc = subprocess.run([str(app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "pitch_app OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["gated"], timing["ungated"]) == (gated, ungated)  # the recorded launch and the next 16
    assert ("MNEME_RECORD_TIMING_GATE=0" in timing["ungated_because"]) == (gate == "0"), timing
    assert ("without the gate" in proc.stderr) == (gate == "0"), proc.stderr[-2000:]
    assert (timing["exclusive"], timing["shared"]) == (17, 0)  # each timed alone on the device
    (times,) = recorder.in_application(tmp_path / "raw")[0].values()
    assert len(times) == 17 and all(0 < t < 0.1 for t in times)


@pytest.mark.parametrize(("exclusive", "alone", "beside"), [(None, 34, 0), ("0", 0, 34)])
def test_two_threads_launching_at_once_run_on_while_each_timed_launch_runs_alone(cuda_backend, tmp_path, exclusive,
                                                                                  alone, beside):  # fmt: skip
    from mneme_cuda import recorder

    app = ROOT / ".gpu" / "bin" / "streams_app"
    if not app.exists():
        pytest.skip("no prebuilt streams_app in .gpu/bin (scripts/gpu-suite --prepare)")
    prebuilt = ROOT / ".gpu" / "lib" / recorder.LIBRARY
    env = recorder.environment(tmp_path / "raw", kernel="^saxpy$", library=prebuilt if prebuilt.exists() else None)
    env.pop("MNEME_RECORD_TIMING_EXCLUSIVE", None)
    if exclusive is not None:
        env["MNEME_RECORD_TIMING_EXCLUSIVE"] = exclusive
    # lockstep: both threads launch at the same moment, every time, so each timed launch has a rival
    proc = subprocess.run([str(app), "lockstep"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "streams_app OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    timing = _counts(tmp_path / "raw")["app_timing"]
    assert (timing["exclusive"], timing["shared"], timing["late"]) == (alone, beside, 0), timing
    times = recorder.in_application(tmp_path / "raw")[0]
    assert sorted(len(t) for t in times.values()) == [17, 17]  # both threads' instances, every launch timed
