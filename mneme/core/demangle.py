"""C++ symbol names as people read them, demangled in-process by the C++ runtime's `__cxa_demangle`."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _cxa_demangle():
    for name in (ctypes.util.find_library("stdc++"), "libstdc++.so.6", "libc++.so.1"):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The C++ demangled form of a symbol name; the name itself when it is not mangled (or cannot be read)."""
    fn = _cxa_demangle()
    if fn is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int()
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))
