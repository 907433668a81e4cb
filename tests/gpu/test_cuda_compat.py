"""The original Mneme API on CUDA: `mneme.profile`'s device timings, `TuneWorker` and `_execute` (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_corpus import cuda_ir

pytestmark = pytest.mark.gpu

N = 1 << 16


@pytest.fixture
def saxpy_db(tmp_path, cuda_backend):
    from mneme import capture

    rng = np.random.default_rng(7)
    args = [
        np.int32(N),
        np.float32(2.5),
        rng.standard_normal(N).astype(np.float32),
        rng.standard_normal(N).astype(np.float32),
    ]
    return capture.capture(
        ir=cuda_ir("saxpy"), kernel="saxpy", grid=64, block=256, args=args, out=tmp_path, backend="cuda"
    )


def test_profile_reports_cupti_or_event_times_of_each_launch_between_start_and_stop(saxpy_db):
    from mneme.device import DeviceModule, get_device_arch
    from mneme.profile import gpu_profile_start, gpu_profile_stop, init_profiler
    from mneme.proteus import jit
    from mneme.recorded_execution import RecordedExecution

    rec = RecordedExecution.from_json(str(saxpy_db))
    (inst,) = rec.values()
    arch = get_device_arch()
    assert arch.startswith("sm_")
    mod = rec.link_llvm_modules().clone()
    jit.optimize(mod, arch, "3", 3)
    module = DeviceModule.from_MemBuffer(jit.codegen_object(mod, arch))
    function = module.get_function(rec.kernel_name)
    init_profiler()
    try:
        with inst.prologue as state:
            function.profile(inst.grid_dim, inst.block_dim, state, None, 0, 1)
            session = gpu_profile_start(rec.kernel_name)
            for _ in range(4):
                function.launch(inst.grid_dim, inst.block_dim, state.packed_args)
            records = gpu_profile_stop(session)
        assert len(records) == 4 and all(isinstance(r, int) and 0 < r < 10**9 for r in records)
        assert function.reg_usage > 0
    finally:
        module.unload()


def test_tune_worker_process_payload_runs_verified_on_the_gpu(saxpy_db):
    from mneme.mneme_types import ExperimentConfiguration, dim3
    from mneme.recorded_execution import RecordedExecution
    from mneme.replay_executor import TuneWorker

    (key,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    worker = TuneWorker(record_db=str(saxpy_db), record_id=key, device_id=0, iterations=3)
    root = worker.link_ir()
    with worker:
        result, _ir = worker.process_payload(root.clone(), ExperimentConfiguration(grid=dim3(64), block=dim3(256)))
    assert result.verified and result.gpu_id == 0 and len(result.exec_time) == 3 + 2 and result.reg_usage > 0


def test_llvm_syntax_and_generated_pipelines_build_for_nvptx_and_evaluate_never_raises(saxpy_db):
    # issue 35: the original's PipelineManager pipelines (adaptors, parameters) on the CUDA backend
    from mneme.mneme_types import ExperimentConfiguration, dim3
    from mneme.pipeline import PipelineManager
    from mneme.replay_executor import BaseExecutor

    manager = PipelineManager()
    generated = [manager.to_string(p) for p in manager.generate(3, 40, 10, True, seed=3)]
    with BaseExecutor(str(saxpy_db), iterations=2, warmup=1) as executor:  # the record id inferred
        text = "function(loop-mssa(licm)),simplifycfg<bonus-inst-threshold=4>,gvn<no-pre>,cgscc(inline)"
        result = executor.execute(ExperimentConfiguration(grid=dim3(64), block=dim3(256), passes=text))
        assert result.verified and len(result.exec_time) == 2 + 1
        for passes in generated:
            outcome = executor.execute(ExperimentConfiguration(grid=dim3(64), block=dim3(256), passes=passes))
            assert outcome.verified or outcome.error  # a random pipeline may break the kernel, never the caller


def test_set_ir_replays_edited_nvptx_ir_on_the_gpu_and_keeps_each_irs_variants_apart(saxpy_db, tmp_path):
    import re
    from pathlib import Path

    from mneme.async_executor import AsyncReplayExecutor
    from mneme.mneme_types import ExperimentConfiguration, dim3
    from mneme.recorded_execution import RecordedExecution

    (module,) = RecordedExecution.from_json(str(saxpy_db)).llvm_files
    text = Path(module).read_text()
    scale = re.compile(r"fmul contract float (%\d+), (%\d+)")  # a * x[i]
    assert len(scale.findall(text)) == 1
    commuted = scale.sub(r"fmul contract float \2, \1", text)  # x[i] * a: the same product
    tripled = scale.sub(r"fmul contract float \2, 3.0", text)  # 3 * x[i]: not what was recorded (a = 2.5)
    config = ExperimentConfiguration(grid=dim3(64), block=dim3(256))
    executor = AsyncReplayExecutor(str(saxpy_db), iterations=2, results_db_dir=str(tmp_path))
    try:
        recorded = executor.evaluate(config)
        executor.set_ir(commuted)
        same = executor.evaluate(config)
        executor.set_ir(tripled)
        wrong = executor.evaluate(config)
        executor.set_ir("define void @saxpy(")
        malformed = executor.evaluate(config)
        executor.set_ir(None)
        back = executor.evaluate(config)
    finally:
        executor.shutdown()
    assert recorded.verified and same.verified and back.verified, (recorded.error, same.error, back.error)
    assert wrong.executed and not wrong.verified
    assert malformed.failed and "malformed LLVM IR" in malformed.error
    hashes = [r.mneme.variant_hash for r in (recorded, same, wrong)]
    assert len(set(hashes)) == 3 and back.mneme.variant_hash == hashes[0]
