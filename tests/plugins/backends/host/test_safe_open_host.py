"""Kernel IR from someone else runs on the host backend as data: it links only against Mneme's runtime
and the math library, stops at the time limit, and launches only within the device's limits (issue 24)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import ROOT

CLI = [sys.executable, "-m", "mneme"]
HEADER = 'target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"\ntarget triple = "nvptx64-nvidia-cuda"\n'

SYSTEM_IR = (
    HEADER
    + """
@cmd = private unnamed_addr constant [{n} x i8] c"{cmd}\\00"
declare i32 @system(ptr)
define void @k(ptr %p) {{
  %r = call i32 @system(ptr @cmd)
  store i32 %r, ptr %p
  ret void
}}
"""
)

SPIN_IR = (
    HEADER
    + """
define void @k(ptr %p) {
entry:
  br label %loop
loop:
  store volatile i32 1, ptr %p
  br label %loop
}
"""
)

BENIGN_IR = (
    HEADER
    + """
define void @k(ptr %p) {
  store i32 7, ptr %p
  ret void
}
"""
)


def mneme(*args, timeout=240, env=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def _spec(tmp_path, ir_text: str, grid=1, block=1):
    (tmp_path / "k.ll").write_text(ir_text)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"ir: k.ll\nkernel: k\ngrid: {grid}\nblock: {block}\nargs:\n  - {{zeros: {{dtype: int32, shape: [4]}}}}\n"
    )
    return spec


def _system_ir(marker) -> str:
    cmd = f"touch {marker}"
    return SYSTEM_IR.format(n=len(cmd) + 1, cmd=cmd)


def test_capture_of_ir_calling_system_is_refused_by_name_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    spec = _spec(tmp_path, _system_ir(marker))
    proc = mneme("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert not marker.exists(), "the kernel ran a shell command"
    assert proc.returncode != 0 and "system" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_replay_of_a_cuda_recording_on_the_host_fallback_refuses_ir_calling_system(tmp_path):
    marker = tmp_path / "pwned"
    spec = _spec(tmp_path, BENIGN_IR)
    out = tmp_path / "out"
    proc = mneme("capture", spec, "-o", out, "--backend", "host")
    assert proc.returncode == 0, proc.stderr
    db = next(out.glob("*.json"))
    doc = json.loads(db.read_text())
    doc["Backend"] = "cuda"
    db.write_text(json.dumps(doc))
    (out / doc["Modules"][0]).write_text(_system_ir(marker))
    proc = mneme("replay", "-rdb", db)  # no GPU here: the host backend stands in for cuda
    assert not marker.exists(), "the kernel ran a shell command"
    assert proc.returncode != 0 and "system" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_an_infinite_loop_kernel_stops_at_the_timeout(tmp_path):
    spec = _spec(tmp_path, SPIN_IR, grid=2, block=32)
    start = time.monotonic()
    proc = mneme("capture", spec, "-o", tmp_path / "out", "--backend", "host", "--timeout", "2", timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0 and "timed out" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_grid_beyond_the_device_limit_is_refused_at_launch(tmp_path):
    spec = _spec(tmp_path, BENIGN_IR)
    out = tmp_path / "out"
    assert mneme("capture", spec, "-o", out, "--backend", "host").returncode == 0
    db = next(out.glob("*.json"))
    doc = json.loads(db.read_text())
    for inst in doc["instances"].values():
        inst["GridDims"]["x"] = 2**31
    db.write_text(json.dumps(doc))
    start = time.monotonic()
    proc = mneme("replay", "-rdb", db, "--backend", "host", timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0 and "2147483648" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "body, what",
    [
        ('call void asm sideeffect "syscall", ""()', "assembly"),
        ("%f = inttoptr i64 4096 to ptr\n  call void %f()", "through a pointer"),
    ],
)
def test_inline_assembly_and_calls_through_pointers_are_refused(tmp_path, body, what):
    ir = HEADER + f"define void @k(ptr %p) {{\n  {body}\n  ret void\n}}\n"
    proc = mneme("capture", _spec(tmp_path, ir), "-o", tmp_path / "out", "--backend", "host")
    assert proc.returncode != 0 and what in proc.stderr, proc.stderr


def test_replay_of_an_infinite_loop_kernel_stops_at_the_timeout(tmp_path):
    spec = _spec(tmp_path, BENIGN_IR)
    out = tmp_path / "out"
    assert mneme("capture", spec, "-o", out, "--backend", "host").returncode == 0
    db = next(out.glob("*.json"))
    (out / json.loads(db.read_text())["Modules"][0]).write_text(SPIN_IR)
    start = time.monotonic()
    proc = mneme("replay", "-rdb", db, "--backend", "host", "--timeout", "2", timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0 and "timed out" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_worker_process_drops_core_dumps_and_new_privileges():
    code = (
        "import resource\nfrom mneme.core import limits\nlimits.restrict_worker()\n"
        "print(resource.getrlimit(resource.RLIMIT_CORE))\n"
        "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split("\n")[:2] == ["(0, 0)", "1"], proc.stdout + proc.stderr


def test_a_kernel_writing_one_element_past_its_buffer_fails_naming_the_buffer_and_offset(tmp_path):
    saxpy = ROOT / "examples" / "saxpy" / "saxpy.ll"
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(saxpy, spec.parent / "saxpy.ll")  # a description's IR lies in its folder
    spec.write_text(
        f"ir: saxpy.ll\nkernel: saxpy\ngrid: 8\nblock: 128\nargs:\n  - 1001\n  - 2.0\n"
        "  - {ones: {dtype: float32, shape: [1001]}}\n  - {ones: {dtype: float32, shape: [1000]}}\n"
    )
    proc = mneme("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "out of bounds" in proc.stderr and "bytes 4000..4003 of the 4000-byte buffer" in proc.stderr, proc.stderr
    assert "byte 16 of the arguments" in proc.stderr


def _saxpy_spec(tmp_path, n: int, x_len: int, y_len: int) -> Path:
    saxpy = ROOT / "examples" / "saxpy" / "saxpy.ll"
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(saxpy, spec.parent / "saxpy.ll")
    spec.write_text(
        f"ir: saxpy.ll\nkernel: saxpy\ngrid: 8\nblock: 128\nargs:\n  - {n}\n  - 2.0\n"
        f"  - {{ones: {{dtype: float32, shape: [{x_len}]}}}}\n"
        f"  - {{ones: {{dtype: float32, shape: [{y_len}]}}}}\n"
    )
    return spec


def test_a_kernel_reading_one_element_past_its_buffer_fails_naming_the_argument_and_offset(tmp_path):
    # x holds 1000 floats (4000 bytes) and saxpy reads x[1000]: inside x's last page, so no fault
    proc = mneme("capture", _saxpy_spec(tmp_path, 1001, 1000, 1001), "-o", tmp_path / "out", "--backend", "host")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "read out of bounds: bytes 4000..4003 of the 4000-byte buffer" in proc.stderr, proc.stderr
    assert "the pointer at byte 8 of the arguments" in proc.stderr, proc.stderr  # x, after n and a
    assert "Traceback" not in proc.stderr


def test_in_bounds_reads_capture_and_replay_verified(tmp_path):
    out = tmp_path / "out"
    proc = mneme("capture", _saxpy_spec(tmp_path, 1000, 1000, 1000), "-o", out, "--backend", "host")
    assert proc.returncode == 0, proc.stderr
    proc = mneme("replay", "-rdb", next(out.glob("*.json")), "--backend", "host", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["result"]["verified"] is True
