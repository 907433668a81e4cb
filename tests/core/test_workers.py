"""Worker pool on the host backend with real captured kernels: futures, crashes, hangs, compile-ahead."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from irbuild import build_cuda_ir

from mneme import capture
from mneme.core.errors import ExperimentError, UsageError
from mneme.core.types import ExperimentConfiguration
from mneme.core.workers import AsyncReplayExecutor, describe_exit

# Behaves at the recorded launch (32 threads per block); with 33..64 threads per block it spins
# forever on a flag in device memory, with more it writes far outside its buffer.
MISBEHAVE_CU = r"""
extern "C" __global__ void misbehave(volatile int* flag, float* out, int n) {
  if (blockDim.x > 32 && blockDim.x <= 64) {
    while (*flag) {}
  }
  if (blockDim.x > 64 && threadIdx.x == 0) out[1 << 30] = 1.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    out[i] = 2.0f * i;
}
"""


@pytest.fixture(scope="module")
def misbehave_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("misbehave")
    source = folder / "misbehave.cu"
    source.write_text(MISBEHAVE_CU)
    ir_path = build_cuda_ir(source, out_dir=folder / "ir")
    flag = np.ones(1, dtype=np.int32)
    out = np.zeros(256, dtype=np.float32)
    return capture.capture(ir_path, "misbehave", 2, 32, [flag, out, 256], folder / "rec", backend="host")


def recorded(block=32, grid=2):
    return ExperimentConfiguration(grid=(grid, 1, 1), block=(block, 1, 1))


def test_futures_resolve_to_verified_results_and_each_worker_has_a_log(misbehave_db, tmp_path):
    with AsyncReplayExecutor(misbehave_db, iterations=2, results_db_dir=tmp_path, num_workers=2) as pool:
        assert pool.default_config == recorded()
        futures = [pool.submit(recorded(block=b, grid=g)) for b, g in ((32, 2), (16, 4), (8, 1), (32, 8))]
        results = [f.result(timeout=120) for f in futures]
    assert all(r.ok for r in results), [r.error for r in results]
    assert all(len(r.exec_time) == 2 and len(r.warmup_time) == 1 for r in results)
    assert all(r.backend == "host" and r.start_time.endswith("+00:00") for r in results)
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["worker-device0-0.log", "worker-device0-1.log"]


def test_a_worker_killed_mid_experiment_fails_that_experiment_and_the_next_one_succeeds(misbehave_db, tmp_path):
    with AsyncReplayExecutor(misbehave_db, iterations=1, results_db_dir=tmp_path, timeout=120) as pool:
        future = pool.submit(recorded(block=64))  # spins
        worker = pool.busy_worker()
        time.sleep(0.5)
        os.kill(worker.pid, signal.SIGKILL)
        result = future.result(timeout=60)
        assert result.failed and result.error_kind == "crash"
        assert "SIGKILL" in result.error and "host:0" in result.error
        after = pool.evaluate(recorded())
    assert after.ok, after.error


def test_a_hanging_configuration_times_out_from_the_baseline_and_the_worker_is_replaced(misbehave_db, tmp_path):
    with AsyncReplayExecutor(
        misbehave_db, iterations=1, results_db_dir=tmp_path, min_timeout=2.0, timeout_factor=5.0
    ) as pool:
        baseline = pool.evaluate(recorded())
        assert baseline.ok and pool.baseline is baseline
        limit = pool._timeout_for(None, "device")
        assert 2.0 < limit < 30.0
        first_pid = pool.worker_pids[0]
        start = time.monotonic()
        hung = pool.evaluate(recorded(block=64))
        waited = time.monotonic() - start
        assert hung.failed and hung.error_kind == "timeout"
        assert f"{limit:.1f} s" in hung.error
        assert limit <= waited < limit + 30
        after = pool.evaluate(recorded())
        assert after.ok, after.error
        assert pool.worker_pids[0] != first_pid


def test_a_configuration_that_writes_out_of_bounds_fails_and_the_pool_goes_on(misbehave_db, tmp_path):
    with AsyncReplayExecutor(misbehave_db, iterations=1, results_db_dir=tmp_path, timeout=60) as pool:
        first_pid = pool.worker_pids[0]
        bad = pool.evaluate(recorded(block=128))
        good = pool.evaluate(recorded())
        # A fault may leave a device context unusable (CUDA), so the worker is replaced.
        assert pool.worker_pids[0] != first_pid
    assert bad.failed and bad.error_kind in ("fault", "crash")
    assert good.ok, good.error


def test_compile_ahead_builds_each_variant_once_in_the_compile_pool_and_the_results_verify(misbehave_db, tmp_path):
    configs = [recorded(block=b).replace(passes=p) for b in (8, 16, 32) for p in ("default<O2>", "default<O3>")]
    with AsyncReplayExecutor(misbehave_db, iterations=1, results_db_dir=tmp_path, compile_workers=1) as pool:
        pool.wait_ready()  # jobs go to the compile pool once it is warm
        results = pool.map(configs)
        compiled = pool.compile_workers[0].jobs_done
    assert all(r.ok for r in results), [r.error for r in results]
    assert compiled == len(configs)
    # Block size is not part of the code (no specialize_dims): two builds, the rest from the build cache.
    assert sum(r.opt_time > 0 for r in results) == 2
    assert len({r.variant_hash for r in results}) == 1


def test_a_worker_that_cannot_open_the_recording_gives_up_at_once_and_says_why(tmp_path):
    db = tmp_path / "broken.json"
    db.write_text(json.dumps({"SchemaVersion": 1, "KernelName": "k"}))
    pool = AsyncReplayExecutor(db, results_db_dir=tmp_path, max_startup_failures=3, start=False)
    with pytest.raises(UsageError, match="no worker could start.*broken.json.*required field"):  # exit 2: the input's
        pool.start()
    assert pool.device_workers[0].spawns == 1  # the same error on every retry: not retried
    assert "broken.json" in (tmp_path / "logs" / "worker-device0-0.log").read_text()


def test_workers_that_do_not_come_up_are_retried_a_bounded_number_of_times(misbehave_db, tmp_path):
    pool = AsyncReplayExecutor(
        misbehave_db, results_db_dir=tmp_path, startup_timeout=0.05, max_startup_failures=2, start=False
    )
    with pytest.raises(ExperimentError, match="was not ready within"):
        pool.start()
    assert pool.device_workers[0].spawns == 2


def test_exit_codes_and_signals_are_described():
    assert describe_exit(-9) == "signal SIGKILL"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(None) == "no exit code"


def test_submitting_after_shutdown_is_refused(misbehave_db, tmp_path):
    pool = AsyncReplayExecutor(misbehave_db, results_db_dir=tmp_path, start=False)
    pool.shutdown()
    with pytest.raises(ExperimentError, match="shut down"):
        pool.submit(recorded())
    assert Path(tmp_path / "logs").is_dir()


def test_two_workers_on_one_device_never_run_at_the_same_time(misbehave_db, tmp_path):
    with AsyncReplayExecutor(
        misbehave_db, iterations=1, results_db_dir=tmp_path, num_workers=2, devices=[0], timeout=4.0
    ) as pool:
        hung = pool.submit(recorded(block=64))
        holder = pool.busy_worker()
        deadline = time.monotonic() + 60
        while not holder._holding and time.monotonic() < deadline:
            time.sleep(0.01)
        assert holder._holding
        normal = pool.submit(recorded())
        hung_result = hung.result(timeout=60)
        normal_result = normal.result(timeout=60)
    assert hung_result.error_kind == "timeout"
    assert normal_result.ok, normal_result.error
    # The second worker had its binary ready early, but got the device only after the hang was killed.
    assert normal_result.end_time >= hung_result.end_time


def test_several_devices_each_get_work_and_no_two_timing_runs_ever_share_a_device(misbehave_db, tmp_path, monkeypatch):
    # The host backend exposes this CPU as two devices; two workers per device contend for each.
    monkeypatch.setenv("MNEME_HOST_DEVICES", "2")
    configs = [recorded(block=b, grid=g) for b in (8, 16, 32) for g in (1, 2, 4, 8)]
    with AsyncReplayExecutor(
        misbehave_db, iterations=2, results_db_dir=tmp_path, num_workers=4, devices=[0, 1]
    ) as pool:
        assert sorted(w.device_id for w in pool.device_workers) == [0, 0, 1, 1]
        results = pool.map(configs)
        uses = list(pool.device_uses)
        device_of = {w.name: w.device_id for w in pool.device_workers}
    assert all(r.ok for r in results), [r.error for r in results]
    assert {r.gpu_id for r in results} == {0, 1}  # every device got work
    assert {r.device.split()[0] for r in results} == {"host:0", "host:1"}  # opened by the worker processes
    assert len(uses) == len(configs) and all(device_of[u.worker] == u.device_id for u in uses)
    for device in (0, 1):
        spans = sorted((u.start, u.end) for u in uses if u.device_id == device)
        assert spans, device
        overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
        assert not overlaps, (device, overlaps)  # one timing run at a time on each device


def test_a_device_the_backend_does_not_have_is_refused_naming_it(misbehave_db, tmp_path, monkeypatch):

    monkeypatch.delenv("MNEME_HOST_DEVICES", raising=False)
    pool = AsyncReplayExecutor(misbehave_db, results_db_dir=tmp_path, devices=[0, 1], start=False)
    with pytest.raises(UsageError, match=r"device 1 of --devices 0,1: no worker could start.*has 1 device"):
        pool.start()
    assert [w.spawns for w in pool.device_workers] == [1, 1]  # the error repeats: not retried


def test_until_a_compile_worker_is_warm_the_device_worker_builds_for_itself(misbehave_db, tmp_path):
    """Compile workers start after the device workers (they need the device's architecture); nothing waits for them."""
    with AsyncReplayExecutor(misbehave_db, iterations=1, results_db_dir=tmp_path, compile_workers=1) as pool:
        compiler = pool.compile_workers[0]
        assert not compiler.ready.is_set()  # its process was only just spawned
        first = pool.evaluate(recorded())
        built_by_compiler = compiler.jobs_done
        pool.wait_ready()
        later = pool.evaluate(recorded().replace(passes="default<O3>"))
        built_ahead = compiler.jobs_done
    assert first.ok and later.ok, (first.error, later.error)
    assert built_by_compiler == 0  # the device worker built it, while the compile worker was starting
    assert built_ahead == 1  # the later one, once the compile worker was warm


def test_shutdown_wakes_idle_workers_at_once(misbehave_db, tmp_path):
    """An idle worker waits on its queue; shutdown must not wait for that wait to time out."""
    import time

    pool = AsyncReplayExecutor(misbehave_db, iterations=1, results_db_dir=tmp_path, compile_workers=0)
    assert pool.evaluate(recorded()).ok
    threads = [w._thread for w in pool.device_workers]
    pool.shutdown()
    assert not any(t.is_alive() for t in threads)
    assert all(w.process is None or not w.process.is_alive() for w in pool.device_workers)


def test_a_worker_does_not_run_the_parent_scripts_module_level_code(misbehave_db, tmp_path):
    """Workers import only what they run: a script's top level (its imports, its side effects) runs once, in the parent."""
    import subprocess
    import sys

    marker = tmp_path / "imported"
    script = tmp_path / "tune_script.py"
    script.write_text(
        "import sys\n"
        f"open({str(marker)!r}, 'a').write('x')\n"
        "from mneme.core.workers import AsyncReplayExecutor\n"
        "from mneme.core.types import ExperimentConfiguration\n"
        "pool = AsyncReplayExecutor(sys.argv[1], iterations=1, results_db_dir=sys.argv[2], compile_workers=0)\n"
        "result = pool.evaluate(ExperimentConfiguration(grid=(2, 1, 1), block=(32, 1, 1)))\n"
        "pool.shutdown()\n"
        "print('OK' if result.ok else result.error)\n"
    )  # no __main__ guard: with multiprocessing's spawn, each worker would run it again
    done = subprocess.run(
        [sys.executable, str(script), str(misbehave_db), str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.strip() == "OK", done.stdout + done.stderr
    assert marker.read_text() == "x"


def test_a_recording_whose_ir_is_malformed_is_invalid_input_naming_the_file(misbehave_db, tmp_path):
    """Every worker refuses the same bad input: the pool says so as invalid input (exit 2), not as a crash."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(Path(misbehave_db).parent, folder)
    modules = sorted(folder.rglob("*.ll"))
    assert modules, "the recording keeps its IR as .ll"
    modules[0].write_text("this is not LLVM IR\n")
    db = folder / Path(misbehave_db).name
    pool = AsyncReplayExecutor(db, iterations=1, results_db_dir=tmp_path / "results", start=False)
    with pytest.raises(UsageError, match=f"no worker could start.*{modules[0].name}") as caught:
        pool.start()
    assert caught.value.exit_code == 2
