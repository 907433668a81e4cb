"""The original's current IR-override API on host-backend recordings: `AsyncReplayExecutor.set_ir`,
`TuningSession(options, executor=..., ir=...)`, `BaseExecutor.set_new_ir`, the worker's ``set_ir``
message, and `RecordedExecution.kernel_source()`."""

from __future__ import annotations

import hashlib
import json
import queue
from pathlib import Path

import numpy as np
import pytest

from mneme.async_executor import AsyncReplayExecutor, EvalFuture, TuneWorkerHandle
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import KernelSource, RecordedExecution
from mneme.replay_executor import BaseExecutor
from mneme.tuning.session import TuneOptions, TuningSession

from .original_files import write_original_recording

ROOT = Path(__file__).resolve().parents[2]
SCALE = "fmul contract float %19, %1"  # a * x[i] in the recorded saxpy (a = 2.0)
RECORDED = ExperimentConfiguration(grid=dim3(64), block=dim3(256))


@pytest.fixture(scope="module")
def irs(saxpy_db, tmp_path_factory) -> dict[str, Path]:
    """The recording's IR and two edits of it as .ll files: y = 3x + y (wrong) and x + x + y (the same)."""
    (module,) = RecordedExecution.from_json(str(saxpy_db)).llvm_files
    text = Path(module).read_text()
    assert SCALE in text
    out = tmp_path_factory.mktemp("irs")
    files = {
        "recorded": text,
        "tripled": text.replace(SCALE, "fmul contract float %19, 3.0"),
        "doubled": text.replace(SCALE, "fadd contract float %19, %19"),
    }
    for name, ir in files.items():
        (out / f"{name}.ll").write_text(ir)
    return {name: out / f"{name}.ll" for name in files}


def test_set_ir_runs_the_given_ir_for_what_is_submitted_after_it(saxpy_db, irs, tmp_path):
    executor = AsyncReplayExecutor(str(saxpy_db), iterations=1, results_db_dir=str(tmp_path))
    try:
        assert executor.evaluate(RECORDED).verified
        executor.set_ir(irs["tripled"].read_text())  # IR text
        wrong = executor.submit(RECORDED)
        executor.set_ir(irs["doubled"])  # a Path: read as a file, kept absolute in the futures
        same = executor.submit(RECORDED)
        executor.set_ir(str(irs["tripled"]))  # a string ending in .ll: a file too
        wrong_again = executor.submit(RECORDED)
        results = [f.result(timeout=300) for f in (wrong, same, wrong_again)]
        assert [f.ir_revision for f in (wrong, same, wrong_again)] == [1, 2, 3]
        assert same.ir_data == str(irs["doubled"].absolute())
        assert [r.verified for r in results] == [False, True, False]
        assert results[0].executed and "did not reproduce the recorded epilogue" in results[0].error
        # the same configuration under three IRs: three different builds, never the cached one of another
        hashes = [r.mneme.variant_hash for r in results]
        assert hashes[0] == hashes[2] != hashes[1]
        executor.set_ir(None)  # back to the recording's IR
        back = executor.evaluate(RECORDED)
        assert back.verified and back.mneme.variant_hash not in hashes
    finally:
        executor.shutdown()


def test_ir_that_cannot_be_used_gives_failed_results_with_the_reason_never_an_exception(saxpy_db, irs, tmp_path):
    executor = AsyncReplayExecutor(str(saxpy_db), iterations=1, results_db_dir=str(tmp_path))
    try:
        executor.set_ir("define void @saxpy(")
        malformed = executor.evaluate(RECORDED)
        executor.set_ir(str(tmp_path / "missing.ll"))
        missing = executor.evaluate(RECORDED)
        executor.set_ir(irs["recorded"].read_text().replace("@saxpy(", "@other("))
        no_kernel = executor.evaluate(RECORDED)
        executor.set_ir(irs["doubled"])
        fine = executor.evaluate(RECORDED)
    finally:
        executor.shutdown()
    assert malformed.failed and not malformed.verified and "malformed LLVM IR" in malformed.error
    assert missing.failed and "missing.ll: no such IR file" in missing.error
    assert no_kernel.failed and "'saxpy'" in no_kernel.error
    assert fine.verified  # the workers lived through all of it


def test_a_tuning_session_tunes_the_given_ir_on_a_borrowed_executor(saxpy_db, irs, tmp_path, capsys):
    def options(results: Path, **kwargs) -> TuneOptions:
        return TuneOptions(
            record_database=str(saxpy_db),
            record_id=None,
            space_preset="launch",
            trials=3,
            iterations=1,
            seed=3,
            results_dir=str(results),
            proteus_enabled=False,
            **kwargs,
        )

    executor = AsyncReplayExecutor(str(saxpy_db), iterations=1, results_db_dir=str(tmp_path))
    try:
        assert TuningSession(options(tmp_path / "good"), executor=executor, ir=irs["doubled"]).run() == 0
        config = json.loads((tmp_path / "good" / "config.json").read_text())
        assert config["ir_hash"] == hashlib.sha256(irs["doubled"].read_bytes()).hexdigest()
        trials = [json.loads(line) for line in (tmp_path / "good" / "trials.jsonl").read_text().splitlines()]
        assert len(trials) == 3 and all(t["status"] == "verified" for t in trials)
        # the session left the caller's executor running, on the IR it set
        assert executor.evaluate(RECORDED).mneme.variant_hash != _recorded_variant(saxpy_db, tmp_path)

        # the baseline itself runs the given IR: 3x + y does not verify, the original's exit 1
        assert TuningSession(options(tmp_path / "bad"), executor=executor, ir=str(irs["tripled"])).run() == 1
        baseline = json.loads((tmp_path / "bad" / "baseline.json").read_text())
        assert baseline["result"]["verified"] is False and baseline["result"]["executed"] is True
    finally:
        executor.shutdown()
    # resuming with other IR is refused, as the original (ir_hash is fixed for a results folder)
    resumed = TuningSession(options(tmp_path / "good", resume=True), ir=irs["recorded"])
    assert resumed.run() == 3
    assert "ir_hash" in capsys.readouterr().out
    # a file that cannot be read: the original's invalid configuration, exit 3
    assert TuningSession(options(tmp_path / "none"), ir=str(tmp_path / "missing.bc")).run() == 3
    # an executor for other settings than the options' is refused before anything runs (exit 3)
    other = AsyncReplayExecutor(str(saxpy_db), iterations=2, results_db_dir=str(tmp_path))
    try:
        assert TuningSession(options(tmp_path / "mismatch"), executor=other, ir=irs["doubled"]).run() == 3
        assert "iterations 2 (options: 1)" in capsys.readouterr().out
        assert not (tmp_path / "mismatch" / "baseline.json").exists()
    finally:
        other.shutdown()


def _recorded_variant(saxpy_db, tmp_path) -> str:
    fresh = AsyncReplayExecutor(str(saxpy_db), iterations=1, results_db_dir=str(tmp_path / "fresh"))
    try:
        return fresh.evaluate(RECORDED).mneme.variant_hash
    finally:
        fresh.shutdown()


def test_bitcode_files_are_read_as_the_original_reads_them_and_a_truncated_one_fails(saxpy_db, irs, tmp_path):
    from mneme.core import ir

    good = tmp_path / "doubled.bc"
    good.write_bytes(ir.load(irs["doubled"]).as_bitcode())
    cut = tmp_path / "cut.bc"
    cut.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    executor = AsyncReplayExecutor(str(saxpy_db), iterations=1, results_db_dir=str(tmp_path))
    try:
        executor.set_ir(str(good))
        same = executor.evaluate(RECORDED)
        executor.set_ir(cut)
        broken = executor.evaluate(RECORDED)
    finally:
        executor.shutdown()
    assert same.verified, same.error
    assert broken.failed and "cannot read LLVM bitcode" in broken.error


def test_the_worker_protocol_swaps_ir_on_a_set_ir_message_and_survives_bad_ir(saxpy_db, irs, tmp_path):
    (record_id,) = RecordedExecution.from_json(str(saxpy_db)).keys()
    jobs: queue.Queue = queue.Queue()
    handle = TuneWorkerHandle(0, jobs, str(saxpy_db), record_id, 0, 1, str(tmp_path))
    try:
        futures = [
            EvalFuture(1, RECORDED),
            EvalFuture(2, RECORDED, 1, irs["tripled"].read_text()),
            EvalFuture(3, RECORDED, 2, "this is not IR"),
            EvalFuture(4, RECORDED, 3, str(irs["doubled"])),
        ]
        results = []
        for future in futures:  # one at a time: each revision reaches the worker before its experiment
            jobs.put(future)
            results.append(future.result(timeout=300))
    finally:
        handle.join()
    assert [r.verified for r in results] == [True, False, False, True]
    assert results[1].executed and not results[2].executed
    assert "set_ir" in results[2].error and "malformed LLVM IR" in results[2].error


def test_set_new_ir_gives_a_module_that_execute_replays(saxpy_db, irs):
    with BaseExecutor(str(saxpy_db), iterations=1) as executor:
        doubled = executor.set_new_ir(str(irs["doubled"]))
        tripled = executor.set_new_ir(irs["tripled"].read_text())
        assert "fadd contract float" in str(doubled) and [
            f.name for f in doubled.functions if not f.is_declaration
        ] == ["saxpy"]
        same, wrong = ExperimentResult(), ExperimentResult()
        executor._execute(same, RECORDED, doubled)
        executor._execute(wrong, RECORDED, tripled)
        assert same.verified and wrong.executed and not wrong.verified
        with pytest.raises(RuntimeError, match="malformed LLVM IR"):
            executor.set_new_ir("define void @saxpy(")


def test_kernel_source_reads_the_kernels_lines_from_its_debug_info(tmp_path):
    from irbuild import build_cuda_ir

    from mneme import capture

    source = tmp_path / "saxpy.cu"
    # unique text: irbuild caches builds by content, and the debug info names this file's path
    source.write_text(f"// saxpy compiled with -g in {tmp_path}\n" + (ROOT / "examples/saxpy/saxpy.cu").read_text())
    module = build_cuda_ir(source, out_dir=tmp_path / "ir", opt="-O1", flags=("-g",))
    x = np.arange(256, dtype=np.float32)
    y = np.ones(256, dtype=np.float32)
    db = capture.capture(module, "saxpy", 1, 256, [256, np.float32(2.0), x, y], tmp_path / "rec", backend="host")
    recorded = RecordedExecution.from_json(str(db))
    found = recorded.kernel_source()
    assert isinstance(found, KernelSource)
    # the definition's first line to its closing brace, the last line that generated code
    assert (found.line, found.end_line) == (4, 7) and found.file == str(source)
    assert found.text == "".join(source.read_text().splitlines(keepends=True)[3:7])
    assert found.text.startswith('extern "C" __global__ void saxpy(') and found.text.endswith("}\n")
    assert found.location == f"{source}:4-7"
    (instance,) = recorded.values()
    assert instance.execution is recorded  # a search space handed an instance reaches it too

    source.write_text("// edited since it was compiled\n")  # no checksum in this debug info: read as it is now
    assert RecordedExecution.from_json(str(db)).kernel_source().text == ""


def test_kernel_source_of_an_original_database_prefers_its_unchanged_copy(saxpy_db, tmp_path):
    db = write_original_recording(saxpy_db, tmp_path / "original")
    kernel = "__global__ void saxpy(int n, float a, const float* x, float* y) {\n  body();\n}\n"
    copy = tmp_path / "original" / "saxpy.copy.cu"
    copy.write_text("// header\n" + kernel)
    edited = tmp_path / "saxpy.cu"
    edited.write_text("// edited since\n// the recording\n" + kernel)
    data = json.loads(db.read_text())
    md5 = hashlib.md5(copy.read_bytes()).hexdigest()
    data.update(SourceFile=str(edited), SourceCopy=copy.name, SourceMD5=md5, SourceLine=2, SourceEndLine=4)
    db.write_text(json.dumps(data))

    found = RecordedExecution.from_json(str(db)).kernel_source()
    assert (found.file, found.text) == (str(copy), kernel)
    copy.write_text("// changed\n" + kernel)  # neither candidate has the recorded MD5 any more
    assert RecordedExecution.from_json(str(db)).kernel_source() is None
    data.pop("SourceMD5")
    copy.unlink()
    db.write_text(json.dumps(data))
    found = RecordedExecution.from_json(str(db)).kernel_source()  # no copy, no checksum: the file as it is
    assert (found.file, found.text) == (str(edited), "// the recording\n" + "".join(kernel.splitlines(True)[:2]))
    assert RecordedExecution.from_json(str(saxpy_db)).kernel_source() is None  # IR without debug info
