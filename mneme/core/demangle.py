"""C++ symbol names as people read them, demangled in-process by the C++ runtime's `__cxa_demangle`.

Clang 17 and later write some template arguments with the Itanium ABI's newer `Tn <type>` prefix
(a non-type template parameter's declared type), which older C++ runtimes cannot read. Such names
go, all at once, to LLVM's `llvm-cxxfilt` where one is installed (the LLVM 19 that builds device
IR brings it); a name that neither reads stays as it is.
"""

from __future__ import annotations

import ctypes
import functools
import shutil
import subprocess
from collections.abc import Iterable

from mneme.core.native_loader import NativeLoader

_CXXFILT = ("llvm-cxxfilt-19", "llvm-cxxfilt-20", "llvm-cxxfilt-21", "llvm-cxxfilt-22", "llvm-cxxfilt")
_by_llvm: dict[str, str] = {}  # names the runtime could not read, as llvm-cxxfilt demangled them
_BY_LLVM_MAX = 65536


_DEMANGLE = {
    "__cxa_demangle": (
        ctypes.c_void_p,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)],
    )
}
#: The C++ runtimes whose demangler is used, in order (by soname: the soname is the ABI).
_CXX_RUNTIMES = tuple(
    NativeLoader(
        f"the C++ runtime's demangler ({name})",
        lambda name=name: name,
        _DEMANGLE,
        remedy="names are demangled by llvm-cxxfilt meanwhile; install libstdc++6",
    )
    for name in ("libstdc++.so.6", "libc++.so.1")
)


def _cxa_demangle():
    lib = next((lib for lib in (loader.try_load()[0] for loader in _CXX_RUNTIMES) if lib is not None), None)
    return lib.__cxa_demangle if lib is not None else None


@functools.lru_cache(maxsize=4096)
def _runtime_demangle(name: str) -> str | None:
    fn = _cxa_demangle()
    if fn is None:
        return None
    status = ctypes.c_int()
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


@functools.lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return next((found for name in _CXXFILT if (found := shutil.which(name))), None)


def _llvm_demangle(names: list[str]) -> None:
    """Demangle `names` with one llvm-cxxfilt run into `_by_llvm` (a name it cannot read maps to itself)."""
    tool = _cxxfilt()
    if not names or tool is None:
        _by_llvm.update((n, n) for n in names)
        return
    try:
        done = subprocess.run(
            [tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60, check=False
        )
        lines = done.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        lines = []
    if len(lines) != len(names):
        lines = list(names)
    if len(_by_llvm) + len(names) > _BY_LLVM_MAX:  # names come from files other people made: bounded
        _by_llvm.clear()
    _by_llvm.update(zip(names, lines))


def demangle_all(names: Iterable[str]) -> list[str]:
    """`demangle` of each name, with the names the C++ runtime cannot read sent to llvm-cxxfilt in one run."""
    names = list(names)
    unread = [
        n for n in dict.fromkeys(names) if n.startswith("_Z") and _runtime_demangle(n) is None and n not in _by_llvm
    ]
    _llvm_demangle(unread)
    return [demangle(n) for n in names]


def demangle(name: str) -> str:
    """The C++ demangled form of a symbol name; the name itself when it is not mangled (or cannot be read)."""
    if not name.startswith("_Z"):
        return name
    text = _runtime_demangle(name)
    if text is not None:
        return text
    if name not in _by_llvm:
        _llvm_demangle([name])
    return _by_llvm[name]
