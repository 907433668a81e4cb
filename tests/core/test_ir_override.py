"""Replacement IR on the worker pool (host backend, a real saxpy capture): the workers build the given IR
instead of the recording's, verify it against the recorded epilogue, and never mix the two in their caches."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from mneme.core.errors import LimitError, UsageError
from mneme.core.ir_override import IROverride
from mneme.core.types import ExperimentConfiguration
from mneme.core.workers import AsyncReplayExecutor

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))
SCALE = "fmul contract float %19, %1"  # a * x[i] in the recorded saxpy (a = 2.0)


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory) -> tuple[Path, str]:
    """(database, its IR text) of one saxpy launch captured on the host backend."""
    out = tmp_path_factory.mktemp("saxpy")
    done = subprocess.run(
        [sys.executable, "-m", "mneme", "capture", str(ROOT / "examples/saxpy/capture.yaml"), "-o", str(out)]
        + ["--backend", "host"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (db,) = out.glob("*.json")
    (module,) = out.glob("*.ll")
    text = module.read_text()
    assert SCALE in text
    return db, text


@pytest.mark.parametrize("compile_workers", [0, 1], ids=["device-builds", "compile-ahead"])
def test_the_pool_runs_the_replacement_ir_and_its_cache_keeps_each_ir_apart(saxpy, tmp_path, compile_workers):
    db, text = saxpy
    tripled = text.replace(SCALE, "fmul contract float %19, 3.0")  # y = 3x + y: not what was recorded
    doubled = text.replace(SCALE, "fadd contract float %19, %19")  # x + x: the recorded 2x, written otherwise
    with AsyncReplayExecutor(db, iterations=1, results_db_dir=tmp_path, compile_workers=compile_workers) as pool:
        pool.wait_ready(300)
        recorded = pool.evaluate(RECORDED)
        override = pool.set_ir(tripled)
        wrong = pool.evaluate(RECORDED)
        pool.set_ir(doubled.encode())
        rewritten = pool.evaluate(RECORDED)
        pool.set_ir(None)
        again = pool.evaluate(RECORDED)
        pool.set_ir(tripled)
        wrong_again = pool.evaluate(RECORDED)
    assert override.sha256 == hashlib.sha256(tripled.encode()).hexdigest()
    assert recorded.ok and again.ok and rewritten.ok, (recorded.error, again.error, rewritten.error)
    assert wrong.failed and wrong.error_kind == "verify" and "did not reproduce the recorded epilogue" in wrong.error
    assert wrong_again.error_kind == "verify"
    # each IR has its own variants: the recording's binary never stands for an override, nor one for another
    assert len({recorded.variant_hash, wrong.variant_hash, rewritten.variant_hash}) == 3
    assert again.variant_hash == recorded.variant_hash and wrong_again.variant_hash == wrong.variant_hash


def test_ir_that_cannot_be_built_fails_its_experiments_naming_why_and_the_worker_goes_on(saxpy, tmp_path):
    db, text = saxpy
    renamed = text.replace("@saxpy(", "@saxpy2(")
    signature = text.replace(
        "define dso_local void @saxpy(i32 noundef %0, float noundef %1,",
        "define dso_local void @saxpy(i64 noundef %extra, i32 noundef %0, float noundef %1,",
    )
    escaping = text.replace(SCALE, f"{SCALE}\n  %sys = call i32 @system(ptr %2)") + "\ndeclare i32 @system(ptr)\n"
    with AsyncReplayExecutor(db, iterations=1, results_db_dir=tmp_path) as pool:
        pids = pool.worker_pids
        outcomes = {}
        for name, ir in (("malformed", "define void @saxpy("), ("renamed", renamed), ("signature", signature)):
            pool.set_ir(ir)
            outcomes[name] = pool.evaluate(RECORDED)
        pool.set_ir(escaping)
        outcomes["escaping"] = pool.evaluate(RECORDED)
        pool.set_ir(text)  # the recorded IR given back as a replacement: verifies
        fine = pool.evaluate(RECORDED)
        assert pool.worker_pids == pids  # no worker died on any of them
    for name, result in outcomes.items():
        assert result.failed and result.error_kind == "compile" and not result.executed, (name, result.error)
        assert "replacement IR sha256:" in result.error, (name, result.error)
    assert "malformed LLVM IR" in outcomes["malformed"].error
    assert "'saxpy'" in outcomes["renamed"].error
    assert "takes parameters at (offset, size) [(0, 8), (8, 4)" in outcomes["signature"].error
    assert "system" in outcomes["escaping"].error  # the host backend's allowlist holds for replacement IR too
    assert fine.ok, fine.error


def test_an_override_is_read_within_the_ir_limit_and_a_bad_path_is_a_usage_error(tmp_path, monkeypatch):
    source = tmp_path / "kernel.ll"
    source.write_text("define void @k() {\n  ret void\n}\n")
    override = IROverride.of(source)
    assert override.label == str(source) and override.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    with pytest.raises(UsageError, match=r"missing\.ll: no such IR file"):
        IROverride.of(tmp_path / "missing.ll")
    with pytest.raises(UsageError, match="empty"):
        IROverride.of("  \n")
    monkeypatch.setenv("MNEME_LIMIT_IR_BYTES", "16")
    with pytest.raises(UsageError, match="ir_bytes"):
        IROverride.of(source)
    with pytest.raises(LimitError, match="ir_bytes"):
        IROverride.of(source.read_text())


def test_a_pool_replaying_the_applications_images_refuses_replacement_ir(saxpy, tmp_path):
    db, text = saxpy
    pool = AsyncReplayExecutor(db, results_db_dir=tmp_path, mode="ptx", start=False)
    with pytest.raises(UsageError, match="mode 'ir'"):
        pool.set_ir(text)


def test_an_executor_builds_from_the_replacement_ir_and_names_it_when_the_build_fails(saxpy):
    from mneme.core.executor import BaseExecutor

    db, text = saxpy
    with BaseExecutor(db, iterations=1) as executor:
        executor.set_ir(IROverride.of(text.replace(SCALE, "fadd contract float %19, %19")))
        rewritten = executor.execute(RECORDED)
        executor.set_ir(IROverride.of(text.replace(SCALE, "fmul contract float %19, %undefined_value")))
        broken = executor.execute(RECORDED)
        executor.set_ir(None)
        recorded = executor.execute(RECORDED)
    assert rewritten.ok and recorded.ok and rewritten.variant_hash != recorded.variant_hash
    assert broken.error_kind == "compile"
    # named once: by the parser's message, not again by the build's
    assert broken.error.startswith("building kernel 'saxpy' failed: replacement IR sha256:")
    assert "undefined_value" in broken.error
