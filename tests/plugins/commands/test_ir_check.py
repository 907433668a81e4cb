"""`mneme ir check` and `Backend.check`: which kernels a backend can run, naming what it cannot (issue 28, point 5),
and dead-code elimination before the host backend's support check (cooperative groups)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner
from irbuild import build_cuda_ir, build_hip_ir, cuda_available, hip_available

from mneme import capture
from mneme.core import ir
from mneme.core.backend import get_backend
from mneme.core.cli import cli
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import Snapshot
from paths import DATA

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "realkernels" / "coop_groups.cu"


def check(*args: str):
    result = CliRunner().invoke(cli, ["ir", "check", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _by_kernel(result) -> dict:
    return {k["kernel"]: k for k in json.loads(result.stdout)["kernels"]}


def test_a_cooperative_groups_kernel_runs_on_the_host_and_matches_numpy(tmp_path):
    n, block = 1000, 256
    x = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float32)
    out = np.zeros(-(-n // block), dtype=np.float32)
    db = capture.capture(
        str(build_cuda_ir(SOURCE)), "block_sum", len(out), block, [x, out, n], tmp_path, backend="host"
    )
    rec = RecordedExecution.from_json(db)
    inst = rec.select()
    epilogue = Snapshot.open(inst.epilogue_path, base=Snapshot.open(inst.prologue_path))
    addr = struct.unpack_from("<Q", inst.args, rec.args[1].offset)[0]
    got = np.frombuffer(epilogue.read_region(addr), dtype=np.float32)
    padded = np.concatenate([x, np.zeros(len(out) * block - n, np.float32)]).reshape(len(out), block)
    np.testing.assert_allclose(got, padded.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_check_names_what_the_host_cannot_run_and_every_construct():
    kernels = _by_kernel(check(str(build_cuda_ir(SOURCE)), "--backend", "host", "--json"))
    assert kernels["block_sum"]["runnable"] and kernels["block_sum"]["unsupported"] == []
    assert kernels["warp_redux"]["runnable"]  # redux.sync is emulated exactly
    both = kernels["two_unsupported"]["unsupported"]
    assert len(both) == 2 and any("pmevent" in c for c in both) and any("globaltimer" in c for c in both)
    table = check(str(build_cuda_ir(SOURCE)), "--backend", "host").stdout
    assert "2 of 3 kernels run on the host backend" in table


def test_the_backend_method_agrees_with_its_compile():
    module = ir.load(build_cuda_ir(SOURCE))
    host = get_backend("host")
    assert host.check(module, "block_sum") == []
    assert len(host.check(module, "two_unsupported")) == 2
    from mneme.core import build
    from mneme.core.errors import UnsupportedError
    from mneme.core.types import ExperimentConfiguration

    config = ExperimentConfiguration(grid=(1, 1, 1), block=(32, 1, 1))
    with pytest.raises(UnsupportedError, match=r"pmevent.*globaltimer|globaltimer.*pmevent"):
        build.compile(module, "two_unsupported", config, "x86_64", cache=False)
    assert build.compile(module, "block_sum", config, "x86_64", cache=False).data


def test_gpu_backends_accept_their_own_ir_and_refuse_another_target():
    kernels = _by_kernel(check(str(build_cuda_ir(SOURCE)), "--backend", "cuda", "--json"))
    assert all(k["runnable"] for k in kernels.values()) and len(kernels) == 3
    if hip_available()[0]:
        (saxpy,) = _by_kernel(check(str(build_hip_ir("saxpy")), "--backend", "cuda", "--json")).values()
        assert not saxpy["runnable"] and "amdgcn-amd-amdhsa" in saxpy["unsupported"][0]


def test_check_a_recording_and_one_kernel(tmp_path):
    n = 64
    db = capture.capture(
        str(build_cuda_ir("saxpy")),
        "saxpy",
        1,
        64,
        [n, np.float32(2), np.ones(n, np.float32), np.ones(n, np.float32)],
        tmp_path,
        backend="host",
    )
    data = json.loads(check("-rdb", str(db), "--json").stdout)
    assert data["total"] == 1 and data["runnable"] == 1 and data["kernels"][0]["kernel"] == "saxpy"
    only = _by_kernel(check(str(build_cuda_ir(SOURCE)), "-k", "two_unsupported", "--json"))
    assert list(only) == ["two_unsupported"] and not only["two_unsupported"]["runnable"]
    result = CliRunner().invoke(cli, ["ir", "check", str(build_cuda_ir(SOURCE)), "-k", "nope"])
    assert result.exit_code == 2 and "kernels present: block_sum, warp_redux, two_unsupported" in result.output


@pytest.mark.skipif(shutil.which("llvm-objcopy-19") is None, reason="needs llvm-objcopy-19")
def test_check_reads_the_ir_mneme_cc_embedded_in_a_binary(tmp_path):
    from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, pack_entries

    bitcode = build_cuda_ir(SOURCE, emit="bc").read_bytes()
    entry = EmbeddedEntry(
        source=str(SOURCE),
        arch="sm_90",
        bitcode=bitcode,
        targets=("sm_90",),
        kernels=("block_sum", "warp_redux", "two_unsupported"),
    )
    (tmp_path / "host.cpp").write_text("int f(int x) { return x + 1; }\n")
    subprocess.run(["g++", "-c", "host.cpp", "-o", "host.o"], cwd=tmp_path, check=True)
    (tmp_path / "blob").write_bytes(pack_entries([entry]))
    subprocess.run(["llvm-objcopy-19", "--add-section", f"{SECTION_NAME}=blob", "host.o"], cwd=tmp_path, check=True)
    data = json.loads(check(str(tmp_path / "host.o"), "--json").stdout)
    assert data["total"] == 3 and data["runnable"] == 2


def test_an_unknown_backend_is_refused_naming_the_installed_ones():
    result = CliRunner().invoke(cli, ["ir", "check", str(build_cuda_ir(SOURCE)), "--backend", "tpu"])
    assert result.exit_code == 2 and "no backend 'tpu'; installed backends: cuda, hip, host" in result.output
