"""Device-side compare under a tolerance: one AMDGPU IR kernel per element type, written here.

``mneme_compare_<dtype>(expected, actual, n, threshold, relative, out, stride)`` reads `n`
elements of both copies in a grid-stride loop, as doubles (integers as exact magnitudes of
their difference), and adds its findings to ten 64-bit words with atomics, the layout the
CUDA backend's compare kernels use (so `compare.decide` reads both the same way):

    0 elements beyond the threshold (or NaN against a number)   1 first such element (umin)
    2 max |a - e| (double bits; non-negative doubles order as u64)   3 max relative error (bits)
    4 NaN mismatches   5 sum (a - e)^2   6 sum e^2   7 sum |a - e|   8 sum |e|   9 max |e| (bits)

Element semantics follow the host compare (mneme.core.snapshot.compare): NaN pairs and equal
infinities match, an error on a zero expected value is infinitely relative. Built by
`mneme_hip.codegen` like every other kernel (no hipcc); the host backend runs the same IR.
"""

from __future__ import annotations

from mneme_hip.compare_layout import BLOCK, DATA_LAYOUT

FLOATS = {"f16": ("half", 2), "bf16": ("i16", 2), "f32": ("float", 4), "f64": ("double", 8)}
INTEGERS = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8}
DTYPES = (*FLOATS, *INTEGERS)
INF = "0x7FF0000000000000"


def kernel_name(dtype: str) -> str:
    return f"mneme_compare_{dtype}"


def itemsize(dtype: str) -> int:
    return FLOATS[dtype][1] if dtype in FLOATS else INTEGERS[dtype]


def _load_float(dtype: str) -> str:
    """IR that loads element %i of %expected/%actual into doubles %e and %a, and sets %either / %nanbad."""
    ty, _ = FLOATS[dtype]
    lines = []
    for side, ptr in (("e", "%expected"), ("a", "%actual")):
        lines.append(f"  %p{side} = getelementptr inbounds {ty}, ptr addrspace(1) {ptr}, i64 %i")
        loaded = side if ty == "double" else f"v{side}"
        lines.append(f"  %{loaded} = load {ty}, ptr addrspace(1) %p{side}, align {FLOATS[dtype][1]}")
        if dtype == "bf16":  # bf16 is the top half of an f32
            lines += [
                f"  %w{side} = zext i16 %v{side} to i32",
                f"  %s{side} = shl i32 %w{side}, 16",
                f"  %f{side} = bitcast i32 %s{side} to float",
                f"  %{side} = fpext float %f{side} to double",
            ]
        elif ty != "double":
            lines.append(f"  %{side} = fpext {ty} %v{side} to double")
    lines += [
        "  %en = fcmp uno double %e, %e",
        "  %an = fcmp uno double %a, %a",
        "  %either = or i1 %en, %an",
        "  %nanbad = xor i1 %en, %an",
        "  %same = fcmp oeq double %e, %a",
        "  %sub = fsub double %a, %e",
        "  %absd = call double @llvm.fabs.f64(double %sub)",
        "  %d0 = select i1 %same, double 0.0, double %absd",
        "  %d = select i1 %either, double 0.0, double %d0",  # NaN pairs count as NaN mismatches, not errors
        "  %abse0 = call double @llvm.fabs.f64(double %e)",
        "  %abse = select i1 %either, double 0.0, double %abse0",
    ]
    return "\n".join(lines)


def _load_integer(dtype: str) -> str:
    """IR for integers: %d is |a - e| computed exactly in 64 bits, %abse is |e|; never NaN."""
    bits = INTEGERS[dtype] * 8
    signed = dtype.startswith("i")
    ext = "sext" if signed else "zext"
    lines = []
    for side, ptr in (("e", "%expected"), ("a", "%actual")):
        lines.append(f"  %p{side} = getelementptr inbounds i{bits}, ptr addrspace(1) {ptr}, i64 %i")
        lines.append(f"  %v{side} = load i{bits}, ptr addrspace(1) %p{side}, align {INTEGERS[dtype]}")
        lines.append(
            f"  %x{side} = {ext} i{bits} %v{side} to i64" if bits < 64 else f"  %x{side} = add i64 %v{side}, 0"
        )
    cmp = "sge" if signed else "uge"
    to_fp = "sitofp" if signed else "uitofp"
    lines += [
        f"  %ge = icmp {cmp} i64 %xa, %xe",
        "  %up = sub i64 %xa, %xe",
        "  %down = sub i64 %xe, %xa",
        "  %du = select i1 %ge, i64 %up, i64 %down",  # the magnitude fits in u64 even for i64 extremes
        "  %d = uitofp i64 %du to double",
        f"  %ef = {to_fp} i64 %xe to double",
        "  %abse = call double @llvm.fabs.f64(double %ef)",
        "  %either = or i1 false, false",
        "  %nanbad = or i1 false, false",
    ]
    return "\n".join(lines)


def ir(dtype: str) -> str:
    """The tolerant compare kernel for `dtype` as AMDGPU LLVM IR text."""
    if dtype not in DTYPES:
        raise ValueError(f"no device compare kernel for dtype {dtype!r}; one of {', '.join(DTYPES)}")
    body = _load_float(dtype) if dtype in FLOATS else _load_integer(dtype)
    acc = ["count", "first", "nans"]
    facc = ["maxabs", "maxrel", "ssd", "ssr", "sad", "sar", "maxref"]
    phis = [f"  %{n} = phi i64 [ {'-1' if n == 'first' else '0'}, %entry ], [ %{n}.1, %loop ]" for n in acc]
    phis += [f"  %{n} = phi double [ 0.0, %entry ], [ %{n}.1, %loop ]" for n in facc]
    final = [f"  %{n}.out = phi i64 [ %{n}.1, %loop ]" for n in acc]
    final += [f"  %{n}.out = phi double [ %{n}.1, %loop ]" for n in facc]
    nl = "\n"
    return f"""target datalayout = "{DATA_LAYOUT}"
target triple = "amdgcn-amd-amdhsa"

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare double @llvm.fabs.f64(double)
declare double @llvm.maxnum.f64(double, double)
declare i64 @llvm.umin.i64(i64, i64)

define amdgpu_kernel void @{kernel_name(dtype)}(ptr addrspace(1) %expected, ptr addrspace(1) %actual, i64 %n,
    double %threshold, i32 %relative, ptr addrspace(1) %out, i64 %stride) #0 {{
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid64 = zext i32 %tid to i64
  %bid64 = zext i32 %bid to i64
  %base = mul i64 %bid64, {BLOCK}
  %start = add i64 %base, %tid64
  %rel = icmp ne i32 %relative, 0
  %any = icmp ult i64 %start, %n
  br i1 %any, label %loop, label %exit

loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
{nl.join(phis)}
{body}
  %dzero = fcmp oeq double %d, 0.0
  %dinf = fcmp oeq double %d, {INF}
  %ezero = fcmp oeq double %abse, 0.0
  %infinite = or i1 %dinf, %ezero
  %q = fdiv double %d, %abse
  %r1 = select i1 %infinite, double {INF}, double %q
  %r = select i1 %dzero, double 0.0, double %r1
  %metric = select i1 %rel, double %r, double %d
  %over = fcmp ogt double %metric, %threshold
  %bad = select i1 %either, i1 %nanbad, i1 %over
  %inc = zext i1 %bad to i64
  %count.1 = add i64 %count, %inc
  %candidate = select i1 %bad, i64 %i, i64 -1
  %first.1 = call i64 @llvm.umin.i64(i64 %first, i64 %candidate)
  %nanbad64 = zext i1 %nanbad to i64
  %nans.1 = add i64 %nans, %nanbad64
  %maxabs.1 = call double @llvm.maxnum.f64(double %maxabs, double %d)
  %maxrel.1 = call double @llvm.maxnum.f64(double %maxrel, double %r)
  %dd = fmul double %d, %d
  %ssd.1 = fadd double %ssd, %dd
  %ee = fmul double %abse, %abse
  %ssr.1 = fadd double %ssr, %ee
  %sad.1 = fadd double %sad, %d
  %sar.1 = fadd double %sar, %abse
  %maxref.1 = call double @llvm.maxnum.f64(double %maxref, double %abse)
  %next = add i64 %i, %stride
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %publish

publish:
{nl.join(final)}
{_publish()}
  br label %exit

exit:
  ret void
}}

attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{BLOCK}" }}
"""


def _publish() -> str:
    """Atomics that add one thread's findings to the ten result words (see the module docstring)."""
    ops = [
        ("add", "count", 0, "i64"),
        ("umin", "first", 1, "i64"),
        ("umax", "maxabs", 2, "bits"),
        ("umax", "maxrel", 3, "bits"),
        ("add", "nans", 4, "i64"),
        ("fadd", "ssd", 5, "double"),
        ("fadd", "ssr", 6, "double"),
        ("fadd", "sad", 7, "double"),
        ("fadd", "sar", 8, "double"),
        ("umax", "maxref", 9, "bits"),
    ]
    lines = []
    for op, name, word, kind in ops:
        lines.append(f"  %w{word} = getelementptr inbounds i64, ptr addrspace(1) %out, i64 {word}")
        value = f"%{name}.out"
        ty = "double" if kind == "double" else "i64"
        if kind == "bits":
            lines.append(f"  %b{word} = bitcast double {value} to i64")
            value = f"%b{word}"
        lines.append(
            f'  %o{word} = atomicrmw {op} ptr addrspace(1) %w{word}, {ty} {value} syncscope("agent") monotonic, align 8'
        )
    return "\n".join(lines)
