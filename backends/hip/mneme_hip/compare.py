"""Device-side verification kernels, generated as AMDGPU IR and built by our own toolchain.

No hipcc at run time: the IR below is compiled for the device's gfxNNN by `mneme_hip.codegen`
(LLVM's AMDGPU back end and ld.lld) the first time a device needs it, and cached per
architecture. ``mneme_compare_bytes`` counts the bytes that differ between the expected copy
and the kernel's result and finds the first one: each thread walks a grid-stride loop, then
adds its count (``atomicrmw add``) and its first index (``atomicrmw umin``) to two 64-bit words.
The same IR runs on the host backend, which is how it is tested on machines without an AMD GPU.
A region with a tolerance is compared by the typed kernel of `mneme_hip.tolerance` (`plan`
picks it from the region's policy; `decide` turns its ten result words into a `RegionDiff`).
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np

from mneme.core.backend import COMPARE_WORDS, RegionDiff, compare_policy, compare_verdict
from mneme.core.types import ExperimentConfiguration
from mneme_hip.compare_layout import BLOCK, DATA_LAYOUT

KERNEL = "mneme_compare_bytes"

IR = f"""target datalayout = "{DATA_LAYOUT}"
target triple = "amdgcn-amd-amdhsa"

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

define amdgpu_kernel void @{KERNEL}(ptr addrspace(1) %expected, ptr addrspace(1) %actual, i64 %n,
                                     ptr addrspace(1) %out, i64 %stride) #0 {{
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid64 = zext i32 %tid to i64
  %bid64 = zext i32 %bid to i64
  %base = mul i64 %bid64, {BLOCK}
  %start = add i64 %base, %tid64
  %any = icmp ult i64 %start, %n
  br i1 %any, label %loop, label %exit

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
  %count = phi i64 [ 0, %entry ], [ %count1, %loop ]
  %first = phi i64 [ -1, %entry ], [ %first1, %loop ]
  %pe = getelementptr inbounds i8, ptr addrspace(1) %expected, i64 %i
  %pa = getelementptr inbounds i8, ptr addrspace(1) %actual, i64 %i
  %e = load i8, ptr addrspace(1) %pe, align 1
  %a = load i8, ptr addrspace(1) %pa, align 1
  %differs = icmp ne i8 %e, %a
  %inc = zext i1 %differs to i64
  %count1 = add i64 %count, %inc
  %candidate = select i1 %differs, i64 %i, i64 -1
  %first1 = call i64 @llvm.umin.i64(i64 %first, i64 %candidate)
  %next = add i64 %i, %stride
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done

done:
  %found = icmp ne i64 %count1, 0
  br i1 %found, label %publish, label %exit

publish:
  %first_word = getelementptr inbounds i64, ptr addrspace(1) %out, i64 1
  %old0 = atomicrmw add ptr addrspace(1) %out, i64 %count1 syncscope("agent") monotonic, align 8
  %old1 = atomicrmw umin ptr addrspace(1) %first_word, i64 %first1 syncscope("agent") monotonic, align 8
  br label %exit

exit:
  ret void
}}

declare i64 @llvm.umin.i64(i64, i64)

attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{BLOCK}" }}
"""


# the tolerant kernels' result words (mneme_hip.tolerance); the byte kernel uses the first two
OUT_WORDS = COMPARE_WORDS


def plan(policy: Any) -> tuple[str, float, bool, str]:
    """(kernel key, threshold, relative, norm) for a region's policy; key "bytes" compares exactly.

    A policy is any object with `dtype`, `threshold`, `relative` and `norm` (the snapshot's
    RegionPolicy); None, or an integer dtype with a zero threshold and no norm, is exact.
    """
    from mneme_hip import tolerance

    fields = compare_policy(policy)
    if fields is None:
        return "bytes", 0.0, False, "none"
    dtype, threshold, relative, norm = fields
    if dtype in tolerance.FLOATS or threshold != 0.0 or norm != "none":
        tolerance.itemsize(dtype)  # KeyError only for a dtype RegionPolicy itself refuses
        return dtype, threshold, relative, norm
    return "bytes", 0.0, False, "none"


def pack_tolerant_args(
    expected: int, actual: int, count: int, threshold: float, relative: bool, out: int, stride: int
) -> bytes:
    """The typed kernel's arguments: three pointers/counts, the threshold (f64), the flag (i32, padded), two more."""
    return struct.pack("<QQQdi4xQQ", expected, actual, count, threshold, int(relative), out, stride)


def initial_words() -> np.ndarray:
    """The ten result words of a typed compare before it runs: all zero but 'first' (all ones)."""
    out = np.zeros(OUT_WORDS, dtype=np.uint64)
    out[1] = np.iinfo(np.uint64).max
    return out


def decide(
    actual: int,
    size: int,
    key: str,
    threshold: float,
    relative: bool,
    norm: str,
    words: np.ndarray,
    tail: tuple[int, int] = (0, -1),
) -> RegionDiff:
    """One region's verdict from its kernel's words and its trailing partial element's exact compare.

    `tail` is (differing bytes, first offset or -1) of the bytes after the last whole element,
    which must match exactly, as on the host. With norm "none" every element must be within
    the threshold; with a norm, the norm of the errors (relative: over the expected values'
    norm) must be, and no NaN may face a number.
    """
    from mneme_hip import tolerance

    if key == "bytes":  # the byte kernel's two words; its regions have no partial element
        return compare_verdict(actual, size, key, 1, threshold, relative, norm, words)
    return compare_verdict(actual, size, key, tolerance.itemsize(key), threshold, relative, norm, words, tail)


def pack_args(expected: int, actual: int, size: int, out: int, stride: int) -> bytes:
    """The kernel's argument buffer: three pointers and two 64-bit counts at their kernarg offsets."""
    return struct.pack("<QQQQQ", expected, actual, size, out, stride)


def initial_out() -> np.ndarray:
    """The two result words before the kernel runs: no differing bytes, first index 'none' (all ones)."""
    return np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64)


def grid_for(size: int, compute_units: int, blocks_per_cu: int = 4) -> int:
    """Enough blocks to fill the device, never more than one thread per byte."""
    return max(1, min(compute_units * blocks_per_cu, -(-size // BLOCK)))


def result(words: np.ndarray) -> tuple[int, int]:
    """(differing bytes, offset of the first, -1 when none) from the kernel's two words."""
    count, first = int(words[0]), int(words[1])
    return count, (first if count else -1)


@functools.lru_cache(maxsize=32)
def hsaco(arch: str, key: str = "bytes") -> bytes:
    """A compare kernel's code object for `arch` (key "bytes" or a dtype), built once per process."""
    from mneme.core import ir
    from mneme_hip import codegen, tolerance

    source, name = (IR, KERNEL) if key == "bytes" else (tolerance.ir(key), tolerance.kernel_name(key))
    module = ir.load(source)
    binary = codegen.codegen(module, name, ExperimentConfiguration(grid=1, block=BLOCK), arch, emit="hsaco")
    return binary.data
