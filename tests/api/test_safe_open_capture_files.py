"""A capture description reads files from its own folder only (issue 36): an absolute path, ``../`` or a
link leading out is refused naming the field, unless ``mneme capture --allow-files-outside``."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from mneme.capture_spec import read_description
from mneme.core.errors import FormatError
from paths import ROOT

CLI = [sys.executable, "-m", "mneme"]
SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "home" / "secret.bin"
    path.parent.mkdir()
    np.arange(64, dtype=np.float32).tofile(path)
    return path


def _spec(folder, path_text: str):
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.yaml"
    shutil.copyfile(SAXPY_IR, folder / "saxpy.ll")  # a description's IR lies in its folder, like its files
    spec.write_text(
        f"ir: saxpy.ll\nkernel: saxpy\ngrid: 1\nblock: 64\nargs:\n  - 64\n  - 2.0\n"
        f"  - {{file: {{path: '{path_text}', dtype: float32}}}}\n  - {{zeros: {{shape: [64]}}}}\n"
    )
    return spec


@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_a_file_input_outside_the_description_folder_is_refused_naming_the_field(tmp_path, secret, how):
    folder = tmp_path / "shared" / "spec"
    folder.mkdir(parents=True)
    if how == "absolute":
        text = str(secret)
    elif how == "dotdot":
        text = "../../home/secret.bin"
    else:
        (folder / "data.bin").symlink_to(secret)
        text = "data.bin"
    with pytest.raises(FormatError, match=r"args\[2\].file.path.*outside the description's folder"):
        read_description(_spec(folder, text))


def test_allow_files_outside_reads_the_file(tmp_path, secret):
    launch = read_description(_spec(tmp_path / "spec", str(secret)), allow_files_outside=True)
    assert launch["args"][2].tolist() == list(range(64))


def test_a_file_beside_the_description_is_read(tmp_path):
    folder = tmp_path / "spec"
    folder.mkdir()
    np.full(64, 3.0, np.float32).tofile(folder / "x.bin")
    launch = read_description(_spec(folder, "x.bin"))
    assert launch["args"][2].tolist() == [3.0] * 64


def test_mneme_capture_refuses_an_outside_file_with_exit_2_and_allow_files_outside_captures(tmp_path, secret):
    spec = _spec(tmp_path / "spec", str(secret))
    out = tmp_path / "out"
    proc = subprocess.run(
        [*CLI, "capture", str(spec), "-o", str(out), "--backend", "host"], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 2, proc.stderr
    assert "--allow-files-outside" in proc.stderr and not out.exists()
    proc = subprocess.run(
        [*CLI, "capture", str(spec), "-o", str(out), "--backend", "host", "--allow-files-outside"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(out.glob("*.json"))
