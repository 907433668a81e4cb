"""The recorded launch's own in-application time reaches its instance (RecordedTime, RecordedCache)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

recorder = pytest.importorskip("mneme_cuda.recorder")

from mneme.core.errors import FormatError
from mneme.core.recorder.rawdir import recorded_times
from mneme.core.records import RecordedExecution
from paths import DATA

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
BASE = 0x153940000000
MiB = 1 << 20
KEY = "00000000000000aa"


def _counts(raw: Path, pid: int, kernels: dict) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"counts-{pid}.json").write_text(
        json.dumps({"format": "mneme-cuda-counts", "version": 1, "kernels": kernels})
    )


def test_the_recorded_launchs_time_and_cache_state_are_read_apart_from_the_repeats(tmp_path):
    raw = tmp_path / "raw"
    _counts(
        raw,
        1,
        {
            "bfs": {
                "seen": 9,
                "instances": {KEY: 9},
                "kernel_times": {KEY: [4.0e-5, 1.0e-5]},
                "recorded_time": {KEY: {"seconds": 4.0e-5, "cache": "flushed"}},
            }
        },
    )
    _counts(raw, 2, {"bfs": {"seen": 1, "instances": {"bb": 1}}})  # an older recorder: none
    assert recorded_times(raw) == {("bfs", KEY): (4.0e-5, "flushed")}


@pytest.mark.parametrize(
    "timing", [{"seconds": -1.0, "cache": "flushed"}, {"seconds": 1e-6, "cache": "hot"}, [1e-6, "flushed"]]
)
def test_a_malformed_recorded_time_is_an_error_naming_the_file_and_field(tmp_path, timing):
    raw = tmp_path / "raw"
    _counts(raw, 7, {"bfs": {"seen": 1, "instances": {KEY: 1}, "recorded_time": {KEY: timing}}})
    with pytest.raises(FormatError) as err:
        recorded_times(raw)
    assert (
        str(err.value).startswith(str(raw / "counts-7.json")) and err.value.field == f"kernels.bfs.recorded_time.{KEY}"
    )


@pytest.mark.skipif(NVCC is None, reason="needs nvcc: the CUDA toolkit")
def test_finalize_gives_the_instance_its_recorded_launchs_time_which_survives_a_reload(tmp_path):
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    cubin = tmp_path / "saxpy.cubin"
    subprocess.run(
        [NVCC, "-cubin", "-arch=sm_90", "-o", str(cubin), str(DATA / "kernels" / "saxpy.cu")],
        check=True,
        capture_output=True,
    )
    (raw / "images" / "i.cubin").write_bytes(cubin.read_bytes())
    args = struct.pack("<ifQQ", 16, 2.0, BASE, BASE + 2 * MiB)
    manifest = {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": "saxpy",
        "instance_key": KEY,
        "grid": [1, 1, 1],
        "block": [16, 1, 1],
        "shared_mem": 0,
        "va_base": BASE,
        "va_size": 1 << 40,
        "image": "images/i.cubin",
        "image_kind": "cubin",
        "args": args.hex(),
        "params": [[0, 4], [4, 4], [8, 8], [16, 8]],
        "regions": [[BASE, 64], [BASE + 2 * MiB, 64]],
        "globals": [],
    }
    folder = raw / "launch-5-000000"
    folder.mkdir()
    (folder / "prologue.bin").write_bytes(bytes(128))
    (folder / "epilogue.bin").write_bytes(bytes(64) + bytes(range(64)))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _counts(
        raw,
        5,
        {
            "saxpy": {
                "seen": 3,
                "instances": {KEY: 3},
                "kernel_times": {KEY: [3.0e-6, 2.0e-6, 2.1e-6]},
                "recorded_time": {KEY: {"seconds": 3.0e-6, "cache": "warm"}},
            }
        },
    )
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    data = json.loads(db.read_text())
    (entry,) = data["instances"].values()
    assert data["SchemaVersion"] == 5 and entry["RecordedTime"] == 3.0e-6 and entry["RecordedCache"] == "warm"
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.recorded_time == 3.0e-6 and inst.recorded_cache == "warm" and inst.app_timer == "cupti"
