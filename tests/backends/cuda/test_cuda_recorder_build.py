"""The CUDA recorder without a GPU: its build, its exports, rank selection, status and finalizing raw dumps."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

pytest.importorskip("mneme_cuda")


@pytest.fixture(scope="module")
def recorder_library(tmp_path_factory):
    from mneme_cuda import recorder

    from mneme.core.errors import MnemeError

    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")


def test_recorder_builds_against_the_cuda_headers_and_exports_its_interposers(recorder_library):
    library = recorder_library
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    for name in ("dlsym", "cuLaunchKernel", "cuMemAlloc_v2", "cuMemFree_v2", "mneme_recorder_version"):
        assert name in symbols


def test_a_process_that_never_uses_cuda_runs_unchanged_under_the_recorder(recorder_library, tmp_path):
    import os
    import sys

    library = recorder_library
    env = dict(os.environ, LD_PRELOAD=str(library), MNEME_RECORD_DIR=str(tmp_path / "raw"))
    proc = subprocess.run(
        [sys.executable, "-c", "import ctypes, json, numpy; print(json.dumps([1, 2]))"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "[1, 2]"), proc.stderr
    assert not (tmp_path / "raw").exists() or not list((tmp_path / "raw").iterdir())


RANK_PROBE = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).mneme_recorder_records())"


@pytest.mark.parametrize(
    ("spec", "rank", "records"),
    [
        (None, None, 1),
        (None, "0", 1),
        (None, "2", 0),
        ("all", "2", 1),
        ("0,2", "2", 1),
        ("0,2", None, 1),
        ("1,3", "2", 0),
        ("2", None, 0),
    ],
)
def test_only_the_selected_mpi_ranks_record(recorder_library, tmp_path, spec, rank, records):
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")}
    env["MNEME_RECORD_DIR"] = str(tmp_path)
    if spec is not None:
        env["MNEME_RECORD_RANKS"] = spec
    if rank is not None:
        env["OMPI_COMM_WORLD_RANK"] = rank
    proc = subprocess.run(
        [sys.executable, "-c", RANK_PROBE, str(recorder_library)], env=env, capture_output=True, text=True, check=True
    )
    assert int(proc.stdout) == records


def test_recorder_status_says_whether_and_how_it_is_built(monkeypatch, tmp_path):
    from mneme_cuda import recorder

    monkeypatch.setenv("MNEME_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MNEME_CUDA_RECORDER", raising=False)
    packaged = recorder.packaged_library()
    sources = [p for p in (*recorder.SOURCES, *recorder.HEADERS) if p.exists()]
    if packaged is not None and all(packaged.stat().st_mtime >= p.stat().st_mtime for p in sources):
        # the package's build (scikit-build-core) made it from these sources: status names that file
        assert recorder.status() == (True, f"built: {packaged}")
    elif packaged is not None:  # a checkout edited since the package's build: its copy is stale, never named
        assert recorder.status()[1] != f"built: {packaged}"
    monkeypatch.setattr(recorder, "packaged_library", lambda: None)  # as a package build without cuda.h leaves it
    from mneme.core import native

    monkeypatch.setattr(native, "_SEARCH", [])  # nor a checkout's prepared copy (.gpu/lib, scripts/gpu-suite --prepare)
    _, message = recorder.status()
    assert message.startswith("not built")
    monkeypatch.setenv("MNEME_CUDA_RECORDER", str(tmp_path / "missing.so"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "no-cuda"))
    if recorder.cuda_include() is None and recorder.compiler() is not None:
        ok, message = recorder.status()
        assert not ok and "cuda.h" in message and "CUDA_PATH" in message


def _raw_launch(raw, seq, args, regions_before, regions_after, params):
    """A launch folder as the native recorder writes it (see mneme_recorder.cpp, record_launch)."""
    folder = raw / f"launch-1234-{seq:06d}"
    folder.mkdir(parents=True)
    (folder / "prologue.bin").write_bytes(b"".join(data for _, data in regions_before))
    (folder / "epilogue.bin").write_bytes(b"".join(data for _, data in regions_after))
    manifest = {
        "format": "mneme-cuda-raw",
        "version": 1,
        "kernel": "saxpy",
        "pid": 1234,
        "sequence": seq,
        "occurrence": seq,
        "instance_key": f"{seq:016x}",
        "grid": [128, 1, 1],
        "block": [256, 1, 1],
        "shared_mem": 0,
        "va_base": 0x153940000000,
        "va_size": 1 << 40,
        "args": args.hex(),
        "params": params,
        "regions": [[addr, len(data)] for addr, data in regions_before],
    }
    (folder / "manifest.json").write_text(__import__("json").dumps(manifest))


def test_finalize_turns_recorder_dumps_into_a_replayable_database(tmp_path):
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    irbuild = pytest.importorskip("irbuild")
    from mneme_cuda import recorder

    try:
        ir_path = irbuild.build_cuda_ir("saxpy")
    except Exception as exc:  # noqa: BLE001 - clang-19 missing: nothing to link
        pytest.skip(f"no corpus IR: {exc}")
    base = 0x153940000000
    n = 1024
    x = np.arange(n, dtype=np.float32)
    y0 = np.ones(n, dtype=np.float32)
    y1 = 2 * x + y0
    args = struct.pack("<ifQQ", n, 2.0, base, base + (2 << 20))
    params = [[0, 4], [4, 4], [8, 8], [16, 8]]
    raw = tmp_path / "raw"
    _raw_launch(
        raw,
        0,
        args,
        [(base, x.tobytes()), (base + (2 << 20), y0.tobytes())],
        [(base, x.tobytes()), (base + (2 << 20), y1.tobytes())],
        params,
    )
    (raw / "launch-1234-000001.tmp").mkdir()  # an interrupted launch: ignored
    counts = {
        "format": "mneme-cuda-counts",
        "version": 1,
        "kernels": {"saxpy": {"seen": 9, "instances": {f"{0:016x}": 7, f"{5:016x}": 2}}},
    }
    (raw / "counts-1234.json").write_text(__import__("json").dumps(counts))
    (db,) = recorder.finalize(raw, tmp_path / "db", [ir_path], arch="sm_90")
    rec = RecordedExecution.from_json(db)
    (inst,) = rec.kernel_instances.values()
    assert (rec.kernel_name, rec.va_addr, inst.grid_dim.x, inst.block_dim.x) == ("saxpy", base, 128, 256)
    assert inst.occ == 7
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert prologue.args == args
    assert epilogue.read_region(base + (2 << 20)) == y1.tobytes()
    assert [r.addr for r in prologue.regions] == [base, base + (2 << 20)]
