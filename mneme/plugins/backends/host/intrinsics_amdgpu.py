"""Host implementations of the AMDGPU intrinsics that HIP kernel IR and the ROCm device libraries use.

Like `intrinsics` for NVVM: each implementation is LLVM IR text for a function with the
intrinsic's own signature, so retargeting only renames the callee. Work-item and work-group ids
read the runtime's per-thread context; ``dispatch.ptr`` and ``implicitarg.ptr`` point at the HSA
dispatch packet and code object v5 hidden arguments the runtime fills for each launch, so ockl's
``__ockl_get_local_size`` and friends run unchanged. Cross-lane operations (``ds.bpermute``,
``ds.swizzle``, ``readlane``, ``ballot``) meet the whole wave (64 lanes on gfx9) in the runtime.
See docs/design/host-amdgpu.md. An intrinsic without an implementation here is refused by name.
"""

from __future__ import annotations

import re

from mneme.plugins.backends.host.intrinsics import CTX_OFFSETS, Signature

RUNTIME_DECLS = {
    "__mneme_wave_read": "declare i32 @__mneme_wave_read(i32, i32) nounwind",
    "__mneme_wave_ballot": "declare i64 @__mneme_wave_ballot(i32) nounwind",
    "__mneme_amd_dispatch": "declare ptr @__mneme_amd_dispatch() nounwind willreturn memory(none)",
    "__mneme_amd_implicitarg": "declare ptr @__mneme_amd_implicitarg() nounwind willreturn memory(none)",
}
# Runtime functions that meet the wave: the kernel then runs one fiber per work-item.
SYNC_FUNCTIONS = ("__mneme_wave_read", "__mneme_wave_ballot")

_AXES = {"x": 0, "y": 4, "z": 8}
# Hints and waits that have no effect on a CPU (the host's memory is coherent).
_NO_OPS = re.compile(
    r"s\.(waitcnt|sleep|setprio|nop|dcache\.(inv|wb)(\.vol)?|icache\.inv|ttracedata|setreg)|sched\.(barrier|group\.barrier)"
    r"|buffer\.wbinvl1(\.vol|\.sc)?|iglp\.opt"
)
# LLVM integer comparison predicates (llvm::CmpInst), as used by llvm.amdgcn.icmp.
_ICMP = {32: "eq", 33: "ne", 34: "ugt", 35: "uge", 36: "ult", 37: "ule", 38: "sgt", 39: "sge", 40: "slt", 41: "sle"}


def _ctx_read(field: str, axis: str) -> list[str]:
    return [
        "%c = call ptr @__mneme_ctx()",
        f"%p = getelementptr i8, ptr %c, i64 {CTX_OFFSETS[field] + _AXES[axis]}",
        "%r = load i32, ptr %p, align 4, !invariant.load !{}",
        "ret i32 %r",
    ]


def _lane() -> list[str]:
    return [
        "%c = call ptr @__mneme_ctx()",
        f"%lp = getelementptr i8, ptr %c, i64 {CTX_OFFSETS['laneid']}",
        "%lane = load i32, ptr %lp, align 4, !invariant.load !{}",
    ]


def _as_i32(ty: str, value: str, out: str) -> list[str]:
    if ty == "i32":
        return [f"{out} = add i32 {value}, 0"]
    if ty == "float":
        return [f"{out} = bitcast float {value} to i32"]
    if ty in ("i16", "i8", "i1"):
        return [f"{out} = zext {ty} {value} to i32"]
    if ty in ("half", "bfloat"):
        return [f"{out}.h = bitcast {ty} {value} to i16", f"{out} = zext i16 {out}.h to i32"]
    raise KeyError(ty)


def _from_i32(ty: str, value: str, out: str) -> list[str]:
    if ty == "i32":
        return [f"{out} = add i32 {value}, 0"]
    if ty == "float":
        return [f"{out} = bitcast i32 {value} to float"]
    if ty in ("i16", "i8", "i1"):
        return [f"{out} = trunc i32 {value} to {ty}"]
    if ty in ("half", "bfloat"):
        return [f"{out}.h = trunc i32 {value} to i16", f"{out} = bitcast i16 {out}.h to {ty}"]
    raise KeyError(ty)


def _read_lane(ty: str, value: str, src: str) -> list[str]:
    """Lines that read `value` (of type `ty`) from lane `src` (an i32) and return it."""
    if ty in ("i64", "double", "ptr"):
        to = {"i64": "", "double": "bitcast double", "ptr": "ptrtoint ptr"}[ty]
        lines = [f"%w = {to} {value} to i64" if to else f"%w = add i64 {value}, 0"]
        lines += [
            "%lo = trunc i64 %w to i32", "%hs = lshr i64 %w, 32", "%hi = trunc i64 %hs to i32",
            f"%rlo = call i32 @__mneme_wave_read(i32 %lo, i32 {src})",
            f"%rhi = call i32 @__mneme_wave_read(i32 %hi, i32 {src})",
            "%zlo = zext i32 %rlo to i64", "%zhi = zext i32 %rhi to i64", "%sh = shl i64 %zhi, 32",
            "%v = or i64 %sh, %zlo",
        ]  # fmt: skip
        back = {"i64": "%r = add i64 %v, 0", "double": "%r = bitcast i64 %v to double", "ptr": "%r = inttoptr i64 %v to ptr"}
        return [*lines, back[ty], f"ret {ty} %r"]
    return [*_as_i32(ty, value, "%vi"), f"%ri = call i32 @__mneme_wave_read(i32 %vi, i32 {src})",
            *_from_i32(ty, "%ri", "%r"), f"ret {ty} %r"]  # fmt: skip


def _work_items(name: str, sig: Signature) -> list[str] | None:
    if m := re.fullmatch(r"workitem\.id\.([xyz])", name):
        return _ctx_read("tid", m.group(1))
    if m := re.fullmatch(r"workgroup\.id\.([xyz])", name):
        return _ctx_read("ctaid", m.group(1))
    if name == "dispatch.ptr":
        return ["%r = call ptr @__mneme_amd_dispatch()", "ret ptr %r"]
    if name == "implicitarg.ptr":
        return ["%r = call ptr @__mneme_amd_implicitarg()", "ret ptr %r"]
    return None


def _lanes(name: str, sig: Signature, wave: int) -> list[str] | None:
    if name == "wavefrontsize":
        return [f"ret i32 {wave}"]
    if name in ("mbcnt.lo", "mbcnt.hi"):
        # popcount of the mask's bits for the lanes below this one, in the low or high 32 lanes
        shift = "" if name == "mbcnt.lo" else "%below.hi = lshr i64 %below, 32"
        below = "%below" if name == "mbcnt.lo" else "%below.hi"
        return [
            *_lane(), "%l64 = zext i32 %lane to i64", "%bit = shl i64 1, %l64", "%below = sub i64 %bit, 1",
            *([shift] if shift else []), f"%b32 = trunc i64 {below} to i32", "%m = and i32 %a0, %b32",
            "%n = call i32 @llvm.ctpop.i32(i32 %m)", "%r = add i32 %n, %a1", "ret i32 %r",
        ]  # fmt: skip
    if name == "ds.bpermute":  # a byte address: lane = addr / 4, modulo the wave
        return ["%l = lshr i32 %a0, 2", f"%s = and i32 %l, {wave - 1}",
                "%r = call i32 @__mneme_wave_read(i32 %a1, i32 %s)", "ret i32 %r"]  # fmt: skip
    if name == "ds.swizzle":
        # offset >= 0x8000: quad permute (2 bits per lane of each quad); else a bit-mask mode
        # over groups of 32 lanes: ((lane & and) | or) ^ xor (5-bit masks).
        return [
            *_lane(),
            "%quad = icmp uge i32 %a1, 32768", "%q = and i32 %lane, 3", "%qs = shl i32 %q, 1",
            "%sel0 = lshr i32 %a1, %qs", "%sel = and i32 %sel0, 3", "%qbase = and i32 %lane, -4",
            "%qsrc = or i32 %qbase, %sel",
            "%andm = and i32 %a1, 31", "%or0 = lshr i32 %a1, 5", "%orm = and i32 %or0, 31",
            "%x0 = lshr i32 %a1, 10", "%xorm = and i32 %x0, 31", "%lo = and i32 %lane, 31",
            "%t0 = and i32 %lo, %andm", "%t1 = or i32 %t0, %orm", "%t2 = xor i32 %t1, %xorm",
            "%grp = and i32 %lane, -32", "%bsrc = or i32 %grp, %t2",
            "%src = select i1 %quad, i32 %qsrc, i32 %bsrc",
            "%r = call i32 @__mneme_wave_read(i32 %a0, i32 %src)", "ret i32 %r",
        ]  # fmt: skip
    if m := re.fullmatch(r"readlane(\..+)?", name):
        return _read_lane(sig.ret, "%a0", "%a1")
    if m := re.fullmatch(r"readfirstlane(\..+)?", name):
        # the first active lane; the host runs whole waves, so lane 0 (docs/design/host-amdgpu.md)
        return _read_lane(sig.ret, "%a0", "0")
    if m := re.fullmatch(r"ballot\.(i32|i64)", name):
        lines = ["%p = zext i1 %a0 to i32", "%b = call i64 @__mneme_wave_ballot(i32 %p)"]
        return [*lines, "ret i64 %b"] if m.group(1) == "i64" else [*lines, "%r = trunc i64 %b to i32", "ret i32 %r"]
    if m := re.fullmatch(r"icmp\.(i32|i64)\.(i\d+)", name):
        ty = m.group(2)
        lines, prev = [], "false"
        for code, pred in _ICMP.items():
            lines += [f"%c{code} = icmp {pred} {ty} %a0, %a1", f"%is{code} = icmp eq i32 %a2, {code}",
                      f"%s{code} = select i1 %is{code}, i1 %c{code}, i1 {prev}"]  # fmt: skip
            prev = f"%s{code}"
        lines += [f"%p = zext i1 {prev} to i32", "%b = call i64 @__mneme_wave_ballot(i32 %p)"]
        return [*lines, "ret i64 %b"] if m.group(1) == "i64" else [*lines, "%r = trunc i64 %b to i32", "ret i32 %r"]
    return None


def _sync(name: str, sig: Signature) -> list[str] | None:
    if name == "s.barrier":
        return ["call void @__mneme_barrier()", "ret void"]
    if name == "wave.barrier":
        return ["call void @__mneme_warp_sync(i32 -1)", "ret void"]
    if _NO_OPS.fullmatch(name) and sig.ret == "void":
        return ["ret void"]
    if name in ("s.memtime", "s.memrealtime"):
        return ["%r = call i64 @__mneme_clock64()", "ret i64 %r"]
    if name == "is.shared":
        return ["%s = call i32 @__mneme_is_shared(ptr %a0)", "%r = icmp ne i32 %s, 0", "ret i1 %r"]
    if name == "is.private":
        return ["ret i1 false"]
    if m := re.fullmatch(r"(global|flat|ds)\.atomic\.(fadd|fmin|fmax)\..*|ds\.(fadd|fmin|fmax)(\..*)?", name):
        op = m.group(2) or m.group(3)
        rmw = {"fadd": "fadd", "fmin": "fmin", "fmax": "fmax"}[op]
        return [f"%r = atomicrmw {rmw} ptr %a0, {sig.ret} %a1 seq_cst", f"ret {sig.ret} %r"]
    if m := re.fullmatch(r"atomic\.(inc|dec)\..*", name):
        rmw = "uinc_wrap" if m.group(1) == "inc" else "udec_wrap"
        return [f"%r = atomicrmw {rmw} ptr %a0, {sig.ret} %a1 seq_cst", f"ret {sig.ret} %r"]
    return None


def _float_bits(ty: str) -> tuple[str, int, int, int]:
    """(integer type, bits, exponent mask, quiet-NaN bit) of a float type."""
    return {"float": ("i32", 32, 0x7F800000, 0x00400000), "double": ("i64", 64, 0x7FF0000000000000, 0x0008000000000000),
            "half": ("i16", 16, 0x7C00, 0x0200)}[ty]  # fmt: skip


def _math(name: str, sig: Signature) -> list[str] | None:
    parts = name.split(".")
    op = parts[0]
    ty = sig.params[0] if sig.params else sig.ret
    suffix = {"float": "f32", "double": "f64"}.get(ty)
    if suffix is None:
        return None
    if op == "rcp":
        return [f"%r = fdiv {ty} 1.0, %a0", f"ret {ty} %r"]
    if op in ("sqrt",):
        return [f"%r = call {ty} @llvm.sqrt.{suffix}({ty} %a0)", f"ret {ty} %r"]
    if op == "rsq":
        return [f"%s = call {ty} @llvm.sqrt.{suffix}({ty} %a0)", f"%r = fdiv {ty} 1.0, %s", f"ret {ty} %r"]
    if op in ("log", "exp2") and len(sig.params) == 1:  # the hardware's log2 and exp2
        fn = "log2" if op == "log" else "exp2"
        return [f"%r = call {ty} @llvm.{fn}.{suffix}({ty} %a0)", f"ret {ty} %r"]
    if op in ("sin", "cos"):  # the hardware's sin/cos take turns, not radians
        two_pi = "0x401921FB54442D18"
        return [f"%x = fmul {ty} %a0, {two_pi}", f"%r = call {ty} @llvm.{op}.{suffix}({ty} %x)", f"ret {ty} %r"]
    if op == "fract":  # x - floor(x), below 1.0; NaN for NaN and infinities
        one_below = {"float": "0x3FEFFFFFE0000000", "double": "0x3FEFFFFFFFFFFFFF"}[ty]
        return [
            f"%f = call {ty} @llvm.floor.{suffix}({ty} %a0)", f"%d = fsub {ty} %a0, %f",
            f"%m = call {ty} @llvm.minnum.{suffix}({ty} %d, {ty} {one_below})",
            f"%inf = call {ty} @llvm.fabs.{suffix}({ty} %a0)", f"%isinf = fcmp oeq {ty} %inf, 0x7FF0000000000000",
            f"%z = select i1 %isinf, {ty} 0x7FF8000000000000, {ty} %m",
            f"%nan = fcmp uno {ty} %a0, 0.0", f"%r = select i1 %nan, {ty} %a0, {ty} %z", f"ret {ty} %r",
        ]  # fmt: skip
    if op == "frexp" and parts[1] in ("mant", "exp"):
        exp_type = sig.ret if parts[1] == "exp" else "i32"
        lines = [f"%fr = call {{ {ty}, i32 }} @llvm.frexp.{suffix}.i32({ty} %a0)"]
        if parts[1] == "mant":
            return [*lines, f"%r = extractvalue {{ {ty}, i32 }} %fr, 0", f"ret {ty} %r"]
        lines += [f"%e = extractvalue {{ {ty}, i32 }} %fr, 1",
                  f"%fin = fcmp one {ty} %a0, 0x7FF0000000000000", f"%fin2 = fcmp one {ty} %a0, 0xFFF0000000000000",
                  "%ok = and i1 %fin, %fin2", "%e0 = select i1 %ok, i32 %e, i32 0"]  # fmt: skip
        if exp_type != "i32":
            return [*lines, f"%r = trunc i32 %e0 to {exp_type}", f"ret {exp_type} %r"]
        return [*lines, "ret i32 %e0"]
    if op == "ldexp":
        return [f"%r = call {ty} @llvm.ldexp.{suffix}.i32({ty} %a0, i32 %a1)", f"ret {ty} %r"]
    if op == "fmed3":
        return [
            f"%lo = call {ty} @llvm.minnum.{suffix}({ty} %a0, {ty} %a1)",
            f"%hi = call {ty} @llvm.maxnum.{suffix}({ty} %a0, {ty} %a1)",
            f"%m = call {ty} @llvm.minnum.{suffix}({ty} %hi, {ty} %a2)",
            f"%r = call {ty} @llvm.maxnum.{suffix}({ty} %lo, {ty} %m)", f"ret {ty} %r",
        ]  # fmt: skip
    if op == "fmul" and parts[1:2] == ["legacy"]:  # 0 * anything is 0
        return [f"%m = fmul {ty} %a0, %a1", f"%z0 = fcmp oeq {ty} %a0, 0.0", f"%z1 = fcmp oeq {ty} %a1, 0.0",
                "%z = or i1 %z0, %z1", f"%r = select i1 %z, {ty} 0.0, {ty} %m", f"ret {ty} %r"]  # fmt: skip
    if op == "class" and sig.ret == "i1":
        return _class(ty)
    return None


def _class(ty: str) -> list[str]:
    """``llvm.amdgcn.class``: whether %a0 is in any class of mask %a1 (bit 0 signaling NaN, 1 quiet
    NaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf)."""
    it, bits, exp_mask, quiet = _float_bits(ty)
    sign = 1 << (bits - 1)
    lines = [
        f"%b = bitcast {ty} %a0 to {it}", f"%abs = and {it} %b, {sign - 1}", f"%neg = icmp slt {it} %b, 0",
        f"%isnan = icmp ugt {it} %abs, {exp_mask}", f"%q0 = and {it} %abs, {quiet}", f"%hasq = icmp ne {it} %q0, 0",
        "%qnan = and i1 %isnan, %hasq", "%notq = xor i1 %hasq, true", "%snan = and i1 %isnan, %notq",
        f"%isinf = icmp eq {it} %abs, {exp_mask}", f"%iszero = icmp eq {it} %abs, 0",
        f"%e0 = and {it} %abs, {exp_mask}", f"%expz = icmp eq {it} %e0, 0", "%nz = xor i1 %iszero, true",
        "%isden = and i1 %expz, %nz", f"%expfull = icmp eq {it} %e0, {exp_mask}", "%notfull = xor i1 %expfull, true",
        "%notexpz = xor i1 %expz, true", "%isnorm = and i1 %notfull, %notexpz", "%pos = xor i1 %neg, true",
    ]  # fmt: skip
    classes = ["%snan", "%qnan", ("%isinf", "%neg"), ("%isnorm", "%neg"), ("%isden", "%neg"), ("%iszero", "%neg"),
               ("%iszero", "%pos"), ("%isden", "%pos"), ("%isnorm", "%pos"), ("%isinf", "%pos")]  # fmt: skip
    prev = "false"
    for bit, cls in enumerate(classes):
        if isinstance(cls, tuple):
            lines.append(f"%k{bit} = and i1 {cls[0]}, {cls[1]}")
            cls = f"%k{bit}"
        lines += [f"%m{bit} = and i32 %a1, {1 << bit}", f"%w{bit} = icmp ne i32 %m{bit}, 0",
                  f"%t{bit} = and i1 %w{bit}, {cls}", f"%o{bit} = or i1 {prev}, %t{bit}"]  # fmt: skip
        prev = f"%o{bit}"
    return [*lines, f"ret i1 {prev}"]


def _two_over_pi_words() -> list[int]:
    """2/pi as 1201 fraction bits (``floor(2**1201 * 2/pi)``), shifted up one 64-bit word, in 21 words."""
    guard = 1300
    one = 1 << guard

    def arctan_inv(x: int) -> int:  # atan(1/x) in fixed point
        total, term, k, sign = 0, one // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k += 2
            sign = -sign
        return total

    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)  # Machin's formula, `guard` fraction bits
    value = ((2 << guard) << 1201) // pi << 64  # 2/pi * 2**1201, then one zero word below
    return [(value >> (64 * k)) & ((1 << 64) - 1) for k in range(21)]


TWO_OVER_PI = "__mneme.amdgcn.two_over_pi"


def _trig_preop(sig: Signature) -> list[str] | None:
    """``v_trig_preop_f64``: 53 bits of 2/pi from bit ``1148 - shift`` on, scaled by ``2**(-53 - shift)``,
    where ``shift = 53 * segment`` plus the exponent's excess over 1077 (the ISA's pseudo-code)."""
    if sig.ret != "double":
        return None
    return [
        "%bits = bitcast double %a0 to i64", "%e0 = lshr i64 %bits, 52", "%ex = and i64 %e0, 2047",
        "%big = icmp ugt i64 %ex, 1077", "%over = sub i64 %ex, 1077", "%extra = select i1 %big, i64 %over, i64 0",
        "%seg0 = and i32 %a1, 31", "%seg = zext i32 %seg0 to i64", "%segbits = mul i64 %seg, 53",
        "%shift = add i64 %segbits, %extra",
        "%lo = sub i64 1212, %shift",  # 1148 + 64: the table starts one word up
        "%none = icmp slt i64 %lo, 0", "%lo0 = select i1 %none, i64 0, i64 %lo",
        "%q = lshr i64 %lo0, 6", "%r = and i64 %lo0, 63", "%q1 = add i64 %q, 1",
        f"%p0 = getelementptr [21 x i64], ptr @{TWO_OVER_PI}, i64 0, i64 %q",
        f"%p1 = getelementptr [21 x i64], ptr @{TWO_OVER_PI}, i64 0, i64 %q1",
        "%w0 = load i64, ptr %p0, align 8", "%w1 = load i64, ptr %p1, align 8",
        "%low = lshr i64 %w0, %r", "%rz = icmp eq i64 %r, 0", "%up = sub i64 64, %r", "%up0 = select i1 %rz, i64 0, i64 %up",
        "%hi0 = shl i64 %w1, %up0", "%hi = select i1 %rz, i64 0, i64 %hi0", "%both = or i64 %low, %hi",
        "%m0 = and i64 %both, 9007199254740991", "%m = select i1 %none, i64 0, i64 %m0",
        "%f = uitofp i64 %m to double",
        "%sh32 = trunc i64 %shift to i32", "%sc0 = sub i32 -53, %sh32", "%huge = icmp uge i64 %ex, 1968",
        "%sc1 = add i32 %sc0, 128", "%scale = select i1 %huge, i32 %sc1, i32 %sc0",
        "%res = call double @llvm.ldexp.f64.i32(double %f, i32 %scale)", "ret double %res",
    ]  # fmt: skip


def _integer(name: str, sig: Signature) -> list[str] | None:
    if m := re.fullmatch(r"(u|s)bfe\.(i32|i64)", name):
        ty = m.group(2)
        bits = 32 if ty == "i32" else 64
        shr = "lshr" if m.group(1) == "u" else "ashr"
        # (x << (bits - off - width)) >> (bits - width), width 0 gives 0; offsets and widths are 5 bits
        return [
            "%o = and i32 %a1, 31", "%w = and i32 %a2, 31", "%ow = add i32 %o, %w", f"%l = sub i32 {bits}, %ow",
            f"%r0 = sub i32 {bits}, %w",
            *([f"%lz = zext i32 %l to {ty}", f"%rz = zext i32 %r0 to {ty}"] if ty == "i64" else
              ["%lz = add i32 %l, 0", "%rz = add i32 %r0, 0"]),
            f"%s = shl {ty} %a0, %lz", f"%v = {shr} {ty} %s, %rz", "%wz = icmp eq i32 %w, 0",
            f"%r = select i1 %wz, {ty} 0, {ty} %v", f"ret {ty} %r",
        ]  # fmt: skip
    if name == "alignbit":
        return ["%r = call i32 @llvm.fshr.i32(i32 %a0, i32 %a1, i32 %a2)", "ret i32 %r"]
    return None


def implement(intrinsic: str, fn_type: str, new_name: str, wave: int = 64) -> str | None:
    """IR text defining `new_name` with the behaviour of AMDGPU intrinsic `intrinsic`, or None if unknown."""
    assert intrinsic.startswith("llvm.amdgcn.")
    name = intrinsic[len("llvm.amdgcn.") :]
    sig = Signature.parse(fn_type)
    if name == "trig.preop.f64" or name == "trig.preop":
        lines = _trig_preop(sig)
        if lines is None:
            return None
        words = ", ".join(f"i64 {w}" for w in _two_over_pi_words())
        table = f"@{TWO_OVER_PI} = private unnamed_addr constant [21 x i64] [{words}], align 8"
        return table + "\n" + sig.header(new_name) + "\n" + "\n".join("  " + line for line in lines) + "\n}"
    for rule in (_work_items, lambda n, s: _lanes(n, s, wave), _sync, _math, _integer):
        try:
            lines = rule(name, sig)
        except (KeyError, IndexError):
            lines = None
        if lines:
            body = "\n".join("  " + line for line in lines)
            return sig.header(new_name) + "\n" + body + "\n}"
    return None
