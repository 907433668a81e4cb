"""Every launch path a program takes is recorded, on a real GPU (issue 38, points 1 and 5).

`programs/launch_paths_app.cu` launches through triple chevrons (a benchmark's loop of two kernels),
a struct by value, cudaLaunchKernelExC, cudaLaunchCooperativeKernel and the driver's cuLaunchKernel
(from cudaGetDriverEntryPointByVersion), then calls cudaDeviceReset right after its last launch, as
benchmark suites end; built as it is and with --default-stream per-thread. Its launches per kernel
(printed) are checked against the recorder's counts, and every instance replays verified.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_corpus import ROOT

pytestmark = pytest.mark.gpu

SOURCE = Path(__file__).parent / "programs" / "launch_paths_app.cu"
KERNELS = {"relax", "swap_back", "by_value", "launched_ex", "cooperative", "by_driver"}


def _build(tmp_path_factory, *flags: str) -> Path:
    """launch_paths_app built with `flags`: from .gpu/bin (scripts/gpu-suite --prepare), else with nvcc here."""
    prebuilt = ROOT / ".gpu" / "bin" / ("launch_paths_app_ptds" if flags else "launch_paths_app")
    if prebuilt.exists():
        return prebuilt
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no prebuilt launch_paths_app in .gpu/bin and no nvcc to build it")
    out = tmp_path_factory.mktemp("launch_paths") / "launch_paths_app"
    subprocess.run(
        [nvcc, "-arch=sm_90", *flags, f"-I{SOURCE.parent}", "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
    )
    return out


def _record(app: Path, tmp_path: Path, library: Path, *args: str) -> tuple[dict[str, int], list[Path], str]:
    """Run `app` under the recorder; (launches it printed per kernel, databases, its stderr)."""
    from mneme_cuda import recorder

    raw = tmp_path / "raw"
    env = recorder.environment(raw, library=library, max_recordings=8)
    raw.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(app), *args], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    launched = {
        line.split()[1]: int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("launches")
    }
    return launched, recorder.finalize(raw, tmp_path / "db", arch="sm_90"), proc.stderr


def _replay_all(databases):
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    failures = []
    for db in databases:
        rec = RecordedExecution.from_json(db)
        for dynamic_hash in rec.kernel_instances:
            with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode="cubin") as ex:
                result = ex.execute(ex.default_config())
            if not result.ok:
                failures.append(f"{rec.kernel_name}: {result.error}")
    return failures


@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy-stream", "per-thread"])
def test_every_launch_path_is_recorded_counted_and_replays_though_the_device_is_reset_at_once(
    recorder_library, tmp_path_factory, tmp_path, flags
):
    from mneme.core.records import RecordedExecution

    app = _build(tmp_path_factory, *flags)
    launched, databases, stderr = _record(app, tmp_path, recorder_library)
    assert set(launched) == KERNELS
    recorded = {}
    for db in databases:
        rec = RecordedExecution.from_json(db)
        recorded[rec.kernel_name] = sum(inst.occ for inst in rec.kernel_instances.values())
    assert recorded == launched, stderr  # every launch counted, every kernel with an instance
    assert "device context" in stderr  # the reset ends recording, with its one message, after the writer drained
    assert _replay_all(databases) == []


def test_a_program_that_exits_inside_its_loop_keeps_the_launches_it_made(recorder_library, tmp_path_factory, tmp_path):
    from mneme.core.records import RecordedExecution

    app = _build(tmp_path_factory)
    launched, databases, stderr = _record(app, tmp_path, recorder_library, "exit")
    assert launched == {"relax": 2, "swap_back": 2}
    assert {RecordedExecution.from_json(db).kernel_name for db in databases} == {"relax", "swap_back"}, stderr
    assert _replay_all(databases) == []


def test_the_recorded_launch_is_timed_from_a_flushed_l2_and_the_replay_starts_from_the_same_state(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme.core.records import RecordedExecution

    app = _build(tmp_path_factory)
    _, databases, _ = _record(app, tmp_path, recorder_library)
    (db,) = [db for db in databases if RecordedExecution.from_json(db).kernel_name == "relax"]
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.recorded_time is not None and inst.recorded_cache == "flushed"
    assert inst.app_times and inst.app_times[0] == pytest.approx(inst.recorded_time)  # the same launch
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "replay", "-rdb", str(db), "--mode", "cubin", "--json", "--iterations", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["cache"] == "flushed" and data["recorded_time"] == pytest.approx(inst.recorded_time)
    assert data["replay_vs_app"] == pytest.approx(data["median_time"] / inst.recorded_time)
