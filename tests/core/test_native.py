"""mneme.core.native: every native library is named by its sources, found in one order, built atomically."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from mneme.core import native
from mneme.core.errors import MnemeError
from mneme.core.native import NativeLibrary, c_compiler

needs_cc = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")


def _sources(tmp_path: Path) -> tuple[Path, Path]:
    source, header = tmp_path / "answer.c", tmp_path / "answer.h"
    header.write_text("#define ANSWER 42\n")
    source.write_text('#include "answer.h"\nint answer(void) { return ANSWER; }\n')
    return source, header


def _compile(cc: str, include: Path):
    return lambda sources, out: [*cc.split(), "-shared", "-fPIC", f"-I{include}", "-o", out, *sources]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_SEARCH", [])
    return tmp_path / "cache"


def test_the_name_changes_with_any_source_header_or_flag_and_only_then(tmp_path):
    source, header = _sources(tmp_path)
    lib = NativeLibrary("answer", "the answer", (source,), (header,), ("-O2",))
    name = lib.name()
    assert name.startswith("libanswer-") and name.endswith(".so")
    assert NativeLibrary("answer", "the answer", (source,), (header,), ("-O2",)).name() == name
    assert NativeLibrary("answer", "the answer", (source,), (header,), ("-O3",)).name() != name
    header.write_text("#define ANSWER 43\n")
    assert lib.name() != name


@needs_cc
def test_a_library_is_built_once_into_the_cache_and_found_there(tmp_path, cache):
    source, header = _sources(tmp_path)
    lib = NativeLibrary("answer", "the answer", (source,), (header,), cache="answers")
    assert lib.find() is None
    built = lib.build(_compile(c_compiler(), tmp_path))
    assert built == cache / "answers" / lib.name() and lib.find() == built
    assert ctypes.CDLL(str(built)).answer() == 42
    stamp = built.stat().st_mtime_ns
    assert lib.build(_compile(c_compiler(), tmp_path)) == built and built.stat().st_mtime_ns == stamp


@needs_cc
def test_a_failed_build_names_the_library_and_leaves_nothing(tmp_path, cache):
    source, header = _sources(tmp_path)
    source.write_text("this is not C\n")
    lib = NativeLibrary("answer", "the answer library", (source,), (header,))
    with pytest.raises(MnemeError, match="could not compile the answer library"):
        lib.build(_compile(c_compiler(), tmp_path))
    assert not lib.build_dir().exists() or not list(lib.build_dir().iterdir())


def test_libraries_are_found_by_variable_then_package_then_cache_then_declared_folders(tmp_path, cache, monkeypatch):
    source, header = _sources(tmp_path)
    packaged = tmp_path / "package" / "libanswer.so"
    lib = NativeLibrary("answer", "the answer", (source,), (header,), env="ANSWER_LIB", packaged=lambda: packaged)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / lib.name()).write_bytes(b"")
    assert lib.find() is None  # not declared yet
    native.add_search_folder(prepared)
    assert lib.find() == prepared / lib.name()
    lib.build_dir().mkdir(parents=True)
    (lib.build_dir() / lib.name()).write_bytes(b"")
    assert lib.find() == lib.build_dir() / lib.name()
    packaged.parent.mkdir()
    packaged.write_bytes(b"")
    assert lib.find() == packaged  # the package's build, newer than the sources
    past = source.stat().st_mtime - 60
    os.utime(packaged, (past, past))  # an edited checkout: the package's build is stale
    assert lib.find() == lib.build_dir() / lib.name()
    monkeypatch.setenv("ANSWER_LIB", str(tmp_path / "missing.so"))
    assert lib.find() is None  # as named: a missing one is not replaced by another


def test_an_installed_package_uses_its_build_whatever_the_times_pip_gave_its_headers(tmp_path, cache):
    # A wheel installs the library and the headers it was built from, each stamped with the moment pip
    # wrote it; without the sources there is nothing to rebuild, so a header written after the library
    # must not make the package's build look stale (it did, on the GPU machine: `mneme record` failed).
    source, header = _sources(tmp_path)
    source.unlink()
    packaged = tmp_path / "package" / "libanswer.so"
    packaged.parent.mkdir()
    packaged.write_bytes(b"")
    past = header.stat().st_mtime - 60
    os.utime(packaged, (past, past))
    lib = NativeLibrary("answer", "the answer", (source,), (header,), packaged=lambda: packaged)
    assert lib.find() == packaged


def test_without_its_sources_a_library_cannot_be_built_and_says_so(tmp_path, cache):
    lib = NativeLibrary("answer", "the answer", (tmp_path / "gone.c",))
    assert lib.find() is None
    with pytest.raises(MnemeError, match=r"cannot build the answer: its source .*gone\.c is not installed"):
        lib.build(lambda sources, out: ["true"])


def test_the_core_ships_the_native_sources_every_backend_compiles():
    dirs = native.source_dirs()
    assert {"snapshot_writer.cpp", "snapshot_writer.h", "snapio.c"} <= {p.name for p in dirs["snapshot"].iterdir()}
    assert (dirs["recorder"] / "engine.h").exists()
    included = [
        line.split('"')[1]
        for line in (dirs["recorder"] / "engine.h").read_text().splitlines()
        if line.startswith("#include")
    ]
    assert included and all((dirs["recorder"] / name).exists() for name in included)


@pytest.mark.skipif(native.cxx_compiler() is None, reason="no C++ compiler")
@pytest.mark.parametrize("header", sorted(p.name for p in native.RECORDER_SOURCES.glob("*.h")))
def test_each_header_of_the_recorder_engine_compiles_on_its_own(tmp_path, header):
    unit = tmp_path / "unit.cpp"
    unit.write_text(f'#include "{header}"\n')
    include = [f"-I{native.RECORDER_SOURCES}", f"-I{native.SNAPSHOT_SOURCES}"]
    proc = subprocess.run(
        [*native.cxx_compiler().split(), "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", *include, str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
