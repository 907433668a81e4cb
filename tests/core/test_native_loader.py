"""mneme.core.native_loader: every native library opens lazily, is checked, and fails one way, naming itself.

The failure paths use a small library built here with the system C compiler; the real libraries
(the snapshot reader, the host runtime) load through the same loader with their prototypes declared.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from mneme.core.errors import MnemeError
from mneme.core.native import c_compiler
from mneme.core.native_loader import Abi, NativeLibraryError, NativeLoader

needs_cc = pytest.mark.skipif(c_compiler() is None, reason="no C compiler to build the test's library")

REMEDY = "rebuild it with `make fake`"
FAKE_C = """
#include <stdint.h>
int fake_abi(void) { return ABI; }
uint64_t fake_big(void) { return 0x123456789abcull; }
double fake_half(double x) { return x / 2; }
"""


def build_fake(tmp_path: Path, abi: int = 4, name: str = "libfake.so") -> Path:
    source, out = tmp_path / "fake.c", tmp_path / name
    source.write_text(FAKE_C)
    subprocess.run(
        [*c_compiler().split(), "-shared", "-fPIC", f"-DABI={abi}", "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return out


PROTOTYPES = {"fake_big": (ctypes.c_uint64, []), "fake_half": (ctypes.c_double, [ctypes.c_double])}


def loader(locate, prototypes=PROTOTYPES, **kw) -> NativeLoader:
    kw.setdefault("abi", Abi("fake_abi", 4))
    return NativeLoader("the fake library", locate, prototypes, remedy=REMEDY, **kw)


def assert_one_style(error: NativeLibraryError, path: object, failure: str) -> None:
    """The one failure style: a MnemeError naming the library, its path, what failed and what to do."""
    assert isinstance(error, MnemeError)
    text = str(error)
    assert text.startswith(f"the fake library ({path if path is not None else 'no file'}): ")
    assert failure in text and text.endswith(f"; {REMEDY}")
    assert error.library == "the fake library" and error.remedy == REMEDY


@needs_cc
def test_a_good_library_loads_once_with_its_prototypes_declared(tmp_path):
    path = build_fake(tmp_path)
    calls = []
    fake = loader(lambda: calls.append(1) or path)
    assert not calls and not fake.loaded()  # nothing is opened before the first use
    lib = fake.load()
    assert lib.fake_big() == 0x123456789ABC  # a 64-bit result, not ctypes' default int
    assert lib.fake_half(3.0) == 1.5  # a double argument and result, declared
    assert fake.load() is lib and calls == [1]


def test_a_library_that_is_not_found_names_itself_and_what_to_do():
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: None).load()
    assert_one_style(info.value, None, "not found")


def test_a_missing_file_names_its_path(tmp_path):
    missing = tmp_path / "libgone.so"
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: missing).load()
    assert_one_style(info.value, missing, "the file does not exist")


def test_a_library_that_cannot_be_built_says_why(tmp_path):
    def locate():
        raise MnemeError("cannot build the fake library: no C compiler; install gcc or set CC")

    with pytest.raises(NativeLibraryError) as info:
        loader(locate).load()
    assert_one_style(info.value, None, "no C compiler; install gcc")


def test_a_file_the_dynamic_loader_refuses_is_named(tmp_path):
    junk = tmp_path / "libjunk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: junk).load()
    assert_one_style(info.value, junk, "the dynamic loader refused it")


@needs_cc
def test_an_abi_mismatch_is_refused_with_both_numbers(tmp_path):
    path = build_fake(tmp_path, abi=3)
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: path).load()
    assert_one_style(info.value, path, "its ABI is 3, this Mneme needs 4")


@needs_cc
def test_a_library_without_the_abi_function_is_refused(tmp_path):
    path = build_fake(tmp_path)
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: path, abi=Abi("other_abi", 4)).load()
    assert_one_style(info.value, path, "it has no ABI function other_abi")


@needs_cc
def test_a_missing_function_is_named(tmp_path):
    path = build_fake(tmp_path)
    with pytest.raises(NativeLibraryError) as info:
        loader(lambda: path, {**PROTOTYPES, "fake_quarter": (ctypes.c_double, [ctypes.c_double])}).load()
    assert_one_style(info.value, path, "it has no function fake_quarter")


@needs_cc
def test_a_version_check_refuses_with_its_own_reason(tmp_path):
    path = build_fake(tmp_path)
    check = loader(lambda: path, abi=None, version=lambda lib: f"it is version {lib.fake_abi()}, 5 is needed")
    with pytest.raises(NativeLibraryError) as info:
        check.load()
    assert_one_style(info.value, path, "it is version 4, 5 is needed")
    missing = loader(lambda: path, abi=None, version=lambda lib: lib.fake_version())
    with pytest.raises(NativeLibraryError) as info:
        missing.load()
    assert_one_style(info.value, path, "it has no version function")


@needs_cc
def test_a_failure_is_remembered_until_forgotten(tmp_path):
    calls = []
    path = tmp_path / "libfake.so"
    fake = loader(lambda: calls.append(1) or path)
    for _ in range(2):
        lib, why = fake.try_load()
        assert lib is None and "the file does not exist" in why
    assert calls == [1]  # not looked for again in this process
    build_fake(tmp_path)
    fake.forget()
    assert fake.load().fake_half(1.0) == 0.5 and calls == [1, 1]


def test_the_snapshot_reader_loads_through_the_loader():
    from mneme.core.snapshot import snapio

    if snapio.library_path() is None and (c_compiler() is None or not snapio.xxhash_include()):
        pytest.skip("the native snapshot reader is not built and cannot be here (needs a C compiler and xxhash.h)")
    lib = snapio.LOADER.load()
    assert lib.snapio_abi() == snapio.ABI and lib.snapio_create.restype is ctypes.c_void_p
    pool = lib.snapio_create(2)
    assert pool
    lib.snapio_destroy(pool)


@needs_cc
def test_the_host_runtime_loads_through_the_loader():
    from mneme.plugins.backends.host import runtime

    lib = runtime.load()
    assert lib is runtime.LOADER.load() and lib.mneme_grid_capacity.restype is ctypes.c_uint64
    why = ctypes.create_string_buffer(256)
    assert lib.mneme_grid_capacity(why, len(why)) > 0


@needs_cc
def test_a_loaded_library_is_returned_even_while_the_loaders_lock_is_held(tmp_path):
    # A sandbox process forked while another thread held the lock inherits it held, and calls load().
    path = build_fake(tmp_path)
    fake = loader(lambda: path)
    lib = fake.load()
    with fake._lock:
        assert fake.load() is lib
