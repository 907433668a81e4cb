"""Tolerance annotations (mneme_annotate.h, mneme.annotate) and `mneme record`'s progress, without a GPU.

The header is compiled and run with and without the recorder loaded; the Python function is
called in and out of a process that has the recorder; `finalize` turns the policies a launch
manifest carries into the regions' RegionPolicy; the progress poller reads a real recorder
folder as it grows.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from raw_launches import write_launch

from mneme import annotate as annotate_module
from mneme.annotate import annotate, recorder_loaded
from mneme.core.snapshot import RegionPolicy, Snapshot
from mneme.core.snapshot.format import EXACT

recorder = pytest.importorskip("mneme_cuda.recorder")

HEADER_DIR = Path(recorder.SOURCE).parent / "include"
BASE = 0x153940000000

PROGRAM = r"""
#include "mneme_annotate.h"
#include <stdio.h>

int main(void) {
    static float buffer[64];
    int a = mneme_annotate(buffer, "f32", 1e-5, 1, "none", "output");
    int b = mneme_annotate(buffer, "f33", 1e-5, 1, "none", "bad dtype");
    int c = mneme_annotate(buffer, "f64", 0.5, 0, NULL, NULL);
    printf("%d %d %d\n", a, b, c);
    return 0;
}
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    from mneme.core.errors import MnemeError

    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")


def _compile(tmp_path: Path, compiler: str, suffix: str, flags: list[str]) -> Path:
    if shutil.which(compiler) is None:
        pytest.skip(f"needs {compiler}")
    source = tmp_path / f"app.{suffix}"
    source.write_text(PROGRAM)
    exe = tmp_path / f"app_{suffix}"
    subprocess.run(
        [compiler, *flags, "-Wall", "-Wextra", "-Werror", f"-I{HEADER_DIR}", str(source), "-o", str(exe), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
    )
    return exe


@pytest.mark.parametrize(
    ("compiler", "suffix", "flags"),
    [
        ("g++", "cpp", ["-std=c++17", "-O2"]),
        ("gcc", "c", ["-std=c99", "-pedantic", "-O2"]),
    ],
)
def test_the_header_compiles_and_is_a_no_op_without_the_recorder(tmp_path, compiler, suffix, flags):
    exe = _compile(tmp_path, compiler, suffix, flags)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "0", "0"]
    assert proc.stderr == ""


def test_under_the_recorder_the_header_reaches_it_and_it_checks_the_pointer_and_the_policy(library, tmp_path):
    exe = _compile(tmp_path, "g++", "cpp", ["-std=c++17"])
    env = dict(os.environ, LD_PRELOAD=str(library))
    env.pop("MNEME_RECORD_DIR", None)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    # A host array lies in no allocation the recorder placed (-1); an unknown dtype is refused (-2).
    assert proc.stdout.split() == ["-1", "-2", "-1"]
    assert "not inside an allocation the recorder placed" in proc.stderr
    assert "invalid policy" in proc.stderr


class _Tensor:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


class _CudaArray:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


def test_python_annotate_is_a_no_op_without_the_recorder():
    assert not recorder_loaded()
    assert annotate(BASE, "f32", 1e-5, relative=True, tag="out") is False
    assert annotate(_Tensor(BASE), np.float32, 1e-3) is False
    assert annotate(_CudaArray(BASE), "float64", 0.0, norm="l2") is False
    assert annotate_module._address(_Tensor(BASE + 8)) == BASE + 8
    assert annotate_module._address(_CudaArray(BASE + 16)) == BASE + 16
    assert annotate_module._dtype_name("bfloat16") == "bf16"
    with pytest.raises(ValueError, match="unknown dtype"):
        annotate(BASE, "f33", 1e-5)
    with pytest.raises(ValueError, match="unknown norm"):
        annotate(BASE, "f32", 1e-5, norm="L3")
    with pytest.raises(ValueError, match="threshold"):
        annotate(BASE, "f32", float("nan"))
    with pytest.raises(TypeError, match="device address"):
        annotate("not a buffer", "f32", 1e-5)


def test_the_python_names_match_the_snapshot_formats():
    from mneme.core.snapshot import format as snapshot_format

    assert annotate_module.DTYPES == snapshot_format.DTYPES
    assert annotate_module.NORMS == snapshot_format.NORMS


def test_python_annotate_calls_the_recorder_when_the_process_has_it(library):
    script = (
        "import ctypes\n"
        "from mneme.annotate import annotate, recorder_loaded\n"
        "host = ctypes.create_string_buffer(64)\n"
        "print(recorder_loaded(), annotate(ctypes.addressof(host), 'f32', 1e-5, relative=True, tag='h'))\n"
    )
    env = dict(os.environ, LD_PRELOAD=str(library))
    env.pop("MNEME_RECORD_DIR", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]  # reached the recorder; a host buffer is not placed
    assert "not inside an allocation the recorder placed" in proc.stderr


# -- finalize: a dumped annotation becomes the region's policy --------------------------------------

PTX = b""".version 8.0
.target sm_90
.address_size 64

.visible .entry scale_add(.param .u64 scale_add_param_0, .param .u64 scale_add_param_1, .param .u32 n)
{
    ret;
}
\0"""


def _manifest(n: int, policies: list) -> dict:
    out = BASE + (2 << 20)
    return {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": "scale_add",
        "pid": 3,
        "sequence": 0,
        "occurrence": 0,
        "instance_key": "00000000000000ab",
        "grid": [1, 1, 1],
        "block": [n, 1, 1],
        "shared_mem": 0,
        "va_base": BASE,
        "va_size": 1 << 40,
        "bytes": 2 * n * 4,
        "image": "images/image-3-0000.ptx",
        "image_kind": "ptx",
        "args": struct.pack("<QQi", BASE, out, n).hex() + "00000000",
        "params": [[0, 8], [8, 8], [16, 4]],
        "regions": [[BASE, n * 4], [out, n * 4]],
        "globals": [],
        "policies": policies,
    }


@pytest.mark.parametrize("epilogue_format", ["diff", "bytes"])
def test_finalize_writes_a_dumped_annotation_as_the_regions_policy(tmp_path, epilogue_format):
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "image-3-0000.ptx").write_bytes(PTX)
    n = 256
    x = np.arange(n, dtype=np.float32)
    y0, y1 = np.zeros(n, dtype=np.float32), 2 * x + 1
    out = BASE + (2 << 20)
    policies = [
        {"addr": out, "dtype": "f32", "threshold": 1e-5, "relative": True, "norm": "none", "tag": "out"},
        {
            "addr": BASE + (64 << 20),
            "dtype": "f64",
            "threshold": 1.0,
            "relative": False,
            "norm": "L2",
            "tag": "freed before this launch",
        },
    ]
    write_launch(raw, 3, 0, _manifest(n, policies), x.tobytes() + y0.tobytes(), x.tobytes() + y1.tobytes())

    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90", epilogue_format=epilogue_format)
    from mneme.core.records import RecordedExecution

    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    want = RegionPolicy(dtype="f32", threshold=1e-5, relative=True, norm="none")
    for snapshot in (prologue, epilogue):
        policies_by_addr = {r.addr: r.policy for r in snapshot.regions}
        assert policies_by_addr == {BASE: EXACT, out: want}
    assert epilogue.read_region(out) == y1.tobytes()


def test_manifests_without_policies_keep_exact_regions_and_bad_policies_are_format_errors(tmp_path):
    from mneme.core.errors import FormatError

    manifest = _manifest(4, [])
    del manifest["policies"]  # written by a recorder before annotations existed
    assert recorder.region_policies(manifest) == {}
    bad = _manifest(4, [{"addr": BASE, "dtype": "f32", "threshold": -1.0}])
    with pytest.raises(FormatError, match="verification policy"):
        recorder.region_policies(bad, "manifest.json")


# -- `mneme record`'s progress line ------------------------------------------------------------------


def _launch(raw: Path, name: str, kernel: str, size: int, complete: bool = True) -> Path:
    folder = raw / (name if complete else name + ".tmp")
    folder.mkdir(parents=True)
    (folder / "prologue.bin").write_bytes(b"\0" * size)
    if complete:
        (folder / "epilogue.bin").write_bytes(b"\0" * size)
        (folder / "manifest.json").write_text(json.dumps({"format": "mneme-cuda-raw", "version": 1, "kernel": kernel}))
    return folder


def test_the_progress_poller_follows_a_recorder_folder_as_it_grows(tmp_path):
    raw = tmp_path / "raw"
    poller = recorder.ProgressPoller(raw)
    assert poller.poll() == recorder.ProgressState()  # not created yet
    raw.mkdir()
    (raw / "maps-1.txt").write_text("x" * 100)  # not counted
    _launch(raw, "launch-1-000000", "saxpy", 1000, complete=False)
    state = poller.poll()
    assert (state.kernels, state.instances, state.bytes, state.in_flight) == (0, 0, 1000, 1)
    # The recorder finishes the launch: the .tmp folder is renamed whole.
    tmp = raw / "launch-1-000000.tmp"
    (tmp / "epilogue.bin").write_bytes(b"\0" * 1000)
    (tmp / "manifest.json").write_text(json.dumps({"kernel": "saxpy"}))
    manifest_size = (tmp / "manifest.json").stat().st_size
    tmp.rename(raw / "launch-1-000000")
    (raw / "images").mkdir()
    (raw / "images" / "image-1-0000.fatbin").write_bytes(b"\0" * 500)
    state = poller.poll()
    assert (state.kernels, state.instances, state.in_flight) == (1, 1, 0)
    assert state.bytes == 2000 + manifest_size + 500
    _launch(raw, "launch-1-000001", "saxpy", 10)
    _launch(raw, "launch-2-000000", "stencil2d", 10)
    state = poller.poll()
    assert (state.kernels, state.instances) == (2, 3)
    assert "2 kernels, 3 instances" in state.line()
    assert recorder.ProgressState(1, 1, 3 << 20).line(2.0) == "recording: 1 kernel, 1 instance, 3.0 MiB written (2 s)"


def test_watch_shows_the_final_figures_and_returns_the_applications_exit_code(tmp_path):
    from rich.console import Console

    raw = tmp_path / "raw"
    raw.mkdir()
    script = (
        "import json, os, sys, time\n"
        "raw = sys.argv[1]\n"
        "for i in range(3):\n"
        "    folder = os.path.join(raw, f'launch-9-{i:06d}')\n"
        "    os.mkdir(folder + '.tmp')\n"
        "    open(os.path.join(folder + '.tmp', 'prologue.bin'), 'wb').write(b'0' * 4096)\n"
        "    open(os.path.join(folder + '.tmp', 'manifest.json'), 'w').write(json.dumps({'kernel': 'k%d' % (i % 2)}))\n"
        "    os.rename(folder + '.tmp', folder)\n"
        "    time.sleep(0.1)\n"
        "sys.exit(3)\n"
    )
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with subprocess.Popen([sys.executable, "-c", script, str(raw)]) as proc:
        code = recorder.watch(proc, raw, console, interval=0.05)
    assert code == 3
    assert "recording: 2 kernels, 3 instances" in out.getvalue()


def test_without_a_terminal_watch_prints_the_final_line_once(tmp_path):
    from rich.console import Console

    raw = tmp_path / "raw"
    _launch(raw, "launch-1-000000", "saxpy", 10)
    out = io.StringIO()
    with subprocess.Popen([sys.executable, "-c", "pass"]) as proc:
        assert recorder.watch(proc, raw, Console(file=out, force_terminal=False), interval=0.05) == 0
    assert out.getvalue().startswith("recording: 1 kernel, 1 instance, ")
    assert out.getvalue().count("recording:") == 1 and out.getvalue().endswith("\n")


def test_record_has_a_progress_switch():
    from click.testing import CliRunner

    from mneme.core.recorder.command import record_command

    result = CliRunner().invoke(record_command(), ["--help"])
    assert result.exit_code == 0
    assert "--progress / --no-progress" in result.output
