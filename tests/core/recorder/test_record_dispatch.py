"""`mneme record` chooses the recorder of the backend that owns the program's GPU API.

Programs are built here: with nvcc (the CUDA runtime linked statically, nvcc's default, and as a
shared library) and with gcc (a program that reaches libamdhip64 only through a library of its own,
found by RUNPATH). Nothing is run under a recorder: the choice is made from the files alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skips import needs

from mneme.core import plugins
from mneme.core.recorder.program import inspect

CUDA_SOURCE = """
__global__ void scale(float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
int main() { float *x; cudaMalloc(&x, 4096); scale<<<4, 256>>>(x, 2.0f, 1024); cudaDeviceSynchronize(); return 0; }
"""


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if os.path.exists(p)), None)


needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="needs nvcc: the CUDA toolkit")


@pytest.fixture(scope="module")
def cuda_programs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cuda_programs")
    (folder / "k.cu").write_text(CUDA_SOURCE)
    built = {}
    for name, flags in {"static": [], "shared": ["-cudart", "shared"]}.items():
        subprocess.run([_nvcc(), "-arch=sm_80", *flags, "k.cu", "-o", name], cwd=folder, check=True)
        built[name] = folder / name
    return built


@pytest.fixture(scope="module")
def hip_program(tmp_path_factory) -> Path:
    """app -> libsolver.so (RUNPATH $ORIGIN/lib) -> libamdhip64.so.5: a dependency of a dependency."""
    folder = tmp_path_factory.mktemp("hip_program")
    lib = folder / "lib"
    lib.mkdir()
    (folder / "hip.c").write_text("int hipInit(unsigned flags) { return (int)flags; }\n")
    (folder / "solver.c").write_text("int hipInit(unsigned);\nint solve(void) { return hipInit(0); }\n")
    (folder / "app.c").write_text("int solve(void);\nint main(void) { return solve(); }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libamdhip64.so.5", "hip.c", "-o", "lib/libamdhip64.so.5"],
        cwd=folder,
        check=True,
    )
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "solver.c",
            "-Llib",
            "-l:libamdhip64.so.5",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib",
            "-o",
            "lib/libsolver.so",
        ],
        cwd=folder,
        check=True,
    )
    subprocess.run(["gcc", "app.c", "-Llib", "-lsolver", "-Wl,-rpath,$ORIGIN/lib", "-o", "app"], cwd=folder, check=True)
    return folder / "app"


def _chosen(command) -> str:
    recorder = plugins.hook().mneme_recorder_for_program(
        program=inspect(command), recorders=plugins.registry("recorder")
    )
    return recorder.name


@needs_nvcc
def test_a_program_with_the_cuda_runtime_linked_statically_is_recorded_by_cuda(cuda_programs):
    program = inspect([str(cuda_programs["static"])])
    assert not program.links(["libcudart"])  # nvcc's default: no CUDA library to see ...
    assert ".nv_fatbin" in program.sections  # ... but the fat binary is there
    assert _chosen([str(cuda_programs["static"])]) == "cuda"


@needs_nvcc
def test_a_program_linking_libcudart_is_recorded_by_cuda_also_behind_a_wrapper(cuda_programs):
    program = inspect(["env", "X=1", str(cuda_programs["shared"]), "--size", "3"])
    assert program.links(["libcudart.so"])
    assert str(cuda_programs["shared"].resolve()) in program.files
    assert _chosen(["env", "X=1", str(cuda_programs["shared"])]) == "cuda"


@needs("gcc")
def test_a_program_reaching_libamdhip64_through_its_own_library_is_recorded_by_hip(hip_program):
    program = inspect([str(hip_program)])
    assert {"libsolver.so", "libamdhip64.so.5"} <= program.libraries
    assert _chosen([str(hip_program)]) == "hip"


def test_a_command_naming_no_elf_file_goes_to_the_highest_priority_recorder(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    assert inspect([str(script)]).files == ()
    assert _chosen([str(script)]) == "cuda"


def _mneme(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme", *args], capture_output=True, text=True, check=False)


@needs("gcc")
def test_another_recorders_option_is_refused_before_the_program_runs(hip_program, tmp_path):
    done = _mneme("record", "-rdb", str(tmp_path / "db"), "--timer", "events", "--", str(hip_program))
    assert done.returncode == 2, done.stderr
    assert "--timer is an option of the cuda recorder" in done.stderr and "hip recorder" in done.stderr
    assert not (tmp_path / "db").exists()


def test_an_unknown_backend_is_refused_with_the_known_ones(tmp_path):
    done = _mneme("record", "-rdb", str(tmp_path / "db"), "--backend", "metal", "--", "true")
    assert done.returncode == 2, done.stderr
    assert "unknown recorder 'metal'; known: cuda, hip" in done.stderr


def test_record_help_shows_every_installed_recorders_options_and_the_hip_alias_only_its_own():
    shown = _mneme("record", "--help").stdout
    assert "--backend NAME" in shown and "--timer" in shown and "--arch" in shown
    alias = _mneme("hip", "record", "--help").stdout
    assert "Alias of `mneme record --backend hip`" in alias
    assert "--arch" in alias and "--timer" not in alias and "--backend NAME" not in alias


def test_a_disabled_backend_plugin_takes_its_recorder_along(tmp_path):
    shown = _mneme("-p", "no:hip", "record", "--help").stdout
    assert "--timer" in shown and "--arch" not in shown
    done = _mneme("-p", "no:hip", "record", "-rdb", str(tmp_path / "db"), "--backend", "hip", "--", "true")
    assert done.returncode == 2 and "unknown recorder 'hip'; known: cuda" in done.stderr


def test_without_any_recorder_record_says_to_install_a_backend(tmp_path):
    done = _mneme("-p", "no:cuda", "-p", "no:hip", "record", "-rdb", str(tmp_path / "db"), "--", "true")
    assert done.returncode == 2, done.stderr
    assert "no recorder is installed" in done.stderr and not (tmp_path / "db").exists()
