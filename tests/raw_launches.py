"""Raw folders laid out exactly as the CUDA recorder writes them, for the tests of finalize without a GPU.

A raw folder holds `launch-<pid>-<seq>/` (manifest.json, prologue.bin, epilogue.bin), the code images
under `images/` and `counts-<pid>.json` (docs/design/recording.md). The kernels come from
tests/data/kernels, compiled by nvcc where the CUDA toolkit is installed.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from paths import DATA

KERNELS = DATA / "kernels"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
BASE = 0x153940000000  # where the recorder places allocations by default
MiB = 1 << 20
SAXPY_PARAMS = [[0, 4], [4, 4], [8, 8], [16, 8]]  # saxpy(int n, float a, const float *x, float *y)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc: the CUDA toolkit")


def nvcc(tmp_path: Path, source: str, kind: str) -> bytes:
    """tests/data/kernels/`source` compiled by nvcc for sm_90 as `kind` (cubin, fatbin, ptx)."""
    out = tmp_path / f"{Path(source).stem}.{kind}"
    subprocess.run(
        [NVCC, f"-{kind}", "-arch=sm_90", "-o", str(out), str(KERNELS / source)], check=True, capture_output=True
    )
    return out.read_bytes()


def launch_manifest(kernel: str, args: bytes, params: list, regions: list, **fields) -> dict:
    """A launch's manifest.json (format 1) at the default base, image images/i.cubin; `fields` add or replace."""
    return {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": kernel,
        "instance_key": "1",
        "shared_mem": 0,
        "va_base": BASE,
        "va_size": 1 << 40,
        "image": "images/i.cubin",
        "args": args.hex(),
        "params": params,
        "regions": regions,
        "globals": [],
        **fields,
    }


def write_launch(raw: Path, pid: int, seq: int, manifest: dict, before: bytes, after: bytes) -> Path:
    """`raw/launch-<pid>-<seq>/`: the manifest and the regions' bytes before and after, concatenated."""
    folder = raw / f"launch-{pid}-{seq:06d}"
    folder.mkdir(parents=True)
    (folder / "prologue.bin").write_bytes(before)
    (folder / "epilogue.bin").write_bytes(after)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def write_counts(raw: Path, pid: int, kernels: dict) -> None:
    """`raw/counts-<pid>.json`: what the recorder counted and timed per kernel at the process's exit."""
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"counts-{pid}.json").write_text(
        json.dumps({"format": "mneme-cuda-counts", "version": 1, "kernels": kernels})
    )


def write_saxpy_launch(raw: Path, tmp_path: Path, instance_key: str) -> None:
    """`raw/launch-5-000000`: saxpy over 16 floats (x at BASE, y 2 MiB above, zeros), y rewritten as 0..63."""
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "i.cubin").write_bytes(nvcc(tmp_path, "saxpy.cu", "cubin"))
    args = struct.pack("<ifQQ", 16, 2.0, BASE, BASE + 2 * MiB)
    regions = [[BASE, 64], [BASE + 2 * MiB, 64]]
    fields = {"instance_key": instance_key, "grid": [1, 1, 1], "block": [16, 1, 1], "image_kind": "cubin"}
    manifest = launch_manifest("saxpy", args, SAXPY_PARAMS, regions, **fields)
    write_launch(raw, 5, 0, manifest, bytes(128), bytes(64) + bytes(range(64)))
