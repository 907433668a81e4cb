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

from mneme.plugins.backends.host import intrinsics_amdgpu_lanes
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


def _ctx_read(field: str, axis: str) -> list[str]:
    return [
        "%c = call ptr @__mneme_ctx()",
        f"%p = getelementptr i8, ptr %c, i64 {CTX_OFFSETS[field] + _AXES[axis]}",
        "%r = load i32, ptr %p, align 4, !invariant.load !{}",
        "ret i32 %r",
    ]


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
    return {
        "float": ("i32", 32, 0x7F800000, 0x00400000),
        "double": ("i64", 64, 0x7FF0000000000000, 0x0008000000000000),
        "half": ("i16", 16, 0x7C00, 0x0200),
    }[ty]


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
            f"%f = call {ty} @llvm.floor.{suffix}({ty} %a0)",
            f"%d = fsub {ty} %a0, %f",
            f"%m = call {ty} @llvm.minnum.{suffix}({ty} %d, {ty} {one_below})",
            f"%inf = call {ty} @llvm.fabs.{suffix}({ty} %a0)",
            f"%isinf = fcmp oeq {ty} %inf, 0x7FF0000000000000",
            f"%z = select i1 %isinf, {ty} 0x7FF8000000000000, {ty} %m",
            f"%nan = fcmp uno {ty} %a0, 0.0",
            f"%r = select i1 %nan, {ty} %a0, {ty} %z",
            f"ret {ty} %r",
        ]
    if op == "frexp" and parts[1] in ("mant", "exp"):
        exp_type = sig.ret if parts[1] == "exp" else "i32"
        lines = [f"%fr = call {{ {ty}, i32 }} @llvm.frexp.{suffix}.i32({ty} %a0)"]
        if parts[1] == "mant":
            return [*lines, f"%r = extractvalue {{ {ty}, i32 }} %fr, 0", f"ret {ty} %r"]
        lines += [
            f"%e = extractvalue {{ {ty}, i32 }} %fr, 1",
            f"%fin = fcmp one {ty} %a0, 0x7FF0000000000000",
            f"%fin2 = fcmp one {ty} %a0, 0xFFF0000000000000",
            "%ok = and i1 %fin, %fin2",
            "%e0 = select i1 %ok, i32 %e, i32 0",
        ]
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
            f"%r = call {ty} @llvm.maxnum.{suffix}({ty} %lo, {ty} %m)",
            f"ret {ty} %r",
        ]
    if op == "fmul" and parts[1:2] == ["legacy"]:  # 0 * anything is 0
        return [
            f"%m = fmul {ty} %a0, %a1",
            f"%z0 = fcmp oeq {ty} %a0, 0.0",
            f"%z1 = fcmp oeq {ty} %a1, 0.0",
            "%z = or i1 %z0, %z1",
            f"%r = select i1 %z, {ty} 0.0, {ty} %m",
            f"ret {ty} %r",
        ]
    if op == "class" and sig.ret == "i1":
        return _class(ty)
    return None


def _class(ty: str) -> list[str]:
    """``llvm.amdgcn.class``: whether %a0 is in any class of mask %a1 (bit 0 signaling NaN, 1 quiet
    NaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf)."""
    it, bits, exp_mask, quiet = _float_bits(ty)
    sign = 1 << (bits - 1)
    lines = [
        f"%b = bitcast {ty} %a0 to {it}",
        f"%abs = and {it} %b, {sign - 1}",
        f"%neg = icmp slt {it} %b, 0",
        f"%isnan = icmp ugt {it} %abs, {exp_mask}",
        f"%q0 = and {it} %abs, {quiet}",
        f"%hasq = icmp ne {it} %q0, 0",
        "%qnan = and i1 %isnan, %hasq",
        "%notq = xor i1 %hasq, true",
        "%snan = and i1 %isnan, %notq",
        f"%isinf = icmp eq {it} %abs, {exp_mask}",
        f"%iszero = icmp eq {it} %abs, 0",
        f"%e0 = and {it} %abs, {exp_mask}",
        f"%expz = icmp eq {it} %e0, 0",
        "%nz = xor i1 %iszero, true",
        "%isden = and i1 %expz, %nz",
        f"%expfull = icmp eq {it} %e0, {exp_mask}",
        "%notfull = xor i1 %expfull, true",
        "%notexpz = xor i1 %expz, true",
        "%isnorm = and i1 %notfull, %notexpz",
        "%pos = xor i1 %neg, true",
    ]
    classes = [
        "%snan",
        "%qnan",
        ("%isinf", "%neg"),
        ("%isnorm", "%neg"),
        ("%isden", "%neg"),
        ("%iszero", "%neg"),
        ("%iszero", "%pos"),
        ("%isden", "%pos"),
        ("%isnorm", "%pos"),
        ("%isinf", "%pos"),
    ]
    prev = "false"
    for bit, cls in enumerate(classes):
        if isinstance(cls, tuple):
            lines.append(f"%k{bit} = and i1 {cls[0]}, {cls[1]}")
            cls = f"%k{bit}"
        lines += [
            f"%m{bit} = and i32 %a1, {1 << bit}",
            f"%w{bit} = icmp ne i32 %m{bit}, 0",
            f"%t{bit} = and i1 %w{bit}, {cls}",
            f"%o{bit} = or i1 {prev}, %t{bit}",
        ]
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
        "%bits = bitcast double %a0 to i64",
        "%e0 = lshr i64 %bits, 52",
        "%ex = and i64 %e0, 2047",
        "%big = icmp ugt i64 %ex, 1077",
        "%over = sub i64 %ex, 1077",
        "%extra = select i1 %big, i64 %over, i64 0",
        "%seg0 = and i32 %a1, 31",
        "%seg = zext i32 %seg0 to i64",
        "%segbits = mul i64 %seg, 53",
        "%shift = add i64 %segbits, %extra",
        "%lo = sub i64 1212, %shift",  # 1148 + 64: the table starts one word up
        "%none = icmp slt i64 %lo, 0",
        "%lo0 = select i1 %none, i64 0, i64 %lo",
        "%q = lshr i64 %lo0, 6",
        "%r = and i64 %lo0, 63",
        "%q1 = add i64 %q, 1",
        f"%p0 = getelementptr [21 x i64], ptr @{TWO_OVER_PI}, i64 0, i64 %q",
        f"%p1 = getelementptr [21 x i64], ptr @{TWO_OVER_PI}, i64 0, i64 %q1",
        "%w0 = load i64, ptr %p0, align 8",
        "%w1 = load i64, ptr %p1, align 8",
        "%low = lshr i64 %w0, %r",
        "%rz = icmp eq i64 %r, 0",
        "%up = sub i64 64, %r",
        "%up0 = select i1 %rz, i64 0, i64 %up",
        "%hi0 = shl i64 %w1, %up0",
        "%hi = select i1 %rz, i64 0, i64 %hi0",
        "%both = or i64 %low, %hi",
        "%m0 = and i64 %both, 9007199254740991",
        "%m = select i1 %none, i64 0, i64 %m0",
        "%f = uitofp i64 %m to double",
        "%sh32 = trunc i64 %shift to i32",
        "%sc0 = sub i32 -53, %sh32",
        "%huge = icmp uge i64 %ex, 1968",
        "%sc1 = add i32 %sc0, 128",
        "%scale = select i1 %huge, i32 %sc1, i32 %sc0",
        "%res = call double @llvm.ldexp.f64.i32(double %f, i32 %scale)",
        "ret double %res",
    ]


def _integer(name: str, sig: Signature) -> list[str] | None:
    if m := re.fullmatch(r"(u|s)bfe\.(i32|i64)", name):
        ty = m.group(2)
        bits = 32 if ty == "i32" else 64
        shr = "lshr" if m.group(1) == "u" else "ashr"
        # (x << (bits - off - width)) >> (bits - width), width 0 gives 0; offsets and widths are 5 bits
        return [
            "%o = and i32 %a1, 31",
            "%w = and i32 %a2, 31",
            "%ow = add i32 %o, %w",
            f"%l = sub i32 {bits}, %ow",
            f"%r0 = sub i32 {bits}, %w",
            *(
                [f"%lz = zext i32 %l to {ty}", f"%rz = zext i32 %r0 to {ty}"]
                if ty == "i64"
                else ["%lz = add i32 %l, 0", "%rz = add i32 %r0, 0"]
            ),
            f"%s = shl {ty} %a0, %lz",
            f"%v = {shr} {ty} %s, %rz",
            "%wz = icmp eq i32 %w, 0",
            f"%r = select i1 %wz, {ty} 0, {ty} %v",
            f"ret {ty} %r",
        ]
    if name == "perm":
        return _perm()
    if name == "alignbit":
        return ["%r = call i32 @llvm.fshr.i32(i32 %a0, i32 %a1, i32 %a2)", "ret i32 %r"]
    return None


_DOT = re.compile(r"(s|u|su)dot(2|4|8)")


def _dot_elements(ty: str, value: str, count: int, signed: str, out: str) -> list[str]:
    """Lines that put the `count` packed elements of `value` in ``{out}0``... as i64; `signed` is
    an i1 (true, false, or an argument) choosing sign or zero extension."""
    lines = []
    bits = 32 // count
    for k in range(count):
        e = f"{out}{k}"
        if ty.startswith("<"):
            lines.append(f"{e}.n = extractelement {ty} {value}, i32 {k}")
            narrow = ty.split(" x ")[1].rstrip(">")
        else:
            lines.append(f"{e}.s = lshr i32 {value}, {bits * k}")
            narrow = f"i{bits}"
            lines.append(f"{e}.n = trunc i32 {e}.s to {narrow}")
        lines += [
            f"{e}.sx = sext {narrow} {e}.n to i64",
            f"{e}.zx = zext {narrow} {e}.n to i64",
            f"{e} = select i1 {signed}, i64 {e}.sx, i64 {e}.zx",
        ]
    return lines


def _dot(name: str, sig: Signature) -> list[str] | None:
    """``v_dot{2,4,8}``: the sum of the products of packed 16-, 8- or 4-bit elements plus %c, in
    32-bit wrap-around arithmetic, or saturated to the 32-bit range under `clamp`. ``sudot`` takes
    each operand's signedness as an argument; ``fdot2`` multiplies halves (or bfloat16s) exactly and
    rounds the sum once (through double; a half or bfloat16 result through f32 on the way), clamping to
    [0, 1] under `clamp`."""
    if m := _DOT.fullmatch(name):
        kind, count = m.group(1), int(m.group(2))
        if kind == "su":  # (i1 a_signed, a, i1 b_signed, b, c, i1 clamp)
            (sa, a, sb, b, c, clamp), signed_c = ("%a0", "%a1", "%a2", "%a3", "%a4", "%a5"), "true"
            ta = tb = sig.params[1]
        else:
            sa = sb = signed_c = "true" if kind == "s" else "false"
            a, b, c, clamp = "%a0", "%a1", "%a2", "%a3"
            ta, tb = sig.params[0], sig.params[1]
        lines = [
            *_dot_elements(ta, a, count, sa, "%x"),
            *_dot_elements(tb, b, count, sb, "%y"),
            "%cs = sext i32 " + c + " to i64",
            "%cz = zext i32 " + c + " to i64",
            f"%acc0 = select i1 {signed_c}, i64 %cs, i64 %cz",
        ]
        for k in range(count):
            lines += [f"%pr{k} = mul i64 %x{k}, %y{k}", f"%acc{k + 1} = add i64 %acc{k}, %pr{k}"]
        total = f"%acc{count}"
        lo, hi = (-(1 << 31), (1 << 31) - 1) if signed_c == "true" else (0, (1 << 32) - 1)
        lines += [
            f"%lo = icmp slt i64 {total}, {lo}",
            f"%hi = icmp sgt i64 {total}, {hi}",
            f"%c0 = select i1 %lo, i64 {lo}, i64 {total}",
            f"%c1 = select i1 %hi, i64 {hi}, i64 %c0",
            f"%sat = select i1 {clamp}, i64 %c1, i64 {total}",
            "%r = trunc i64 %sat to i32",
            "ret i32 %r",
        ]
        return lines
    if re.fullmatch(r"fdot2(\.(f16\.f16|bf16\.bf16|f32\.bf16))?", name):
        vec = sig.params[0]
        elem = vec.split(" x ")[1].rstrip(">")
        lines = []
        for k, op in enumerate(("%a0", "%a1")):
            for i in range(2):
                lines.append(f"%e{k}{i}.n = extractelement {vec} {op}, i32 {i}")
                if elem == "i16":  # bfloat16 bits
                    lines += [
                        f"%e{k}{i}.b = bitcast i16 %e{k}{i}.n to bfloat",
                        f"%e{k}{i} = fpext bfloat %e{k}{i}.b to double",
                    ]
                else:
                    lines.append(f"%e{k}{i} = fpext {elem} %e{k}{i}.n to double")
        ret = sig.ret
        lines += [
            "%p0 = fmul double %e00, %e10",
            "%p1 = fmul double %e01, %e11",
            "%s0 = fadd double %p0, %p1",
            f"%cd = fpext {sig.params[2]} %a2 to double" if sig.params[2] != "double" else "%cd = fadd double %a2, 0.0",
            "%s = fadd double %s0, %cd",
        ]
        if ret == "float":
            lines.append("%r0 = fptrunc double %s to float")
        elif ret == "half":  # through f32: the CPU has no direct double -> half conversion
            lines += ["%sf = fptrunc double %s to float", "%r0 = fptrunc float %sf to half"]
        else:  # bfloat: round the f32 to nearest even by hand (no libcall), NaN stays NaN
            lines += [
                "%sf = fptrunc double %s to float",
                "%sb = bitcast float %sf to i32",
                "%odd0 = lshr i32 %sb, 16",
                "%odd = and i32 %odd0, 1",
                "%bias = add i32 %odd, 32767",
                "%rnd = add i32 %sb, %bias",
                "%top = lshr i32 %rnd, 16",
                "%nan = fcmp uno float %sf, 0.0",
                "%bits = select i1 %nan, i32 32704, i32 %top",
                "%b16 = trunc i32 %bits to i16",
                f"%r0 = bitcast i16 %b16 to {ret}",
            ]
        if len(sig.params) == 4:  # clamp to [0, 1]
            suffix = {"float": "f32", "half": "f16"}[ret]
            lines += [
                f"%lo = call {ret} @llvm.maxnum.{suffix}({ret} %r0, {ret} 0.0)",
                f"%cl = call {ret} @llvm.minnum.{suffix}({ret} %lo, {ret} 1.0)",
                f"%r = select i1 %a3, {ret} %cl, {ret} %r0",
                f"ret {ret} %r",
            ]
            return lines
        return [*lines, f"ret {ret} %r0"]
    return None


def _perm() -> list[str]:
    """``v_perm_b32``: byte k of the result is selector byte k of %a2 applied to {%a0:%a1}: 0-7 a
    byte, 8-11 the sign of byte 1, 3, 5 or 7 spread over the byte, 12 zero, 13 and up 0xFF."""
    lines = [
        "%h = zext i32 %a0 to i64",
        "%hs = shl i64 %h, 32",
        "%l = zext i32 %a1 to i64",
        "%d = or i64 %hs, %l",
        "%acc0 = add i32 0, 0",
    ]
    for k in range(4):
        lines += [
            f"%s{k}.0 = lshr i32 %a2, {8 * k}",
            f"%s{k} = and i32 %s{k}.0, 255",
            f"%sel{k}.8 = shl i32 %s{k}, 3",
            f"%sh{k} = zext i32 %sel{k}.8 to i64",
            f"%by{k}.0 = lshr i64 %d, %sh{k}",
            f"%by{k} = and i64 %by{k}.0, 255",
            f"%sg{k}.i = sub i32 %s{k}, 8",
            f"%sg{k}.b0 = shl i32 %sg{k}.i, 4",
            f"%sg{k}.b = add i32 %sg{k}.b0, 15",
            f"%sg{k}.sh = zext i32 %sg{k}.b to i64",
            f"%sg{k}.bit0 = lshr i64 %d, %sg{k}.sh",
            f"%sg{k}.bit = and i64 %sg{k}.bit0, 1",
            f"%sg{k}.set = icmp ne i64 %sg{k}.bit, 0",
            f"%sg{k} = select i1 %sg{k}.set, i64 255, i64 0",
            f"%isb{k} = icmp ult i32 %s{k}, 8",
            f"%iss{k} = icmp ult i32 %s{k}, 12",
            f"%isz{k} = icmp eq i32 %s{k}, 12",
            f"%v{k}.0 = select i1 %isz{k}, i64 0, i64 255",
            f"%v{k}.1 = select i1 %iss{k}, i64 %sg{k}, i64 %v{k}.0",
            f"%v{k}.2 = select i1 %isb{k}, i64 %by{k}, i64 %v{k}.1",
            f"%v{k} = trunc i64 %v{k}.2 to i32",
            f"%vs{k} = shl i32 %v{k}, {8 * k}",
            f"%acc{k + 1} = or i32 %acc{k}, %vs{k}",
        ]
    return [*lines, "ret i32 %acc4"]


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
    for rule in (_work_items, _dot, lambda n, s: intrinsics_amdgpu_lanes.implement(n, s, wave), _sync, _math, _integer):
        try:
            lines = rule(name, sig)
        except (KeyError, IndexError):
            lines = None
        if lines:
            body = "\n".join("  " + line for line in lines)
            return sig.header(new_name) + "\n" + body + "\n}"
    return None
