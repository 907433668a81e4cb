"""`mneme.recorded_execution` and `mneme.replay_executor` as the original Mneme API documents them."""

from __future__ import annotations

import ctypes
import json
import multiprocessing
from datetime import datetime

import pytest

from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import MemStateRef, RecordedExecution, SnapshotType
from mneme.replay_executor import BaseExecutor, TuneWorker


def test_snapshot_type_has_the_original_values():
    assert SnapshotType(1) is SnapshotType.PROLOGUE and SnapshotType(2) is SnapshotType.EPILOGUE


def test_a_missing_file_raises_runtime_error(tmp_path):
    with pytest.raises(RuntimeError):
        RecordedExecution.from_json(str(tmp_path / "nope.json"))
    with pytest.raises(RuntimeError):
        MemStateRef(str(tmp_path / "nope.mneme"), "k", SnapshotType.PROLOGUE)


def test_a_broken_database_raises_a_runtime_error_subclass(tmp_path):
    db = tmp_path / "bad.json"
    db.write_text(json.dumps({"SchemaVersion": 3, "KernelName": "k"}))
    with pytest.raises(RuntimeError, match="bad.json"):
        RecordedExecution.from_json(str(db))


def test_the_database_is_a_mapping_of_instances_with_the_original_fields(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    assert len(rec) == 1 and rec.kernel_name == "saxpy" and rec.arg_names == ["n", "a", "x", "y"]
    assert rec.va_addr.startswith("0x") and rec.va_size > 0 and rec.llvm_files[0].endswith(".ll")
    (key,) = rec.keys()
    inst = rec[key]
    assert key in rec and list(rec) == [key] and dict(rec.items())[key] is inst
    assert inst.dynamic_hash == key and inst.static_hash == rec.static_hash
    assert inst.grid_dim == dim3(64) and inst.block_dim == dim3(256) and inst.shared_mem == 0 and inst.occ == 1
    assert inst.available_specializations == [0, 1]
    assert inst.prologue is inst.prologue  # one handle, as the original's
    assert hash(inst) == hash(key + rec.static_hash)
    assert set(inst.to_dict()) == {"Args", "BlockDims", "GridDims", "Occurrences", "SharedMem", "Prologue", "Epilogue"}
    assert set(rec.to_dict()) == {
        "ArgNames",
        "BinaryBlobs",
        "DemangledName",
        "KernelName",
        "Modules",
        "Specializations",
        "StaticHash",
        "VASize",
        "VAddr",
        "instances",
    }
    del rec[key]
    assert len(rec) == 0


def test_mem_state_gives_argument_pointers_after_loading(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (inst,) = rec.values()
    state = inst.prologue
    with pytest.raises(RuntimeError):
        state.num_args
    with pytest.raises(RuntimeError):
        state.reset()
    with state:
        assert state.num_args == 4
        n = ctypes.cast(state.args[0], ctypes.POINTER(ctypes.c_int32)).contents.value
        a = ctypes.cast(state.args[1], ctypes.POINTER(ctypes.c_float)).contents.value
        assert (n, a) == (1048576, 2.0)
        with inst.epilogue as epi:
            assert state != epi  # saxpy writes y
        with MemStateRef(state.fn, rec.kernel_name, SnapshotType.PROLOGUE) as again:
            assert again.arg_values == state.arg_values


def test_link_ir_works_before_open_and_the_linked_module_is_cached(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    assert rec.link_llvm_modules() is rec.link_llvm_modules()
    (key,) = rec.keys()
    ex = BaseExecutor(str(saxpy_db), key, iterations=2)
    assert ex.prologue is None and ex.epilogue is None  # opened by open()
    assert ex.link_ir().get_function("saxpy") is not None
    assert ex.records.kernel_name == "saxpy" and ex.kernel_descr.dynamic_hash == key
    assert ex.num_devices >= 1 and ex.device_arch


def test_base_executor_runs_a_configuration_with_iterations_plus_two_times(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (key,) = rec.keys()
    with BaseExecutor(str(saxpy_db), key, iterations=3) as ex:
        result = ex.execute(ExperimentConfiguration(grid=dim3(128), block=dim3(128)))
        ex.prologue.reset()  # bound to the executor's device
    assert result.verified and result.executed and not result.failed
    assert len(result.exec_time) == 3 + 2 and all(isinstance(t, int) and t > 0 for t in result.exec_time)


def test_execute_on_a_given_module_fills_the_result_in_place_and_returns_the_cleaned_ir(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (key,) = rec.keys()
    ex = BaseExecutor(str(saxpy_db), key, iterations=2)
    root = ex.link_ir()
    before = str(root)
    with pytest.raises(RuntimeError, match="not open"):
        ex._execute(ExperimentResult(), ExperimentConfiguration(grid=dim3(64), block=dim3(256)), root)
    with ex:
        result = ExperimentResult()
        generated = ex._execute(result, ExperimentConfiguration(grid=dim3(64), block=dim3(256)), root.clone())
        specialized = ExperimentResult()
        ex._execute(specialized, ExperimentConfiguration(grid=dim3(64), block=dim3(256), specialize=True), root)
    assert str(root) == before  # the input module is not modified
    assert result.verified and result.executed and len(result.exec_time) == 2 + 2 and result.obj_size > 0
    assert specialized.verified and result.mneme.variant_hash != specialized.mneme.variant_hash
    assert generated.get_function("saxpy") is not None and generated is not root


def test_tune_worker_process_payload_stamps_utc_times_and_the_gpu_id(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (key,) = rec.keys()
    worker = TuneWorker(record_db=str(saxpy_db), record_id=key, device_id=0, iterations=1)
    root = worker.link_ir()
    with worker:
        result, ir_out = worker.process_payload(root.clone(), ExperimentConfiguration(grid=dim3(64), block=dim3(256)))
    assert result.verified and result.gpu_id == 0 and len(result.exec_time) == 1 + 2
    start, end = (datetime.fromisoformat(t) for t in (result.start_time, result.end_time))
    assert start.tzinfo is not None and start.utcoffset().total_seconds() == 0 and start <= end
    assert ir_out.get_function("saxpy") is not None


def test_tune_worker_run_serves_the_documented_message_protocol(saxpy_db, tmp_path):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (key,) = rec.keys()
    ctx = multiprocessing.get_context("spawn")
    requests, responses, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    config = ExperimentConfiguration(grid=dim3(64), block=dim3(256))
    worker = ctx.Process(
        target=TuneWorker.run, args=(requests, responses, str(saxpy_db), key, 0, 2, str(tmp_path), ready)
    )
    worker.start()
    try:
        assert ready.wait(300), (tmp_path / "Worker-0.log").read_text(errors="replace")
        requests.put({"payload": "process", "exp_id": 7, "data": config.to_dict()})
        answer = responses.get(timeout=300)
        requests.put({"payload": "terminate"})
        worker.join(120)
    finally:
        if worker.is_alive():
            worker.kill()
    assert worker.exitcode == 0
    assert set(answer) == {"exp_id", "payload", "data", "llvm_ir"}
    assert answer["exp_id"] == 7 and answer["payload"] == "result" and answer["llvm_ir"] == ""
    result = ExperimentResult.from_dict(answer["data"])
    assert result.verified and len(result.exec_time) == 2 + 2 and result.gpu_id == 0
    assert (tmp_path / "Worker-0.log").exists()  # the worker's output went to its log
