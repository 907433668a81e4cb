"""Capture corpus kernels on the GPU and replay them as verified experiments (issue 7, points 2 and 5)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gpu_corpus import cuda_ir

pytestmark = pytest.mark.gpu

N = 1 << 16


def _inputs(source: str, rng: np.random.Generator):
    """(kernel, grid, block, args, tolerances) of one realistic launch of a corpus kernel."""
    from mneme.core.snapshot import RegionPolicy

    f32 = lambda n: rng.standard_normal(n).astype(np.float32)
    if source == "vector_add":
        return "vector_add", N // 256, 256, [f32(N), f32(N), np.zeros(N, np.float32), np.int32(N)], None
    if source == "saxpy":
        return "saxpy", 64, 256, [np.int32(N), np.float32(2.5), f32(N), f32(N)], None
    if source == "stencil2d":
        nx, ny = 256, 192
        return (
            "stencil2d",
            (nx // 16, ny // 16),
            (16, 16),
            [f32(nx * ny), np.zeros(nx * ny, np.float32), np.int32(nx), np.int32(ny)],
            None,
        )
    if source == "reduce_sum":
        return "reduce_sum", N // 256, 256, [f32(N), np.zeros(N // 256, np.float32), np.int32(N)], None
    if source == "scale_template":
        return "_Z5scaleIfEvPT_S0_i", N // 256, 256, [f32(N), np.float32(3.0), np.int32(N)], None
    if source == "math_funcs":
        return "math_funcs", N // 256, 256, [f32(N), np.zeros(N, np.float32), np.int32(N)], None
    if source == "device_global":
        return "add_bias", N // 256, 256, [f32(N), np.int32(N)], None
    if source == "histogram":
        return (
            "histogram",
            N // 256,
            256,
            [rng.integers(-5, 70, N).astype(np.int32), np.zeros(64, np.uint32), np.int32(N), np.int32(64)],
            None,
        )
    if source == "warp_reduce":  # float atomics: the order of additions varies between runs
        return (
            "warp_reduce",
            N // 256,
            256,
            [f32(N), np.zeros(1, np.float32), np.int32(N)],
            {1: RegionPolicy(dtype="f32", threshold=1e-4, relative=True)},
        )
    raise KeyError(source)


SOURCES = [
    "vector_add",
    "saxpy",
    "stencil2d",
    "reduce_sum",
    "scale_template",
    "math_funcs",
    "device_global",
    "histogram",
    "warp_reduce",
]


def _capture(source: str, out: Path, **overrides) -> Path:
    from mneme import capture

    kernel, grid, block, args, tolerances = _inputs(source, np.random.default_rng(sum(map(ord, source))))
    params = dict(
        ir=cuda_ir(source),
        kernel=kernel,
        grid=grid,
        block=block,
        args=args,
        out=out,
        backend="cuda",
        tolerances=tolerances,
    )
    params.update(overrides)
    return capture.capture(**params)


@pytest.mark.parametrize("source", SOURCES)
def test_captured_corpus_kernel_replays_verified_at_its_recorded_configuration(tmp_path, source):
    from mneme.core.executor import BaseExecutor

    db = _capture(source, tmp_path)
    with BaseExecutor(db, backend="cuda", iterations=3) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok, result.error
    assert len(result.exec_time) == 3 and all(t > 0 for t in result.exec_time)
    assert result.reg_usage > 0 and result.backend == "cuda"


@pytest.mark.parametrize("block", [64, 128, 512, 1024])
def test_grid_stride_kernel_verifies_at_other_block_sizes(tmp_path, block):
    from mneme.core.executor import BaseExecutor

    db = _capture("saxpy", tmp_path)
    with BaseExecutor(db, backend="cuda", iterations=2) as ex:
        config = ex.default_config().replace(block=block, grid=max(1, 16384 // block))
        result = ex.execute(config)
    assert result.ok, result.error


def test_specialized_variant_verifies_and_reports_its_compile_stages(tmp_path):
    from mneme.core.executor import BaseExecutor

    db = _capture("saxpy", tmp_path)
    with BaseExecutor(db, backend="cuda", iterations=2) as ex:
        config = ex.default_config().replace(specialize=True, specialize_dims=True)
        result = ex.execute(config)
    assert result.ok, result.error
    assert result.codegen_time > 0 and result.obj_size > 0


REPLAY_SCRIPT = textwrap.dedent(
    """
    import sys
    from mneme.core.executor import BaseExecutor
    db, block = sys.argv[1], int(sys.argv[2])
    with BaseExecutor(db, backend="cuda", iterations=2) as ex:
        result = ex.execute(ex.default_config().replace(block=block))
    print("RESULT", result.ok, result.failed, result.error_kind)
    """
)


def test_a_faulting_configuration_fails_and_the_next_experiment_in_a_fresh_process_succeeds(tmp_path):
    # reduce_sum's shared array holds 256 floats: 1024-thread blocks write past it and fault.
    db = _capture("reduce_sum", tmp_path / "db")
    script = tmp_path / "replay.py"
    script.write_text(REPLAY_SCRIPT)
    faulted = subprocess.run(
        [sys.executable, str(script), str(db), "1024"], capture_output=True, text=True, timeout=300
    )
    assert "RESULT False True" in faulted.stdout, faulted.stdout + faulted.stderr
    kind = faulted.stdout.split()[-1]
    assert kind in ("fault", "verify"), faulted.stdout  # out-of-range shared stores trap on NVIDIA GPUs
    clean = subprocess.run([sys.executable, str(script), str(db), "256"], capture_output=True, text=True, timeout=300)
    assert "RESULT True False" in clean.stdout, clean.stdout + clean.stderr


def test_worker_pool_replays_on_cuda_and_a_fault_does_not_poison_the_next_experiment(tmp_path):
    """A fault leaves the worker's CUDA context unusable: the pool must run the next experiment in a fresh process."""
    from mneme.core.workers import AsyncReplayExecutor

    db = _capture("reduce_sum", tmp_path / "db")
    with AsyncReplayExecutor(
        db, iterations=2, results_db_dir=tmp_path / "results", backend="cuda", compile_workers=1
    ) as pool:
        config = pool.default_config
        assert pool.evaluate(config).ok
        faulted = pool.evaluate(config.replace(block=1024))
        assert faulted.failed and faulted.error_kind in ("fault", "verify", "crash")
        after = pool.evaluate(config)
        assert after.ok, after.error


def _add_application_images(db: Path, source: str, kernel: str, arch: str) -> None:
    """Store a PTX and a cubin of the kernel in the recording, as the recorder keeps the application's images."""
    from mneme_cuda import codegen as cuda_codegen
    from mneme_cuda.backend import CudaBackend

    from mneme.core import ir
    from mneme.core.records import ImageInfo, RecordedExecution
    from mneme.core.types import ExperimentConfiguration

    rec = RecordedExecution.from_json(db)
    config = ExperimentConfiguration(grid=1, block=256)
    for emit in ("ptx", "cubin"):
        module = ir.link([cuda_ir(source)], kernel)
        CudaBackend().optimize(module, config, arch)
        binary = cuda_codegen.codegen(module, kernel, config, arch, emit=emit)
        (rec.folder / f"{kernel}.{emit}").write_bytes(binary.data)
        rec.images.append(ImageInfo(f"{kernel}.{emit}", emit))
    rec.save()


@pytest.mark.parametrize("mode", ["ir", "ptx", "cubin"])
def test_recording_replays_verified_from_ir_ptx_and_cubin(tmp_path, cuda_backend, mode):
    from mneme.core.executor import BaseExecutor

    db = _capture("stencil2d", tmp_path)
    _add_application_images(db, "stencil2d", "stencil2d", cuda_backend.arch(0))
    with BaseExecutor(db, backend="cuda", iterations=3, mode=mode) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok, result.error
    assert len(result.exec_time) == 3


def test_open_restores_every_prologue_region_and_reset_returns_written_regions_to_it(tmp_path):
    from mneme.core.executor import BaseExecutor

    db = _capture("stencil2d", tmp_path)
    with BaseExecutor(db, backend="cuda", iterations=2) as ex:
        regions = ex.prologue.regions
        assert regions
        for region in regions:
            assert ex.device.read(region.addr, region.size) == ex.prologue.read_region(region.addr)
        first, second = ex.execute(ex.default_config()), ex.execute(ex.default_config())
        assert first.ok and second.ok, first.error or second.error
        assert ex.written  # stencil2d writes its output
        ex.reset()
        for region in regions:
            assert ex.device.read(region.addr, region.size) == ex.prologue.read_region(region.addr)
        ex.restore()
        assert ex.execute(ex.default_config()).ok


@pytest.mark.parametrize("cache, runs_on_last_reset", [("flushed", 1), ("warm", 1), ("primed", 2)])
def test_each_cache_state_times_verified_runs_and_primed_ones_follow_one_untimed_run(
    tmp_path, cache, runs_on_last_reset
):
    # saxpy adds a*x to y on every run: y after the last timed run tells how many runs followed its reset.
    import struct

    from mneme.core.executor import BaseExecutor

    db = _capture("saxpy", tmp_path)
    with BaseExecutor(db, backend="cuda", iterations=3, cache=cache) as ex:
        x_addr, y_addr = (struct.unpack_from("<Q", ex.args, ex.rec.args[i].offset)[0] for i in (2, 3))
        result = ex.execute(ex.default_config())
        after = np.frombuffer(ex.device.read(y_addr, N * 4), dtype=np.float32)
        y0 = np.frombuffer(ex.prologue.read_region(y_addr), dtype=np.float32)
        x = np.frombuffer(ex.prologue.read_region(x_addr), dtype=np.float32)
    assert result.ok and result.verified, result.error
    assert len(result.exec_time) == 3 and all(t > 0 for t in result.exec_time)
    expected = y0.copy()
    for _ in range(runs_on_last_reset):  # the kernel's own float32 order: y = a * x + y, fused or not
        expected = np.float32(2.5) * x + expected
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-5)
