"""Tolerance annotations from Python: how a device buffer is verified when its kernel is replayed.

    from mneme.annotate import annotate
    out = torch.empty(n, device="cuda")
    annotate(out, "f32", 1e-5, relative=True, tag="output")

Under Mneme's CUDA recorder (`mneme record -- python app.py`) the policy is attached to the
device allocation that holds the buffer and written as that region's verification policy
(`RegionPolicy`) in the snapshots of every launch recorded afterwards. Without the recorder
the call does nothing and returns False, so applications can leave it in. The C/C++ twin is
`backends/cuda/recorder/include/mneme_annotate.h`; docs/design/recording.md explains both.
"""

from __future__ import annotations

import ctypes
import functools
import math

__all__ = ["annotate", "recorder_loaded"]

SYMBOL = "mneme_recorder_annotate"

# As in mneme.core.snapshot.format (not imported: an application pays for this module only).
DTYPES = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64")
NORMS = ("none", "L1", "L2", "Linf")

# Spellings of numpy, torch and CuPy element types, mapped to the snapshot format's names.
_DTYPE_ALIASES = {
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "float16": "f16",
    "half": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float": "f32",
    "float64": "f64",
    "double": "f64",
}


@functools.lru_cache(maxsize=1)
def _process_symbols() -> ctypes.CDLL:
    return ctypes.CDLL(None)  # the process's global scope, where LD_PRELOAD puts the recorder


def _recorder_function():
    """The recorder's exported annotate function when this process has the recorder loaded, else None."""
    try:
        fn = getattr(_process_symbols(), SYMBOL)
    except (AttributeError, OSError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]
    return fn


def recorder_loaded() -> bool:
    """Whether this process runs under Mneme's CUDA recorder."""
    return _recorder_function() is not None


def _dtype_name(dtype) -> str:
    text = str(dtype)
    for prefix in ("torch.", "dtype(", "<class 'numpy."):
        text = text.removeprefix(prefix)
    text = text.rstrip("')>")
    text = _DTYPE_ALIASES.get(text, text)
    if text not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return text


def _address(buffer) -> int:
    """The device address of an int, a torch tensor (`data_ptr()`) or a CUDA array (`__cuda_array_interface__`)."""
    if isinstance(buffer, bool):
        raise TypeError("annotate() needs a device address, a tensor or a CUDA array, not a bool")
    if isinstance(buffer, int):
        return buffer
    data_ptr = getattr(buffer, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    interface = getattr(buffer, "__cuda_array_interface__", None)
    if isinstance(interface, dict) and "data" in interface:
        return int(interface["data"][0])
    raise TypeError(
        f"annotate() needs a device address (int), an object with data_ptr() or one with "
        f"__cuda_array_interface__; got {type(buffer).__name__}"
    )


def annotate(buffer, dtype, threshold: float, relative: bool = False, norm: str = "none", tag: str = "") -> bool:
    """Declare how the device allocation holding `buffer` is verified on replay.

    `buffer`: an int address, a torch tensor, or any object with `__cuda_array_interface__`
    (CuPy, Numba). `dtype`: one of u8..u64, i8..i64, f16, bf16, f32, f64 (numpy/torch names
    such as "float32" or torch.float32 are accepted). `threshold`: finite, >= 0; absolute, or
    relative to |expected| with `relative=True`. `norm`: "none" (every element), "L1", "L2" or
    "Linf" (the norm of the error vector). `tag`: free text naming the buffer.

    Returns True when the recorder attached the policy, False when no recorder is loaded (a
    no-op) or when the address lies in no allocation the recorder placed (it says so on stderr).
    Raises ValueError/TypeError on invalid arguments, with or without the recorder.
    """
    name = _dtype_name(dtype)
    norm_name = next((n for n in NORMS if n.lower() == str(norm).lower()), None)
    if norm_name is None:
        raise ValueError(f"unknown norm {norm!r}; use one of {', '.join(NORMS)}")
    threshold = float(threshold)
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
    addr = _address(buffer)
    fn = _recorder_function()
    if fn is None:
        return False
    result = fn(addr, name.encode(), threshold, 1 if relative else 0, norm_name.encode(), str(tag).encode())
    return result == 1
