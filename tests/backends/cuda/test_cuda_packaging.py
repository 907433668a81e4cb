"""mneme-cuda's package build (scikit-build-core running CMake) builds the native recorder.

A wheel carries the recorder beside the Python plugin, and the installed package finds it with no
build on first use; where the CUDA toolkit's cuda.h or xxhash.h is missing, the package still
installs and says how to build the recorder.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from skips import needs_all
from paths import ROOT

recorder = pytest.importorskip("mneme_cuda.recorder")

PACKAGE = ROOT / "backends" / "cuda"
can_build = needs_all(
    {
        "cmake": shutil.which("cmake") is not None,
        "cuda.h": recorder.cuda_include() is not None,
        "xxhash.h": recorder.xxhash_include() is not None,
    },
    hint="the recorder's build",
)


needs_backend = pytest.mark.skipif(
    importlib.util.find_spec("scikit_build_core") is None, reason="needs scikit-build-core: the test extra"
)


def _wheel(tmp_path: Path, *settings: str) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
        *settings,
        str(PACKAGE),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("mneme_cuda-*.whl")
    return wheel


@can_build
def test_the_installed_package_finds_the_recorder_its_build_made():
    packaged = recorder.packaged_library()
    assert packaged is not None, "pip install of backends/cuda built no recorder (see scripts/setup)"
    assert packaged.parent.name == "lib" and packaged.name == recorder.LIBRARY
    handle = ctypes.CDLL(str(packaged), mode=ctypes.RTLD_LOCAL)
    assert hasattr(handle, "mneme_recorder_annotate")  # the annotation entry point applications call


@needs_backend
@can_build
def test_a_wheel_carries_the_recorder_beside_the_plugin(tmp_path):
    names = zipfile.ZipFile(_wheel(tmp_path)).namelist()
    assert f"mneme_cuda/lib/{recorder.LIBRARY}" in names
    assert {
        "mneme_cuda/plugin.py",
        "mneme_cuda/kernels/compare.ptx",
        "mneme_cuda/kernels/lz4.ptx",
        "mneme_cuda/native/cupti_timer.h",
    } <= set(names)


@needs_backend
def test_without_xxhash_the_wheel_still_builds_with_the_plugin_and_no_recorder(tmp_path):
    wheel = _wheel(tmp_path, "--config-settings=cmake.define.XXHASH_INCLUDE=XXHASH_INCLUDE-NOTFOUND")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mneme_cuda/plugin.py" in names
    assert not any(name.endswith(recorder.LIBRARY) for name in names)
