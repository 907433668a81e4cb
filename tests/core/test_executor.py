"""BaseExecutor on the host backend with real captured kernels: restore, verify, reset, time, fail safely."""

from __future__ import annotations

import datetime
import json
import shutil
import struct

import numpy as np
import pytest
from irbuild import build_cuda_ir

from mneme import capture
from mneme.core.errors import MnemeError, UsageError
from mneme.core.executor import BaseExecutor, written_regions
from mneme.core.types import ExperimentConfiguration
from paths import ROOT

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
N = 5000


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1, N).astype(np.float32)
    y = rng.uniform(0, 1, N).astype(np.float32)
    return capture.capture(
        SAXPY_IR,
        "saxpy",
        4,
        128,
        [N, np.float32(3.0), x, y],
        tmp_path_factory.mktemp("saxpy"),
        backend="host",
        names=["n", "a", "x", "y"],
    )


@pytest.fixture(scope="module")
def stencil_db(tmp_path_factory):
    grid_in = np.random.default_rng(3).uniform(0, 1, (24, 40)).astype(np.float32)
    return capture.capture(
        build_cuda_ir("stencil2d"),
        "stencil2d",
        (5, 3),
        (8, 8),
        [grid_in, np.zeros_like(grid_in), 40, 24],
        tmp_path_factory.mktemp("stencil"),
        backend="host",
        names=["in", "out", "nx", "ny"],
    )


def _pointer(ex, index):
    return struct.unpack_from("<Q", ex.args, ex.rec.args[index].offset)[0]


def test_the_recorded_launch_replays_verified_with_timed_and_warmup_runs_apart(saxpy_db):
    with BaseExecutor(saxpy_db, iterations=4) as ex:
        config = ex.default_config()
        assert config == ExperimentConfiguration(grid=4, block=128)
        result = ex.execute(config)
    assert result.ok, result.error
    assert len(result.exec_time) == 4 and len(result.warmup_time) == 1
    assert all(t > 0 for t in result.exec_time)
    assert result.opt_time > 0 and result.codegen_time > 0 and result.obj_size > 0
    assert result.backend == "host" and result.device.startswith("host:0") and result.gpu_id == 0
    start = datetime.datetime.fromisoformat(result.start_time)
    end = datetime.datetime.fromisoformat(result.end_time)
    assert start.tzinfo == datetime.timezone.utc and start <= end


def test_only_the_written_buffer_is_reset_and_repeated_experiments_still_verify(saxpy_db):
    # saxpy is not idempotent (y += a*x): without a reset before each run the second run would differ.
    with BaseExecutor(saxpy_db, iterations=3) as ex:
        y_addr, x_addr = _pointer(ex, 3), _pointer(ex, 2)
        assert ex.written == [y_addr]
        first = ex.execute(ex.default_config())
        second = ex.execute(ex.default_config().replace(block=(64, 1, 1), grid=(2, 1, 1)))
        after = np.frombuffer(ex.device.read(y_addr, N * 4), dtype=np.float32)
        expected = np.frombuffer(ex.epilogue.read_region(y_addr), dtype=np.float32)
        untouched = ex.device.read(x_addr, N * 4)
        assert untouched == ex.prologue.read_region(x_addr)
    assert first.ok and second.ok, (first.error, second.error)
    np.testing.assert_allclose(after, expected, rtol=1e-6)


@pytest.mark.parametrize("cache, runs_on_last_reset", [("flushed", 1), ("warm", 1), ("primed", 2)])
def test_a_primed_timed_run_follows_one_untimed_run_from_the_reset_state(saxpy_db, cache, runs_on_last_reset):
    # saxpy adds a*x to y on every run: the written region after the last timed run tells how many
    # runs followed its reset (the prologue's y): one timed run, or a priming run and the timed one.
    with BaseExecutor(saxpy_db, iterations=2, cache=cache) as ex:
        y_addr, x_addr = _pointer(ex, 3), _pointer(ex, 2)
        result = ex.execute(ex.default_config())
        after = np.frombuffer(ex.device.read(y_addr, N * 4), dtype=np.float32)
        y0 = np.frombuffer(ex.prologue.read_region(y_addr), dtype=np.float32)
        x = np.frombuffer(ex.prologue.read_region(x_addr), dtype=np.float32)
    assert result.ok and result.verified, result.error  # the verified run still starts from the prologue
    assert len(result.exec_time) == 2
    np.testing.assert_allclose(after, y0 + runs_on_last_reset * np.float32(3.0) * x, rtol=1e-6)


def test_an_unknown_cache_state_is_a_usage_error_naming_the_choices(saxpy_db):
    with pytest.raises(UsageError, match="flushed, warm, primed"):
        BaseExecutor(saxpy_db, cache="hot")


def test_the_build_of_a_variant_is_cached_by_its_hash(saxpy_db):
    with BaseExecutor(saxpy_db, iterations=1) as ex:
        first = ex.execute(ex.default_config())
        again = ex.execute(ex.default_config().replace(block=(256, 1, 1)))  # same code: dims are not specialized
        specialized = ex.execute(ex.default_config().replace(specialize=True))
    assert first.opt_time > 0 and again.opt_time == 0 and again.variant_hash == first.variant_hash
    assert specialized.opt_time > 0 and specialized.variant_hash != first.variant_hash
    assert specialized.ok, specialized.error


def test_a_launch_that_does_not_cover_the_domain_fails_verification_naming_the_buffer(stencil_db):
    with BaseExecutor(stencil_db, iterations=1) as ex:
        full = ex.execute(ex.default_config())
        short = ex.execute(ex.default_config().replace(grid=(2, 3, 1)))
        again = ex.execute(ex.default_config())
    assert full.ok, full.error
    assert short.executed and not short.verified and short.failed and short.error_kind == "verify"
    assert len(short.mismatches) == 1 and "[arg 1 (out)]" in short.mismatches[0]
    assert "bytes differ" in short.mismatches[0]
    assert len(short.exec_time) == 1  # still timed: the user sees how fast the wrong variant was
    assert again.ok, "a failed verification must not leave stale state behind"


def test_a_compile_error_is_a_failed_result_not_an_exception(saxpy_db):
    with BaseExecutor(saxpy_db, iterations=1) as ex:
        bad = ex.execute(ex.default_config().replace(passes="no-such-pass<3>"))
        good = ex.execute(ex.default_config())
    assert bad.failed and bad.error_kind == "compile" and "no-such-pass" in bad.error
    assert not bad.executed and not bad.exec_time
    assert good.ok


def test_an_invalid_configuration_is_reported_without_running(saxpy_db):
    with BaseExecutor(saxpy_db, iterations=1) as ex:
        result = ex.execute(ex.default_config().replace(set_launch_bounds=True, max_threads=64))
    assert result.failed and result.error_kind == "invalid" and not result.executed
    assert "launch bounds" in result.error


def test_an_out_of_bounds_write_is_a_failed_experiment_and_the_next_one_runs(tmp_path):
    source = tmp_path / "oob.cu"
    source.write_text(
        'extern "C" __global__ void oob(float* out, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (blockDim.x > 32 && i == 0) out[1 << 28] = 1.0f;\n"
        "  if (i < n) out[i] = 1.0f + i;\n}\n"
    )
    db = capture.capture(
        build_cuda_ir(source, out_dir=tmp_path),
        "oob",
        2,
        32,
        [np.zeros(64, np.float32), 64],
        tmp_path / "rec",
        backend="host",
    )
    with BaseExecutor(db, iterations=1) as ex:
        bad = ex.execute(ex.default_config().replace(block=(64, 1, 1), grid=(1, 1, 1)))
        good = ex.execute(ex.default_config())
    assert bad.failed and bad.error_kind == "fault" and "invalid memory access" in bad.error
    assert good.ok, good.error


def test_a_recording_made_on_an_unusable_gpu_backend_replays_its_ir_on_host(saxpy_db, tmp_path, caplog):
    copy = tmp_path / "rec"
    shutil.copytree(saxpy_db.parent, copy)
    db = copy / saxpy_db.name
    data = json.loads(db.read_text())
    data["Backend"], data["Arch"] = "no-such-gpu", "sm_90"
    db.write_text(json.dumps(data))
    with BaseExecutor(db, iterations=1) as ex:
        assert ex.backend.name == "host"
        result = ex.execute(ex.default_config())
    assert result.ok, result.error
    assert "replaying the kernel's IR on the host backend" in caplog.text


def test_binary_modes_are_refused_on_host_before_anything_runs(saxpy_db):
    with pytest.raises(UsageError, match="--mode ir"):
        BaseExecutor(saxpy_db, mode="cubin").open()


def test_a_folder_with_one_database_can_be_named_instead_of_the_file(saxpy_db):
    with BaseExecutor(saxpy_db.parent, iterations=1) as ex:
        assert ex.rec.path == saxpy_db


def test_a_closed_executor_refuses_experiments(saxpy_db):
    ex = BaseExecutor(saxpy_db, iterations=1).open()
    ex.close()
    with pytest.raises(MnemeError, match="not open"):
        ex.execute(ExperimentConfiguration(grid=1, block=1))


def test_written_regions_are_those_the_epilogue_changes(stencil_db):
    from mneme.core.snapshot import Snapshot

    with BaseExecutor(stencil_db) as ex:
        out_addr = _pointer(ex, 1)
        prologue = Snapshot.open(ex.instance.prologue_path)
        epilogue = Snapshot.open(ex.instance.epilogue_path, base=prologue)
    assert written_regions(prologue, epilogue) == [out_addr]


def test_a_variant_that_scribbles_over_its_input_does_not_poison_the_next_experiment(tmp_path):
    # With wide blocks the kernel overwrites its input buffer, which the recorded launch never writes.
    source = tmp_path / "scribble.cu"
    source.write_text(
        'extern "C" __global__ void scribble(float* in, float* out, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i >= n) return;\n"
        "  out[i] = 2.0f * in[i];\n"
        "  if (blockDim.x > 32) in[i] = -1.0f;\n}\n"
    )
    data = np.arange(64, dtype=np.float32)
    db = capture.capture(
        build_cuda_ir(source, out_dir=tmp_path),
        "scribble",
        2,
        32,
        [data, np.zeros(64, np.float32), 64],
        tmp_path / "rec",
        backend="host",
    )
    with BaseExecutor(db, iterations=2) as ex:
        assert ex.written == [_pointer(ex, 1)]
        wide = ex.execute(ex.default_config().replace(block=(64, 1, 1), grid=(1, 1, 1)))
        recorded = ex.execute(ex.default_config())
    assert wide.failed and wide.error_kind == "verify" and "[arg 0 (arg0)]" in " ".join(wide.mismatches)
    assert recorded.ok, recorded.error


def test_a_launch_the_backend_cannot_repeat_is_refused_before_anything_runs(saxpy_db, tmp_path):
    """A recording launched with thread block clusters: the host backend cannot launch so, and says which."""
    copy = tmp_path / "rec"
    shutil.copytree(saxpy_db.parent, copy)
    db = copy / saxpy_db.name
    data = json.loads(db.read_text())
    (entry,) = data["instances"].values()
    entry["ClusterDims"] = {"x": 2, "y": 1, "z": 1}
    db.write_text(json.dumps(data))
    ex = BaseExecutor(db, iterations=1)
    with pytest.raises(
        UsageError,
        match=r"launched with clusters of \(2, 1, 1\); the host backend cannot launch "
        r"with cluster.*replay it on a backend that can",
    ):
        ex.open()
    assert ex.device is None  # closed again: nothing was left open
