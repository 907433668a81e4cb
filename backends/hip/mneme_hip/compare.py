"""Device-side verification kernels, generated as AMDGPU IR and built by our own toolchain.

No hipcc at run time: the IR below is compiled for the device's gfxNNN by `mneme_hip.codegen`
(LLVM's AMDGPU back end and ld.lld) the first time a device needs it, and cached per
architecture. ``mneme_compare_bytes`` counts the bytes that differ between the expected copy
and the kernel's result and finds the first one: each thread walks a grid-stride loop, then
adds its count (``atomicrmw add``) and its first index (``atomicrmw umin``) to two 64-bit words.
The same IR runs on the host backend, which is how it is tested on machines without an AMD GPU.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import attrs
import numpy as np

from mneme.core.errors import UnsupportedError
from mneme.core.types import ExperimentConfiguration

KERNEL = "mneme_compare_bytes"
BLOCK = 256
DATA_LAYOUT = ("e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128-"
               "p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-"
               "v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")  # fmt: skip

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


@attrs.frozen
class RegionDiff:
    """How one region differs (the executor's report of a device compare); -1: nothing differs."""

    actual: int
    size: int
    differing_bytes: int
    first_offset: int
    ok: bool


def check_exact(requests: Any) -> None:
    """The device compares bytes exactly; a tolerance policy is compared on the host (UnsupportedError)."""
    tolerant = [r for r in requests if getattr(r, "policy", None) is not None]
    if tolerant:
        raise UnsupportedError(f"the hip device compares bytes exactly; region 0x{tolerant[0].actual:x} has a "
                               f"tolerance ({tolerant[0].policy}): compare on the host")  # fmt: skip


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


@functools.lru_cache(maxsize=8)
def hsaco(arch: str) -> bytes:
    """The compare kernel's code object for `arch`, built once per process and architecture."""
    from mneme.core import ir
    from mneme_hip import codegen

    module = ir.load(IR)
    binary = codegen.codegen(module, KERNEL, ExperimentConfiguration(grid=1, block=BLOCK), arch, emit="hsaco")
    return binary.data
