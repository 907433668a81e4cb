"""Libraries preloaded into applications (the recorders) load on glibc 2.28 and newer (manylinux_2_28)
and bring their own C++ runtime: no libstdc++.so or libgcc_s needed, no glibc symbol version above
2.28, none of the static runtime's symbols exported (docs/design/native.md).

Read from the built library's dynamic section and version needs (readelf), for both builds: the one
`mneme_cuda.recorder.build` makes on first use and the package's (CMake, in the wheel).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mneme.core.native import PRELOAD_COMPAT, PRELOAD_LINK, cxx_compiler

needs_tools = pytest.mark.skipif(
    shutil.which("readelf") is None or cxx_compiler() is None, reason="needs readelf and a C++ compiler"
)
MANYLINUX = (2, 28)
# The static C++ runtime's names, which a preloaded library must not export (they would interpose on
# the application's own runtime).
RUNTIME_SYMBOL = re.compile(r"^(_ZSt|_ZNSt|_ZN9__gnu_cxx|_ZN10__cxxabiv|__cxa_|__gxx_|_Znw|_Zna|_Zdl|_Zda|_Unwind_)")


def portability(library: Path) -> dict:
    """NEEDED libraries, the glibc versions needed, and the runtime symbols exported."""
    dynamic = subprocess.run(["readelf", "-dW", str(library)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    versions = subprocess.run(["readelf", "-VW", str(library)], capture_output=True, text=True, check=True).stdout
    needs = versions.split("Version needs section", 1)[1] if "Version needs section" in versions else ""
    glibc = sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(r"Name: GLIBC_([0-9.]+)", needs)})
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    exported = [line.split()[-1] for line in symbols if line.strip()]
    return {"needed": needed, "glibc": glibc, "runtime_exported": [s for s in exported if RUNTIME_SYMBOL.match(s)]}


def assert_portable(library: Path) -> None:
    found = portability(library)
    assert not [n for n in found["needed"] if n.startswith(("libstdc++", "libgcc_s"))], found["needed"]
    assert found["glibc"] and max(found["glibc"]) <= MANYLINUX, f"{library.name} needs glibc {found['glibc'][-1]}"
    assert found["runtime_exported"] == []


_PROBE = r"""
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

extern "C" __attribute__((visibility("default"))) int probe(void) {
    int score = 0;
    try {  // the unwinder finds this library's frames (_dl_find_object)
        throw std::runtime_error("x");
    } catch (const std::runtime_error &) {
        score += 1;
    }
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::thread t([&] { std::lock_guard<std::mutex> lock(m); done = true; cv.notify_all(); });
    {
        std::unique_lock<std::mutex> lock(m);  // a steady-clock wait (pthread_cond_clockwait)
        if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; })) score += 2;
    }
    t.join();
    std::unique_lock<std::mutex> lock(m);
    auto start = std::chrono::steady_clock::now();
    cv.wait_for(lock, std::chrono::milliseconds(50));  // times out, not at once nor never
    if (std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(45)) score += 4;
    std::random_device device;  // arc4random
    unsigned a = device(), b = device(), c = device();
    if (a != b || b != c) score += 8;
    return score;
}
"""


@needs_tools
def test_a_library_built_the_preloaded_way_is_portable_and_its_runtime_works(tmp_path):
    source = tmp_path / "probe.cpp"
    source.write_text(_PROBE)
    library = tmp_path / "libprobe.so"
    exports = tmp_path / "exports.map"  # as each recorder names its exports
    exports.write_text("{ global: probe; local: *; };\n")
    command = [
        *cxx_compiler().split(),
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        str(source),
        str(PRELOAD_COMPAT),
        "-o",
        str(library),
        *PRELOAD_LINK,
        f"-Wl,--version-script={exports}",
    ]
    subprocess.run(command, check=True, capture_output=True)
    assert_portable(library)
    assert ctypes.CDLL(str(library)).probe() == 15


@needs_tools
def test_without_the_compat_layer_the_check_sees_newer_glibc_and_the_shared_runtime(tmp_path):
    # The check itself: the same library built the default way fails it (on a glibc newer than 2.28).
    source = tmp_path / "probe.cpp"
    source.write_text(_PROBE)
    library = tmp_path / "libplain.so"
    subprocess.run(
        [*cxx_compiler().split(), "-std=c++17", "-O2", "-fPIC", "-shared", str(source), "-o", str(library)],
        check=True,
        capture_output=True,
    )
    found = portability(library)
    assert any(n.startswith("libstdc++") for n in found["needed"])
    if _glibc() > MANYLINUX:
        with pytest.raises(AssertionError):
            assert_portable(library)


def _glibc() -> tuple[int, ...]:
    return tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])


@needs_tools
def test_the_cuda_recorder_built_on_first_use_is_portable(tmp_path):
    recorder = pytest.importorskip("mneme_cuda.recorder")
    from mneme.core.errors import MnemeError

    try:
        library = recorder.build(tmp_path)
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")
    assert_portable(library)


@needs_tools
def test_the_cuda_recorder_of_the_package_build_is_portable():
    recorder = pytest.importorskip("mneme_cuda.recorder")
    library = recorder.packaged_library()
    if library is None:
        pytest.skip("mneme-cuda was installed without its recorder (no CUDA headers at its build)")
    assert_portable(library)
