"""The original's documented CMake integration: `find_package(mneme)` + `add_mneme(<target>)`, and `mneme config`.

Real CMake projects are configured and built: a host C/C++ project whose compilers are
`$(mneme config cc|cxx)` and whose target `add_mneme` instruments, and a CUDA project (where
nvcc is present) whose executable then carries the `.mneme_ir` section mneme-cc embeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from skips import needs

from mneme.core.elf import ElfFile
from mneme.instrument.section import SECTION_NAME, read_entries
from .conftest import run_mneme

pytestmark = needs("cmake", "clang-19")

KERNEL = """__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
int main() { return 0; }
"""


def config(key: str) -> str:
    done = run_mneme("config", key)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()  # one value, one line
    return line


def cmake(source: Path, build: Path, *args: str, env: dict | None = None) -> None:
    env = dict(os.environ, **(env or {}))
    done = subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.parametrize("key", ["cc", "cxx", "launcher"])
def test_config_prints_one_executable_that_runs_a_compiler_through_mneme_cc(key, tmp_path):
    path = config(key)
    assert " " not in path and os.access(path, os.X_OK)
    assert "mneme.instrument.launcher" in Path(path).read_text()
    (tmp_path / "t.c").write_text("int answer(void) { return 42; }\n")
    compiler = [path] if key != "launcher" else [path, "clang-19"]
    done = subprocess.run(
        [*compiler, "-c", "t.c", "-o", "via.o"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    plain = "clang-19" if key != "cxx" else "clang++-19"
    subprocess.run([plain, "-c", "t.c", "-o", "plain.o"], cwd=tmp_path, check=True, timeout=300)
    # host code through mneme-cc: the compiler's own object, byte for byte
    assert (tmp_path / "via.o").read_bytes() == (tmp_path / "plain.o").read_bytes()


def test_cmakedir_holds_the_package_find_package_loads():
    folder = Path(config("cmakedir"))
    assert (folder / "mnemeConfig.cmake").is_file() and (folder / "mnemeConfigVersion.cmake").is_file()


def test_unknown_config_key_is_refused_with_the_known_ones():
    done = run_mneme("config", "no-such-key")
    assert done.returncode == 2 and "cmakedir" in done.stderr


def test_host_project_with_mneme_compilers_and_add_mneme_configures_and_builds(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text("int helper(void);\nint main(void) { return helper() - 3; }\n")
    (src / "helper.cpp").write_text('extern "C" int helper() { return 3; }\n')
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(hostapp LANGUAGES C CXX)\n"
        "find_package(mneme 0.1 REQUIRED)\nadd_executable(hostapp main.c helper.cpp)\nadd_mneme(hostapp)\n"
        'message(STATUS "mneme ${mneme_VERSION}")\n'
    )
    build = tmp_path / "build"
    cmake(src, build, f"-Dmneme_DIR={config('cmakedir')}", env={"CC": config("cc"), "CXX": config("cxx")})
    cache = (build / "CMakeCache.txt").read_text()
    assert f"CMAKE_C_COMPILER:FILEPATH={config('cc')}" in cache
    assert f"CMAKE_CXX_COMPILER:FILEPATH={config('cxx')}" in cache
    commands = json.loads((build / "compile_commands.json").read_text())
    assert len(commands) == 2 and all(c["command"].startswith(config("launcher")) for c in commands)  # add_mneme
    assert subprocess.run([str(build / "hostapp")]).returncode == 0
    # plain host code has no device code: mneme-cc leaves the objects exactly as the compiler made them
    assert not ElfFile.read(build / "hostapp").sections_named(SECTION_NAME)


def test_find_package_refuses_a_newer_major_version_than_installed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES NONE)\nfind_package(mneme 99 REQUIRED)\n"
    )
    done = subprocess.run(
        ["cmake", "-S", str(src), "-B", str(tmp_path / "b"), f"-Dmneme_DIR={config('cmakedir')}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "mneme" in done.stderr


def test_add_mneme_on_a_missing_target_stops_naming_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES C)\n"
        "find_package(mneme REQUIRED)\nadd_mneme(nothing_here)\n"
    )
    done = subprocess.run(
        ["cmake", "-S", str(src), "-B", str(tmp_path / "b"), f"-Dmneme_DIR={config('cmakedir')}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "no target named nothing_here" in done.stderr


def _cuda_project(tmp_path: Path, instrument: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "vecadd.cu").write_text(KERNEL)
    lines = ["cmake_minimum_required(VERSION 3.18)", "project(vecadd LANGUAGES CXX CUDA)"]
    if instrument == "add_mneme":
        lines.append("find_package(mneme REQUIRED)")
    lines += ["add_executable(vecadd vecadd.cu)", "set_target_properties(vecadd PROPERTIES CUDA_ARCHITECTURES 90)"]
    if instrument == "add_mneme":
        lines.append("add_mneme(vecadd)")
    (src / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    return src


def _kernels_in(binary: Path) -> list[str]:
    return [e.arch for e in read_entries(binary)]


@needs("nvcc", "clang++-19")
@pytest.mark.parametrize("instrument", ["add_mneme", "compiler", "launcher"])
def test_cuda_project_binary_carries_the_embedded_ir(instrument, tmp_path):
    src = _cuda_project(tmp_path, instrument)
    nvcc = shutil.which("nvcc")
    args, env = [f"-Dmneme_DIR={config('cmakedir')}"], {}
    if instrument == "add_mneme":
        args.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    elif instrument == "compiler":
        env["CUDACXX"] = config("cuda")  # CMAKE_CUDA_COMPILER from the environment, as CC=$(mneme config cc)
    else:
        args += [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_COMPILER_LAUNCHER={config('launcher')}"]
    cmake(src, tmp_path / "build", *args, env=env)
    assert _kernels_in(tmp_path / "build" / "vecadd") == ["sm_90"]
