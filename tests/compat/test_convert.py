"""`mneme.convert` writes Proteus's tuned-kernel JSON as the current original release does."""

from __future__ import annotations

import json
import shutil
import subprocess
import pytest

from mneme.compat.convert import kernel_location, proteus_codegen_method
from mneme.convert import convert_to_json
from mneme.mneme_types import ExperimentConfiguration, dim3
from mneme.recorded_execution import RecordedExecution

from .original_layouts import write_recording

SOURCE = """\
void saxpy(int n, float a, const float *x, float *y)
{
    for (int i = 0; i < n; ++i)
        y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture
def debug_bitcode(tmp_path):
    """saxpy built with clang-19 -g into bitcode, as the current recorder stores modules."""
    clang = shutil.which("clang-19")
    if clang is None:
        pytest.skip("clang-19 is not installed")
    (tmp_path / "saxpy.c").write_text(SOURCE)
    target = tmp_path / "RecordedIR_1.bc"
    subprocess.run([clang, "-g", "-O1", "-c", "-emit-llvm", "saxpy.c", "-o", str(target)], cwd=tmp_path, check=True)
    return target


def test_the_kernel_location_comes_from_the_bitcode_debug_info(debug_bitcode, tmp_path):
    assert kernel_location([str(debug_bitcode)], "saxpy") == ((tmp_path / "saxpy.c").resolve(), 1)
    assert kernel_location([str(debug_bitcode)], "other") is None


def test_codegen_is_proteus_own_setting_not_the_configuration(debug_bitcode, tmp_path, capsys, monkeypatch):
    db, _ = write_recording(tmp_path / "recording", "diff")
    rec = RecordedExecution.from_json(str(db))
    inst = rec["1111111111111111111"]
    rec.llvm_files = [str(debug_bitcode)]  # the same kernel, built with debug info
    config = ExperimentConfiguration(
        grid=dim3(64), block=dim3(256), passes="default<O2>", codegen_opt=2, set_launch_bounds=True, max_threads=256
    )
    monkeypatch.delenv("PROTEUS_CODEGEN", raising=False)
    data = convert_to_json(str(tmp_path / "tuned.json"), rec, inst, config)
    assert json.loads((tmp_path / "tuned.json").read_text()) == data
    entry = data["saxpy"]
    assert entry["CodeGen"] == "rtc"  # Proteus's default, whatever the configuration's codegen_method says
    assert (entry["Pipeline"], entry["CodeGenOptLevel"], entry["LaunchBounds"], entry["TunedMaxThreads"]) == (
        "default<O2>",
        2,
        True,
        256,
    )
    out = capsys.readouterr().out
    assert 'annotate("jit", 1,2)' in out and f"{(tmp_path / 'saxpy.c').resolve()}:1" in out
    monkeypatch.setenv("PROTEUS_CODEGEN", "serial")
    assert proteus_codegen_method() == "serial"
    assert convert_to_json(str(tmp_path / "tuned.json"), rec, inst, config)["saxpy"]["CodeGen"] == "serial"
