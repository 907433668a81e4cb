"""Mneme's one loader of native libraries: open once, check the version, declare every prototype.

`mneme.core.native` names, finds and builds a library; a `NativeLoader` opens it with ctypes on
first use (never at import), checks that it is the version the Python side was written for, and
declares the return and argument types of every function the Python side calls, so a call never
goes through ctypes' guess (an int). Whatever fails (the library is not found or cannot be built,
the loader refuses it, its ABI or version is another, a function is missing) raises one error,
`NativeLibraryError`, naming the library, its path, what failed and what to do. A caller that has
a fallback (the Python snapshot reader, a backend's plainer timer) catches it and logs its
message. A failure is remembered: the library is not opened again in this process.
docs/design/native.md, "One loader".
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from mneme.core.errors import MnemeError

#: A prototype: (return type, argument types); None returns nothing.
Prototype = tuple[Any, Sequence[Any]]


class NativeLibraryError(MnemeError):
    """A native library cannot be used: the message names it, its path, what failed and what to do."""

    def __init__(self, library: str, path: str | os.PathLike | None, failure: str, remedy: str):
        self.library, self.failure, self.remedy = library, failure, remedy
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{library} ({self.path or 'no file'}): {failure}; {remedy}")


class Abi(NamedTuple):
    """The version a Mneme-built library reports: `symbol()` (no arguments, an int) must return `expected`."""

    symbol: str
    expected: int


#: A version check of a library Mneme does not build: given the opened library, None when it will do,
#: else what is wrong with it (it may raise AttributeError for a missing version function).
VersionCheck = Callable[[ctypes.CDLL], "str | None"]


class NativeLoader:
    """One native library, loaded lazily by `load()` and checked once.

    Parameters
    ----------
    what
        The library in words, as messages name it ("the native snapshot reader").
    locate
        Returns the file to open (a path, or a bare name for the system loader's search) or None when
        there is none; it may build it, and raise a MnemeError saying why it could not.
    prototypes
        name -> (return type, argument types) of every function the Python side calls.
    remedy
        What to do when the library is missing or refused (rebuild it, install a package, set a variable).
    abi, version
        The check of a Mneme-built library (`Abi`) or of another's (`VersionCheck`); at most one.
    mode
        ctypes' dlopen mode (RTLD_GLOBAL where other code must see its symbols).
    after_load
        Run once on the checked library (e.g. make its symbols known to a JIT); a MnemeError it raises
        is a failed load.
    """

    def __init__(
        self,
        what: str,
        locate: Callable[[], str | os.PathLike | None],
        prototypes: Mapping[str, Prototype],
        *,
        remedy: str,
        abi: Abi | None = None,
        version: VersionCheck | None = None,
        mode: int = ctypes.DEFAULT_MODE,
        after_load: Callable[[ctypes.CDLL, str], None] | None = None,
    ):
        if abi is not None and version is not None:
            raise ValueError("a library has an ABI number or a version check, not both")
        self.what, self.remedy = what, remedy
        self._locate, self._prototypes, self._abi, self._version = locate, dict(prototypes), abi, version
        self._mode, self._after_load = mode, after_load
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._error: NativeLibraryError | None = None

    def load(self) -> ctypes.CDLL:
        """The checked library, opened on the first call; NativeLibraryError when it cannot be used."""
        lib = self._lib
        if lib is not None:  # no lock once loaded: a process forked while another thread held it may call this
            return lib
        with self._lock:
            if self._lib is None and self._error is None:
                try:
                    self._lib = self._open()
                except NativeLibraryError as exc:
                    self._error = exc
            if self._error is not None:
                raise self._error
            return self._lib

    def try_load(self) -> tuple[ctypes.CDLL | None, str]:
        """(the library, "") or (None, the error's message): for callers with a fallback."""
        try:
            return self.load(), ""
        except NativeLibraryError as exc:
            return None, str(exc)

    def loaded(self) -> bool:
        """Whether `load()` has succeeded already (nothing is opened to answer)."""
        return self._lib is not None

    def forget(self) -> None:
        """Load afresh at the next `load()` (after the library was rebuilt); the old one stays mapped."""
        with self._lock:
            self._lib, self._error = None, None

    def _fail(self, path: object, failure: str) -> NativeLibraryError:
        return NativeLibraryError(self.what, None if path is None else str(path), failure, self.remedy)

    def _open(self) -> ctypes.CDLL:
        try:
            path = self._locate()
        except NativeLibraryError:
            raise
        except MnemeError as exc:
            raise self._fail(None, str(exc)) from exc
        if path is None:
            raise self._fail(None, "not found")
        path = os.fspath(path)
        if os.sep in path and not Path(path).exists():
            raise self._fail(path, "the file does not exist")
        try:
            lib = ctypes.CDLL(path, mode=self._mode)
        except OSError as exc:
            raise self._fail(path, f"the dynamic loader refused it ({exc})") from exc
        self._check(lib, path)
        for name, (restype, argtypes) in self._prototypes.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise self._fail(path, f"it has no function {name} (another version of the library)") from None
            fn.restype, fn.argtypes = restype, list(argtypes)
        if self._after_load is not None:
            try:
                self._after_load(lib, path)
            except MnemeError as exc:
                raise self._fail(path, str(exc)) from exc
        return lib

    def _check(self, lib: ctypes.CDLL, path: str) -> None:
        if self._abi is not None:
            try:
                probe = getattr(lib, self._abi.symbol)
            except AttributeError:
                raise self._fail(
                    path,
                    f"it has no ABI function {self._abi.symbol} (not this library, or a build "
                    "older than its ABI number)",
                ) from None
            probe.restype, probe.argtypes = ctypes.c_int, []
            got = probe()
            if got != self._abi.expected:
                raise self._fail(
                    path, f"its ABI is {got}, this Mneme needs {self._abi.expected} (a build of other sources)"
                )
        elif self._version is not None:
            try:
                wrong = self._version(lib)
            except AttributeError as exc:
                raise self._fail(path, f"it has no version function ({exc})") from None
            if wrong:
                raise self._fail(path, wrong)
