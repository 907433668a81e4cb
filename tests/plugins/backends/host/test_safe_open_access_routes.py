"""Out-of-bounds routes an attacker tries next on the host backend (issue 36, tried on main): atomic loads
and stores (with an ordering and a sync scope: their checked copy was invalid IR, so such kernels did not
compile), other atomicrmw operations, accesses straddling the end, unaligned and 128-bit accesses, the
element-wise atomic and inline memory intrinsics, volatile accesses, other address spaces and pointers
made by integer arithmetic. Each runs in bounds and fails one element (or one byte) past the end, naming
the bytes past the end, as test_host_bounds_every_access.py does for the kinds it covers."""

from __future__ import annotations

import pytest
from test_host_bounds_every_access import BUFFER, N, _args, _launch, device  # noqa: F401

from mneme.core.errors import ExperimentError

HEADER = """target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
declare void @llvm.memcpy.element.unordered.atomic.p0.p0.i64(ptr, ptr, i64, i32)
declare void @llvm.memset.element.unordered.atomic.p0.i64(ptr, i8, i64, i32)
declare void @llvm.memmove.element.unordered.atomic.p0.p0.i64(ptr, ptr, i64, i32)
declare void @llvm.memcpy.inline.p0.p0.i64(ptr, ptr, i64, i1)
declare void @llvm.memset.inline.p0.i64(ptr, i8, i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
"""


def kernel(body: str) -> str:
    """k(x, out, i): %p points to element i of x, %pb to byte i."""
    return (
        HEADER
        + f"""define void @k(ptr %x, ptr %out, i32 %i) {{
entry:
  %idx = sext i32 %i to i64
  %p = getelementptr inbounds i32, ptr %x, i64 %idx
  %pb = getelementptr inbounds i8, ptr %x, i64 %idx
{body}
  ret void
}}
!nvvm.annotations = !{{!0}}
!0 = !{{ptr @k, !"kernel", i32 1}}
"""
    )


# body, index in bounds, index past the end (elements for %p, bytes for %pb), verb, bytes past the end
CASES = {
    "load atomic seq_cst": (
        "  %v = load atomic i32, ptr %p seq_cst, align 4\n  store i32 %v, ptr %out",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "load atomic syncscope": (
        '  %v = load atomic i32, ptr %p syncscope("device") monotonic, align 4\n  store i32 %v, ptr %out',
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "store atomic": ("  store atomic i32 7, ptr %p release, align 4", N - 1, N, "wrote", "4000..4003"),
    "atomicrmw xchg": (
        "  %v = atomicrmw xchg ptr %p, i32 5 seq_cst\n  store i32 %v, ptr %out",
        N - 1,
        N,
        "accessed atomically",
        "4000..4003",
    ),
    "atomicrmw umax": (
        "  %v = atomicrmw umax ptr %p, i32 0 monotonic\n  store i32 %v, ptr %out",
        N - 1,
        N,
        "accessed atomically",
        "4000..4003",
    ),
    "atomicrmw fadd": (
        "  %v = atomicrmw fadd ptr %p, float 0.0 monotonic\n  store float %v, ptr %out",
        N - 1,
        N,
        "accessed atomically",
        "4000..4003",
    ),
    "cmpxchg i64 straddling": (
        "  %r = cmpxchg ptr %pb, i64 0, i64 1 seq_cst seq_cst\n  %v = extractvalue {i64, i1} %r, 0\n"
        "  store i64 %v, ptr %out",
        3992,
        3996,
        "accessed atomically",
        "4000..4003",
    ),
    "<3 x i32> straddling": (
        "  %v = load <3 x i32>, ptr %pb, align 4\n  store <3 x i32> %v, ptr %out",
        3988,
        3992,
        "read",
        "4000..4003",
    ),
    "i64 unaligned": ("  %v = load i64, ptr %pb, align 1\n  store i64 %v, ptr %out", 3992, 3994, "read", "4000..4001"),
    "i128": ("  %v = load i128, ptr %pb, align 4\n  store i128 %v, ptr %out", 3984, 3988, "read", "4000..4003"),
    "memcpy.element.unordered.atomic": (
        "  call void @llvm.memcpy.element.unordered.atomic.p0.p0.i64(ptr align 4 %out, ptr align 4 %p, i64 4, i32 4)",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "memset.element.unordered.atomic": (
        "  call void @llvm.memset.element.unordered.atomic.p0.i64(ptr align 4 %p, i8 0, i64 4, i32 4)",
        N - 1,
        N,
        "wrote",
        "4000..4003",
    ),
    "memmove.element.unordered.atomic": (
        "  call void @llvm.memmove.element.unordered.atomic.p0.p0.i64(ptr align 4 %out, ptr align 4 %p, i64 4, i32 4)",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "memcpy.inline": (
        "  call void @llvm.memcpy.inline.p0.p0.i64(ptr %out, ptr %p, i64 4, i1 false)",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "memset.inline": (
        "  call void @llvm.memset.inline.p0.i64(ptr %p, i8 0, i64 4, i1 false)",
        N - 1,
        N,
        "wrote",
        "4000..4003",
    ),
    "memcpy volatile": (
        "  call void @llvm.memcpy.p0.p0.i64(ptr %out, ptr %p, i64 4, i1 true)",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "load volatile": ("  %v = load volatile i32, ptr %p\n  store i32 %v, ptr %out", N - 1, N, "read", "4000..4003"),
    "addrspace(1)": (
        "  %g = addrspacecast ptr %p to ptr addrspace(1)\n  %v = load i32, ptr addrspace(1) %g\n  store i32 %v, ptr %out",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
    "inttoptr arithmetic": (
        "  %a = ptrtoint ptr %x to i64\n  %o = mul i64 %idx, 4\n  %s = add i64 %a, %o\n  %q = inttoptr i64 %s to ptr\n"
        "  %v = load i32, ptr %q\n  store i32 %v, ptr %out",
        N - 1,
        N,
        "read",
        "4000..4003",
    ),
}


@pytest.mark.parametrize("body, inside, past, verb, bytes_", CASES.values(), ids=list(CASES))
def test_an_access_past_the_end_fails_naming_the_bytes_and_in_bounds_runs(device, body, inside, past, verb, bytes_):  # noqa: F811
    _launch(device, kernel(body), "k", _args(inside))
    with pytest.raises(ExperimentError, match=rf"{verb} out of bounds: bytes {bytes_} {BUFFER}"):
        _launch(device, kernel(body), "k", _args(past))
