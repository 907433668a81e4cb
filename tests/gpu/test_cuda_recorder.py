"""The native recorder on a real GPU: an nvcc-built application (static cudart) recorded and replayed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from gpu_corpus import ROOT, cuda_ir

pytestmark = pytest.mark.gpu

VA_BASE = 0x153940000000


@pytest.fixture(scope="module")
def recorder_library(tmp_path_factory):
    from mneme_cuda import recorder

    from mneme.core.errors import MnemeError

    prebuilt = ROOT / ".gpu" / "lib" / recorder.LIBRARY
    if prebuilt.exists():
        return prebuilt
    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def saxpy_app(tmp_path_factory):
    prebuilt = ROOT / ".gpu" / "bin" / "saxpy_app"
    if prebuilt.exists():
        return prebuilt
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc not found and no prebuilt saxpy_app in .gpu/bin")
    out = tmp_path_factory.mktemp("app") / "saxpy_app"
    source = Path(__file__).parent / "programs" / "saxpy_app.cu"
    subprocess.run([nvcc, "-arch=sm_90", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


def test_application_runs_unchanged_with_its_allocations_at_the_fixed_base(recorder_library, saxpy_app, tmp_path):
    from mneme_cuda import recorder

    env = recorder.environment(tmp_path / "raw", kernel="saxpy", library=recorder_library)
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    words = proc.stdout.split()
    assert words[:2] == ["saxpy_app", "OK"], proc.stdout
    pointers = [int(w, 16) for w in words[2:4]]
    assert all(VA_BASE <= p < VA_BASE + (1 << 40) for p in pointers), proc.stdout
    assert len(recorder.launches(tmp_path / "raw")) == 3  # three launches, three argument sets


def test_without_a_selected_kernel_nothing_is_written_and_the_result_is_the_same(recorder_library, saxpy_app,
                                                                                 tmp_path):  # fmt: skip
    from mneme_cuda import recorder

    env = recorder.environment(tmp_path / "raw", kernel="^no_such_kernel$", library=recorder_library)
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "saxpy_app OK" in proc.stdout, proc.stderr
    assert recorder.launches(tmp_path / "raw") == []


def test_every_recorded_launch_replays_verified_at_the_recorded_addresses(recorder_library, saxpy_app, tmp_path):
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    code = recorder.main_record(tmp_path / "db", [str(saxpy_app)], [cuda_ir("saxpy")], kernel="saxpy",
                                library=recorder_library)  # fmt: skip
    assert code == 0
    (db,) = (tmp_path / "db").glob("*.json")
    rec = RecordedExecution.from_json(db)
    assert rec.va_addr == VA_BASE and len(rec.kernel_instances) == 3
    for dynamic_hash in rec.kernel_instances:
        with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=2) as ex:
            result = ex.execute(ex.default_config())
        assert result.ok, result.error
