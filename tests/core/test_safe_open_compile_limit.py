"""Compilation is bounded (issue 36): a kernel too large to compile in time is killed from outside at
the compile_seconds limit (MNEME_LIMIT_COMPILE_SECONDS) - `capture` and `replay` exit 2 naming the
limit, a tuning trial fails with that reason - and IR over the ir_bytes limit is refused before it
is parsed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mneme.core import ir
from mneme.core.errors import LimitError

CLI = [sys.executable, "-m", "mneme"]
BLOCKS = 5000  # about 10 s to compile on the host backend; the limit below kills it after 0.5 + 2 s


def _many_blocks(folder, blocks: int = BLOCKS):
    """A kernel of `blocks` basic blocks in a chain (LLVM's passes grow faster than linearly with it)."""
    lines = [
        'target triple = "nvptx64-nvidia-cuda"',
        "",
        "define void @many(ptr %p, i32 %n) {",
        "entry:",
        "  br label %b0",
    ]
    for k in range(blocks):
        lines += [
            f"b{k}:",
            f"  %q{k} = getelementptr i32, ptr %p, i32 {k % 64}",
            f"  %v{k} = load i32, ptr %q{k}",
            f"  %w{k} = add i32 %v{k}, {k}",
            f"  store i32 %w{k}, ptr %q{k}",
            f"  %c{k} = icmp slt i32 %w{k}, %n",
            f"  br i1 %c{k}, label %b{k + 1}, label %exit",
        ]
    lines += [
        f"b{blocks}:",
        "  br label %exit",
        "exit:",
        "  ret void",
        "}",
        "!nvvm.annotations = !{!0}",
        '!0 = !{ptr @many, !"kernel", i32 1}',
    ]
    (folder / "many.ll").write_text("\n".join(lines) + "\n")
    spec = folder / "spec.yaml"
    spec.write_text(
        "ir: many.ll\nkernel: many\ngrid: 1\nblock: 1\nargs:\n  - {zeros: {dtype: int32, shape: [64]}}\n  - 100000000\n"
    )
    return spec


def _mneme(*args, limit=None):
    env = {**os.environ, "MNEME_HOST_THREADS": "1"}
    if limit is not None:
        env["MNEME_LIMIT_COMPILE_SECONDS"] = str(limit)
    started = time.monotonic()
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def many_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("many")
    proc, _ = _mneme("capture", _many_blocks(folder), "-o", folder / "rec", "--backend", "host")
    assert proc.returncode == 0, proc.stderr
    return next((folder / "rec").glob("*.json"))


def test_capture_of_a_kernel_too_large_to_compile_in_time_is_killed_and_exits_2(tmp_path):
    proc, took = _mneme("capture", _many_blocks(tmp_path), "-o", tmp_path / "out", "--backend", "host", limit=0.5)
    assert proc.returncode == 2, proc.stderr
    assert "compile_seconds=0.5" in proc.stderr and "MNEME_LIMIT_COMPILE_SECONDS" in proc.stderr
    assert took < 60  # killed at 2.5 s, not compiled to the end
    assert not list(tmp_path.glob("out/*.json"))


def test_replay_past_the_compile_limit_exits_2_naming_the_limit(many_db):
    proc, _ = _mneme("replay", "-rdb", many_db, limit=0.5)
    assert proc.returncode == 2, proc.stderr
    assert "compile_seconds=0.5" in proc.stderr and "MNEME_LIMIT_COMPILE_SECONDS" in proc.stderr
    proc, _ = _mneme("replay", "-rdb", many_db)  # within the default limit it compiles and verifies
    assert proc.returncode == 0, proc.stderr


def test_a_tuning_trial_past_the_compile_limit_fails_with_that_reason(many_db, tmp_path):
    proc, _ = _mneme(
        "tune", "-rdb", many_db, "--space", "quick", "--trials", "1", "--results", tmp_path / "r", limit=0.5
    )
    assert proc.returncode == 3, proc.stderr  # the recorded baseline is the first trial: it did not run
    assert "compile: compiling the variant took longer than its limit compile_seconds=0.5" in proc.stderr


def test_ir_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    spec = _many_blocks(tmp_path, blocks=200)
    size = (tmp_path / "many.ll").stat().st_size
    monkeypatch.setenv("MNEME_LIMIT_IR_BYTES", str(size - 1))
    with pytest.raises(LimitError, match=r"ir_bytes=.*MNEME_LIMIT_IR_BYTES"):
        ir.load(tmp_path / "many.ll")
    with pytest.raises(LimitError, match="ir_bytes"):
        ir.load((tmp_path / "many.ll").read_text())
    monkeypatch.setenv("MNEME_LIMIT_IR_BYTES", str(size))
    assert ir.load(tmp_path / "many.ll").get_function("many") is not None
    assert spec.exists()
