"""The CUDA plugin where no GPU is needed: registration, availability, the compare kernels' PTX."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

from mneme.core import plugins
from mneme.core.errors import BackendUnavailable, UnsupportedError

cmp = pytest.importorskip("mneme_cuda.compare")
from mneme_cuda import driver as cuda_driver
from mneme_cuda.backend import CudaBackend

KERNELS = Path(cmp.__file__).parent / "kernels"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if Path("/usr/local/cuda/bin/ptxas").exists() else None)


def test_cuda_backend_is_registered_through_its_entry_point():
    assert plugins.registry("backend")["cuda"] is CudaBackend
    (item,) = [p for p in plugins.provided("backend") if p.name == "cuda"]
    assert item.distribution == "mneme-cuda"


def test_without_a_gpu_availability_says_why_and_opening_raises():
    found = cuda_driver.probe()
    if found.usable:
        pytest.skip("a CUDA GPU is present")
    availability = CudaBackend().availability()
    assert not availability.usable
    assert any(word in availability.reason for word in ("libcuda.so.1", "cuda-bindings", "no CUDA device", "cuInit"))
    assert CudaBackend().device_count() == 0
    with pytest.raises(BackendUnavailable, match="cuda backend is unusable"):
        CudaBackend().open_device(0)
    assert CudaBackend().fingerprint()["backend"] == "cuda"


@pytest.mark.skipif(NVCC is None, reason="needs nvcc: the CUDA toolkit")
@pytest.mark.parametrize("name", ["compare", "lz4"])
def test_checked_in_ptx_is_what_nvcc_makes_of_its_source(tmp_path, name):
    out = tmp_path / f"{name}.ptx"
    subprocess.run([NVCC, "-ptx", "-arch=compute_75", "-O3", "-o", str(out), str(KERNELS / f"{name}.cu")],
                   check=True, capture_output=True)  # fmt: skip
    strip = lambda text: [line for line in text.splitlines() if not line.startswith("//")]
    assert strip(out.read_text()) == strip((KERNELS / f"{name}.ptx").read_text())


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas: the CUDA toolkit")
@pytest.mark.parametrize("name", ["compare", "lz4"])
def test_checked_in_ptx_assembles_for_hopper_without_spills(tmp_path, name):
    proc = subprocess.run([PTXAS, "-arch=sm_90", "-v", str(KERNELS / f"{name}.ptx"), "-o", str(tmp_path / "c.cubin")],
                          check=True, capture_output=True, text=True)  # fmt: skip
    assert "0 bytes spill stores" in proc.stderr and " spill stores" in proc.stderr
    assert not re.search(r"[1-9]\d* bytes spill stores", proc.stderr)
    assert (tmp_path / "c.cubin").stat().st_size > 0


def _ptx_params(entry: str, text: str | None = None) -> list[str]:
    text = text or cmp.ptx().decode()
    block = re.search(rf"\.entry {entry}\((.*?)\)", text, re.DOTALL).group(1)
    return re.findall(r"\.param \.(\w+)", block)


@pytest.mark.parametrize("key", sorted(cmp.KERNELS))
def test_packed_compare_arguments_match_the_ptx_parameter_layout(key):
    sizes = {"u64": 8, "f64": 8, "u32": 4, "b32": 4, "s32": 4}
    offset = 0
    for kind in _ptx_params(cmp.KERNELS[key]):
        size = sizes[kind]
        offset = -(-offset // size) * size + size  # natural alignment, as the driver lays parameters out
    assert len(cmp.pack_args(key, 1, 2, 3, 0.5, True, 4)) == offset


def test_packed_restore_kernel_arguments_match_their_ptx_parameters():
    from mneme_cuda import devdecode

    text = devdecode.ptx().decode()
    assert _ptx_params(devdecode.DECODE_KERNEL, text) == ["u64", "u32", "u64"]
    assert len(devdecode.pack_decode_args(1, 2, 3)) == 24  # 8, 4 (+4 to align the pointer), 8
    assert _ptx_params(devdecode.UNSHUFFLE_KERNEL, text) == ["u64"]
    assert len(devdecode.pack_unshuffle_args(1)) == 8


def test_packed_copy_arguments_match_the_copy_kernels_ptx_parameters():
    # mneme_copy(dst, src, n): three 64-bit parameters, in that order
    assert _ptx_params(cmp.COPY_KERNEL) == ["u64", "u64", "u64"]
    assert struct.unpack("<QQQ", cmp.pack_copy_args(0x1000, 0x2000, 77)) == (0x1000, 0x2000, 77)


def _words(count=0, first=None, max_abs=0.0, max_rel=0.0, nan=0, ssd=0.0, ssr=0.0, sad=0.0, sar=0.0, max_ref=0.0):
    row = cmp.initial_out(1)[0]
    row[0] = count
    if first is not None:
        row[1] = first
    f = row.view(np.float64)
    f[2], f[3], f[5], f[6], f[7], f[8], f[9] = max_abs, max_rel, ssd, ssr, sad, sar, max_ref
    row[4] = nan
    return row


def _request(size=4096):
    return cmp.CompareRequest(expected=0x1000, actual=0x2000, size=size)


def test_exact_compare_reports_bytes_and_first_offset():
    diff = cmp.decide(_request(), "bytes", 0.0, False, "none", _words(count=3, first=17))
    assert (diff.ok, diff.differing_bytes, diff.first_offset, diff.dtype) == (False, 3, 17, "u8")
    assert cmp.decide(_request(), "bytes", 0.0, False, "none", _words()).ok


def test_float_compare_counts_elements_in_bytes():
    diff = cmp.decide(_request(), "f32", 1e-6, True, "none", _words(count=2, first=10, max_abs=0.5, max_rel=0.25))
    assert (diff.ok, diff.differing_bytes, diff.first_offset) == (False, 8, 40)
    assert (diff.max_abs, diff.max_rel) == (0.5, 0.25)


def test_relative_l2_policy_accepts_small_noise_and_rejects_nan_mismatch():
    noisy = _words(count=5, first=0, max_abs=1e-3, ssd=1e-8, ssr=1.0)  # elements over 1e-6, but ||d||/||e|| = 1e-4
    assert cmp.decide(_request(), "f32", 1e-3, True, "L2", noisy).ok
    assert not cmp.decide(_request(), "f32", 1e-5, True, "L2", noisy).ok
    assert not cmp.decide(_request(), "f32", 1e-3, True, "L2", _words(count=1, first=0, nan=1, ssr=1.0)).ok


def test_relative_linf_and_absolute_l1_policies():
    words = _words(count=1, first=3, max_abs=0.2, sad=0.3, sar=10.0, max_ref=4.0)
    assert cmp.decide(_request(), "f64", 0.06, True, "Linf", words).ok  # 0.2 / 4.0
    assert not cmp.decide(_request(), "f64", 0.04, True, "Linf", words).ok
    assert cmp.decide(_request(), "f64", 0.3, False, "L1", words).ok
    assert not cmp.decide(_request(), "f64", 0.29, False, "L1", words).ok


def test_a_differing_tail_fails_a_float_region():
    diff = cmp.decide(_request(4099), "f32", 1.0, False, "none", _words(), tail_differs=1, tail_first=4097)
    assert (diff.ok, diff.differing_bytes, diff.first_offset) == (False, 1, 4097)


def test_policy_plans():
    assert cmp.plan(None) == ("bytes", 0.0, False, "none")
    exact_int = types.SimpleNamespace(dtype="i32", threshold=0.0, relative=False, norm="none")
    assert cmp.plan(exact_int)[0] == "bytes"
    f16 = types.SimpleNamespace(dtype="f16", threshold=1e-2, relative=True, norm="L2")
    assert cmp.plan(f16) == ("f16", 1e-2, True, "L2")
    with pytest.raises(UnsupportedError, match="i32"):
        cmp.plan(types.SimpleNamespace(dtype="i32", threshold=1.0, relative=False, norm="none"))


def test_compare_grid_fills_the_device_but_never_exceeds_the_work():
    assert cmp.grid_for(10, sm_count=132) == 1
    assert cmp.grid_for(1 << 30, sm_count=132) == 132 * 4


def test_small_ranges_are_reserved_inside_a_generous_aligned_span():
    from mneme_cuda.memory import GiB, reservation_attempts

    granularity = 2 << 20
    addr, size = 0x153940000000 + 3 * granularity + 5, 10 << 20
    attempts = reservation_attempts(addr, size, granularity)
    assert attempts[0] == (0x153940000000 + 3 * granularity, 6 * granularity)
    assert attempts[1:] == [(0x153940000000, 4 * GiB), (0x153940000000, 64 * GiB)]
    for base, length in attempts:
        assert base <= addr and addr + size <= base + length and base % granularity == 0 == length % granularity


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
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    for name in ("dlsym", "cuLaunchKernel", "cuMemAlloc_v2", "cuMemFree_v2", "mneme_recorder_version"):
        assert name in symbols


def test_a_process_that_never_uses_cuda_runs_unchanged_under_the_recorder(recorder_library, tmp_path):
    import os
    import sys

    library = recorder_library
    env = dict(os.environ, LD_PRELOAD=str(library), MNEME_RECORD_DIR=str(tmp_path / "raw"))
    proc = subprocess.run([sys.executable, "-c", "import ctypes, json, numpy; print(json.dumps([1, 2]))"],
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert (proc.returncode, proc.stdout.strip()) == (0, "[1, 2]"), proc.stderr
    assert not (tmp_path / "raw").exists() or not list((tmp_path / "raw").iterdir())


RANK_PROBE = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).mneme_recorder_records())"


@pytest.mark.parametrize(("spec", "rank", "records"), [
    (None, None, 1), (None, "0", 1), (None, "2", 0), ("all", "2", 1), ("0,2", "2", 1), ("0,2", None, 1),
    ("1,3", "2", 0), ("2", None, 0),
])  # fmt: skip
def test_only_the_selected_mpi_ranks_record(recorder_library, tmp_path, spec, rank, records):
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")}
    env["MNEME_RECORD_DIR"] = str(tmp_path)
    if spec is not None:
        env["MNEME_RECORD_RANKS"] = spec
    if rank is not None:
        env["OMPI_COMM_WORLD_RANK"] = rank
    proc = subprocess.run([sys.executable, "-c", RANK_PROBE, str(recorder_library)], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert int(proc.stdout) == records


def test_recorder_status_says_whether_and_how_it_is_built(monkeypatch, tmp_path):
    from mneme_cuda import recorder

    monkeypatch.setenv("MNEME_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MNEME_CUDA_RECORDER", raising=False)
    packaged = recorder.packaged_library()
    if packaged is not None:  # the package's build (scikit-build-core) made it: status names that file
        assert recorder.status() == (True, f"built: {packaged}")
    monkeypatch.setattr(recorder, "packaged_library", lambda: None)  # as a package build without cuda.h leaves it
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
    manifest = {"format": "mneme-cuda-raw", "version": 1, "kernel": "saxpy", "pid": 1234, "sequence": seq,
                "occurrence": seq, "instance_key": f"{seq:016x}", "grid": [128, 1, 1], "block": [256, 1, 1], "shared_mem": 0,
                "va_base": 0x153940000000, "va_size": 1 << 40, "args": args.hex(), "params": params,
                "regions": [[addr, len(data)] for addr, data in regions_before]}  # fmt: skip
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
    _raw_launch(raw, 0, args, [(base, x.tobytes()), (base + (2 << 20), y0.tobytes())],
                [(base, x.tobytes()), (base + (2 << 20), y1.tobytes())], params)  # fmt: skip
    (raw / "launch-1234-000001.tmp").mkdir()  # an interrupted launch: ignored
    counts = {"format": "mneme-cuda-counts", "version": 1, "kernels": {"saxpy": {"seen": 9, "instances": {
        f"{0:016x}": 7, f"{5:016x}": 2}}}}  # fmt: skip
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


def test_the_cuda_backend_names_its_devices_timers_without_opening_one():
    from mneme_cuda.backend import CudaBackend, CudaDevice

    assert CudaBackend.timers == CudaDevice.timers == ("auto", "cupti", "events")
