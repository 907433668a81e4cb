"""Host implementations of the NVVM intrinsics and libdevice inline PTX that CUDA kernel IR uses.

Each implementation is LLVM IR text for a function with the intrinsic's own signature, so that
retargeting only renames the callee. Directed rounding modes (.rm/.rp/.rz of arithmetic) run
with round-to-nearest: the host has no per-instruction rounding mode; results may differ in
the last bit from the GPU's.
"""

from __future__ import annotations

import re

from mneme.core.ir import split_top_level

# Offsets into the runtime's per-thread context (struct mn_ctx in runtime.c).
CTX_OFFSETS = {"tid": 0, "ntid": 12, "ctaid": 24, "nctaid": 36, "laneid": 48, "warpid": 52, "nwarpid": 56}
AXES = {"x": 0, "y": 4, "z": 8}

# Runtime functions the implementations call, with their declarations.
RUNTIME_DECLS = {
    "__mneme_ctx": "declare ptr @__mneme_ctx() nounwind willreturn memory(none)",
    "__mneme_barrier": "declare void @__mneme_barrier() nounwind",
    "__mneme_barrier_red": "declare i32 @__mneme_barrier_red(i32, i32) nounwind",
    "__mneme_warp_sync": "declare void @__mneme_warp_sync(i32) nounwind",
    "__mneme_shfl": "declare i64 @__mneme_shfl(i32, i32, i32, i32, i32) nounwind",
    "__mneme_vote": "declare i32 @__mneme_vote(i32, i32, i32) nounwind",
    "__mneme_activemask": "declare i32 @__mneme_activemask() nounwind",
    "__mneme_is_shared": "declare i32 @__mneme_is_shared(ptr) nounwind",
    "__mneme_clock64": "declare i64 @__mneme_clock64() nounwind",
    "__mneme_prmt": "declare i32 @__mneme_prmt(i32, i32, i32) nounwind willreturn memory(none)",
    "__mneme_trap": "declare void @__mneme_trap() noreturn nounwind",
    "__mneme_grid_workspace": "declare i64 @__mneme_grid_workspace() nounwind willreturn memory(none)",
    "__mneme_poll32": "declare i32 @__mneme_poll32(ptr) nounwind",
    "__mneme_poll64": "declare i64 @__mneme_poll64(ptr) nounwind",
}

# Functions whose presence in the final code means the kernel needs one fiber per GPU thread.
SYNC_FUNCTIONS = ("__mneme_barrier", "__mneme_barrier_red", "__mneme_warp_sync", "__mneme_shfl", "__mneme_vote")
# ... and every block of the grid resident at once: it reads the grid workspace (a grid-wide barrier).
GRID_FUNCTIONS = ("__mneme_grid_workspace",)

_FLOAT = {"f": "float", "d": "double", "f32": "float", "f64": "double"}
_SHFL_MODES = {"idx": 0, "up": 1, "down": 2, "bfly": 3}
_VOTE_MODES = {"all": 0, "any": 1, "uni": 2, "ballot": 3}


class Signature:
    """A function type as text: return type and parameter types."""

    def __init__(self, ret: str, params: list[str]):
        self.ret = ret
        self.params = params

    @classmethod
    def parse(cls, fn_type: str) -> Signature:
        """Parse llvmlite's function type text, e.g. ``{ float, i1 } (i32, float, i32, i32)``."""
        depth = 0
        for i in range(len(fn_type) - 1, -1, -1):
            ch = fn_type[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    return cls(fn_type[:i].strip(), split_top_level(fn_type[i + 1 : -1]))
        raise ValueError(f"not a function type: {fn_type!r}")

    def header(self, name: str) -> str:
        params = ", ".join(f"{t} %a{i}" for i, t in enumerate(self.params))
        return f"define internal {self.ret} @{name}({params}) alwaysinline nounwind {{"


def _body(lines: list[str]) -> str:
    return "\n".join("  " + line for line in lines)


def _sreg(name: str) -> list[str] | None:
    m = re.fullmatch(r"read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])", name)
    if m:
        offset = CTX_OFFSETS[m.group(1)] + AXES[m.group(2)]
    elif name in ("read.ptx.sreg.laneid", "read.ptx.sreg.warpid", "read.ptx.sreg.nwarpid"):
        offset = CTX_OFFSETS[name.rsplit(".", 1)[1]]
    elif name == "read.ptx.sreg.warpsize":
        return ["ret i32 32"]
    elif name in ("read.ptx.sreg.clock64", "read.ptx.sreg.globaltimer"):
        return ["%r = call i64 @__mneme_clock64()", "ret i64 %r"]
    elif name == "read.ptx.sreg.clock":
        return ["%c = call i64 @__mneme_clock64()", "%r = trunc i64 %c to i32", "ret i32 %r"]
    elif name in ("read.ptx.sreg.smid", "read.ptx.sreg.nsmid"):
        return ["ret i32 0" if name.endswith(".smid") else "ret i32 1"]
    elif m := re.fullmatch(r"read\.ptx\.sreg\.lanemask\.(eq|lt|le|gt|ge)", name):
        lane = CTX_OFFSETS["laneid"]
        shifts = {
            "eq": ["%r = shl i32 1, %l"],
            "lt": ["%b = shl i32 1, %l", "%r = sub i32 %b, 1"],
            "le": ["%b = shl i32 2, %l", "%r = sub i32 %b, 1", ""],
            "gt": ["%b = shl i32 2, %l", "%m = sub i32 %b, 1", "%r = xor i32 %m, -1"],
            "ge": ["%b = shl i32 1, %l", "%m = sub i32 %b, 1", "%r = xor i32 %m, -1"],
        }[m.group(1)]
        # lanemask.le for lane 31 is all ones: shl 2, 31 wraps to 0, and 0 - 1 is all ones.
        return [
            "%c = call ptr @__mneme_ctx()",
            f"%p = getelementptr i8, ptr %c, i64 {lane}",
            "%l = load i32, ptr %p, align 4, !invariant.load !{}",
            *[s for s in shifts if s],
            "ret i32 %r",
        ]
    else:
        return None
    return [
        "%c = call ptr @__mneme_ctx()",
        f"%p = getelementptr i8, ptr %c, i64 {offset}",
        "%r = load i32, ptr %p, align 4, !invariant.load !{}",
        "ret i32 %r",
    ]


def _float_math(name: str, sig: Signature) -> list[str] | None:
    ty = sig.ret
    parts = name.split(".")
    op = parts[0]
    flags = set(parts[1:])
    unary_intrinsic = {
        "fabs": "fabs",
        "ceil": "ceil",
        "floor": "floor",
        "trunc": "trunc",
        "round": "roundeven",
        "sqrt": "sqrt",
        "ex2": "exp2",
        "lg2": "log2",
        "sin": "sin",
        "cos": "cos",
    }
    suffix = {"float": "f32", "double": "f64"}.get(ty)
    if suffix is None:
        return None
    if op in unary_intrinsic and len(sig.params) == 1 and suffix:
        return [f"%r = call {ty} @llvm.{unary_intrinsic[op]}.{suffix}({ty} %a0)", f"ret {ty} %r"]
    if op == "tanh" and suffix:
        fn = "tanhf" if ty == "float" else "tanh"
        return [f"%r = call {ty} @{fn}({ty} %a0)", f"ret {ty} %r"]
    if op == "rsqrt" and suffix:
        return [f"%s = call {ty} @llvm.sqrt.{suffix}({ty} %a0)", f"%r = fdiv {ty} 1.0, %s", f"ret {ty} %r"]
    if op == "rcp" and suffix:
        return [f"%r = fdiv {ty} 1.0, %a0", f"ret {ty} %r"]
    if op in ("add", "mul", "div") and suffix and len(sig.params) == 2:
        return [f"%r = f{op} {ty} %a0, %a1", f"ret {ty} %r"]
    if op == "fma" and suffix:
        return [f"%r = call {ty} @llvm.fma.{suffix}({ty} %a0, {ty} %a1, {ty} %a2)", f"ret {ty} %r"]
    if op in ("fmin", "fmax") and suffix and len(sig.params) == 2:
        fn = ("minimum" if op == "fmin" else "maximum") if "nan" in flags else ("minnum" if op == "fmin" else "maxnum")
        return [f"%r = call {ty} @llvm.{fn}.{suffix}({ty} %a0, {ty} %a1)", f"ret {ty} %r"]
    if op == "saturate" and suffix:
        return [
            f"%m = call {ty} @llvm.maxnum.{suffix}({ty} %a0, {ty} 0.0)",
            f"%r = call {ty} @llvm.minnum.{suffix}({ty} %m, {ty} 1.0)",
            f"ret {ty} %r",
        ]
    return None


def _conversion(name: str, sig: Signature) -> list[str] | None:
    m = re.fullmatch(r"(f|d|i|ui|ll|ull)2(f|d|i|ui|ll|ull|h)\.(rn|rz|rm|rp)(\.ftz)?", name)
    if m:
        src, dst, mode = m.group(1), m.group(2), m.group(3)
        a, r = sig.params[0], sig.ret
        if src in ("f", "d") and dst in ("f", "d"):
            return [f"%r = fptrunc {a} %a0 to {r}", f"ret {r} %r"]
        if src in ("f", "d") and dst == "h":
            return ["%h = fptrunc float %a0 to half", "%r = bitcast half %h to i16", "ret i16 %r"]
        if src in ("f", "d"):
            rounding = {"rn": "roundeven", "rz": "trunc", "rm": "floor", "rp": "ceil"}[mode]
            suffix = "f32" if a == "float" else "f64"
            cast = "fptosi" if dst in ("i", "ll") else "fptoui"
            return [f"%t = call {a} @llvm.{rounding}.{suffix}({a} %a0)", f"%r = {cast} {a} %t to {r}", f"ret {r} %r"]
        cast = "sitofp" if src in ("i", "ll") else "uitofp"
        return [f"%r = {cast} {a} %a0 to {r}", f"ret {r} %r"]
    if name == "d2i.lo":
        return ["%b = bitcast double %a0 to i64", "%r = trunc i64 %b to i32", "ret i32 %r"]
    if name == "d2i.hi":
        return ["%b = bitcast double %a0 to i64", "%s = lshr i64 %b, 32", "%r = trunc i64 %s to i32", "ret i32 %r"]
    if name == "lohi.i2d":
        return [
            "%l = zext i32 %a0 to i64",
            "%h = zext i32 %a1 to i64",
            "%s = shl i64 %h, 32",
            "%b = or i64 %s, %l",
            "%r = bitcast i64 %b to double",
            "ret double %r",
        ]
    return None


def _integer(name: str, sig: Signature) -> list[str] | None:
    r = sig.ret
    if m := re.fullmatch(r"mulhi\.(i|ui|ll|ull|s|us)", name):
        wide = {"i32": "i64", "i64": "i128", "i16": "i32"}[r]
        bits = {"i32": 32, "i64": 64, "i16": 16}[r]
        ext = "zext" if m.group(1).startswith("u") else "sext"
        return [
            f"%x = {ext} {r} %a0 to {wide}",
            f"%y = {ext} {r} %a1 to {wide}",
            f"%m = mul {wide} %x, %y",
            f"%s = lshr {wide} %m, {bits}",
            f"%r = trunc {wide} %s to {r}",
            f"ret {r} %r",
        ]
    if m := re.fullmatch(r"mul24\.(i|ui)", name):
        ext = "sext" if m.group(1) == "i" else "zext"
        return [
            "%x = trunc i32 %a0 to i24",
            "%y = trunc i32 %a1 to i24",
            f"%xe = {ext} i24 %x to i32",
            f"%ye = {ext} i24 %y to i32",
            "%r = mul i32 %xe, %ye",
            "ret i32 %r",
        ]
    if m := re.fullmatch(r"sad\.(i|ui|s|us|ll|ull)", name):
        signed = not m.group(1).startswith("u")
        cmp = "sgt" if signed else "ugt"
        return [
            f"%gt = icmp {cmp} {r} %a0, %a1",
            f"%d1 = sub {r} %a0, %a1",
            f"%d2 = sub {r} %a1, %a0",
            f"%d = select i1 %gt, {r} %d1, {r} %d2",
            f"%r = add {r} %d, %a2",
            f"ret {r} %r",
        ]
    if name == "prmt":
        return ["%r = call i32 @__mneme_prmt(i32 %a0, i32 %a1, i32 %a2)", "ret i32 %r"]
    if m := re.fullmatch(r"(clz|popc|brev)\.(i|ll)", name):
        a = sig.params[0]
        fn = {"clz": "ctlz", "popc": "ctpop", "brev": "bitreverse"}[m.group(1)]
        extra = ", i1 false" if fn == "ctlz" else ""
        lines = [f"%v = call {a} @llvm.{fn}.{'i32' if a == 'i32' else 'i64'}({a} %a0{extra})"]
        if a != r:
            lines += [f"%r = trunc {a} %v to {r}", f"ret {r} %r"]
        else:
            lines += [f"ret {r} %v"]
        return lines
    return None


def _sync(name: str, sig: Signature) -> list[str] | None:
    if m := re.fullmatch(r"barrier0\.(popc|and|or)|barrier\.cta\.red\.(popc|and|or)(\..*)?", name):
        op = {"popc": 0, "and": 1, "or": 2}[m.group(1) or m.group(2)]
        pred = len(sig.params) - 1
        ptype = sig.params[pred]
        lines = [f"%p = zext {ptype} %a{pred} to i32" if ptype != "i32" else f"%p = add i32 %a{pred}, 0"]
        lines.append(f"%v = call i32 @__mneme_barrier_red(i32 {op}, i32 %p)")
        if sig.ret == "i32":
            lines.append("ret i32 %v")
        else:
            lines += [f"%r = trunc i32 %v to {sig.ret}", f"ret {sig.ret} %r"]
        return lines
    if name in ("barrier0", "barrier") or name.startswith("barrier."):
        if sig.ret != "void":
            return None
        return ["call void @__mneme_barrier()", "ret void"]
    if name == "bar.warp.sync":
        return ["call void @__mneme_warp_sync(i32 %a0)", "ret void"]
    if name.startswith(("membar.", "fence.sc", "fence.acq_rel")):
        return ["fence seq_cst", "ret void"]
    if m := re.fullmatch(r"shfl\.(sync\.)?(idx|up|down|bfly)\.(i32|f32)(?:\.(p)|(p))?", name):
        mode = _SHFL_MODES[m.group(2)]
        synced = bool(m.group(1))
        ty = "float" if m.group(3) == "f32" else "i32"
        v, b, c = (1, 2, 3) if synced else (0, 1, 2)
        mask = "%a0" if synced else "-1"
        lines = [f"%vi = bitcast {ty} %a{v} to i32" if ty == "float" else f"%vi = add i32 %a{v}, 0"]
        lines.append(f"%w = call i64 @__mneme_shfl(i32 {mode}, i32 {mask}, i32 %vi, i32 %a{b}, i32 %a{c})")
        lines.append("%lo = trunc i64 %w to i32")
        lines.append(f"%val = bitcast i32 %lo to {ty}" if ty == "float" else "%val = add i32 %lo, 0")
        if m.group(4) or m.group(5):
            lines += [
                "%hi = lshr i64 %w, 32",
                "%pr = trunc i64 %hi to i1",
                f"%s0 = insertvalue {sig.ret} poison, {ty} %val, 0",
                f"%s1 = insertvalue {sig.ret} %s0, i1 %pr, 1",
                f"ret {sig.ret} %s1",
            ]
        else:
            lines.append(f"ret {ty} %val")
        return lines
    if m := re.fullmatch(r"vote\.(all|any|uni|ballot)(\.sync)?", name):
        mode = _VOTE_MODES[m.group(1)]
        synced = bool(m.group(2))
        mask, pred = ("%a0", "%a1") if synced else ("-1", "%a0")
        lines = [f"%p = zext i1 {pred} to i32", f"%v = call i32 @__mneme_vote(i32 {mode}, i32 {mask}, i32 %p)"]
        if sig.ret == "i32":
            lines.append("ret i32 %v")
        else:
            lines += ["%r = trunc i32 %v to i1", "ret i1 %r"]
        return lines
    if name == "activemask":
        return ["%r = call i32 @__mneme_activemask()", "ret i32 %r"]
    if m := re.fullmatch(r"redux\.sync\.(add|min|max|umin|umax|and|or|xor)", name):
        return _over_lanes("%a1", "%a0", "i32", _REDUX[m.group(1)])
    if m := re.fullmatch(r"match\.(any|all)\.sync\.(i32|i64)p?", name):
        return _match(m.group(1), m.group(2), sig)
    return None


# redux.sync: (identity, the combining instructions over %acc and %x giving %acc2)
_REDUX = {
    "add": ("0", ["%acc2 = add i32 %acc, %x"]),
    "and": ("-1", ["%acc2 = and i32 %acc, %x"]),
    "or": ("0", ["%acc2 = or i32 %acc, %x"]),
    "xor": ("0", ["%acc2 = xor i32 %acc, %x"]),
    "min": ("2147483647", ["%lt = icmp slt i32 %x, %acc", "%acc2 = select i1 %lt, i32 %x, i32 %acc"]),
    "max": ("-2147483648", ["%gt = icmp sgt i32 %x, %acc", "%acc2 = select i1 %gt, i32 %x, i32 %acc"]),
    "umin": ("-1", ["%lt = icmp ult i32 %x, %acc", "%acc2 = select i1 %lt, i32 %x, i32 %acc"]),
    "umax": ("0", ["%gt = icmp ugt i32 %x, %acc", "%acc2 = select i1 %gt, i32 %x, i32 %acc"]),
}


def _over_lanes(
    mask: str, value: str, ty: str, combine: tuple[str, list[str]], result: str = "ret i32 %accn"
) -> list[str]:
    """A loop over the 32 lanes: each lane of `mask` in turn broadcasts `value` (shfl.sync.idx, defined for
    lanes in the mask) and `combine` folds it (`%x`, lane `%i`) into `%acc`; exact for any mask. The total is `%accn`."""
    init, steps = combine
    return [
        "br label %loop",
        "loop:",
        "%i = phi i32 [ 0, %0 ], [ %i2, %next ]",
        f"%acc = phi {ty} [ {init}, %0 ], [ %accn, %next ]",
        f"%bit = lshr i32 {mask}, %i",
        "%on = trunc i32 %bit to i1",
        "br i1 %on, label %take, label %next",
        "take:",
        f"%w = call i64 @__mneme_shfl(i32 0, i32 {mask}, i32 {value}, i32 %i, i32 31)",
        "%x = trunc i64 %w to i32",
        *steps,
        "br label %next",
        "next:",
        f"%accn = phi {ty} [ %acc2, %take ], [ %acc, %loop ]",
        "%i2 = add i32 %i, 1",
        "%done = icmp eq i32 %i2, 32",
        "br i1 %done, label %out, label %loop",
        "out:",
        result,
    ]


def _match(kind: str, width: str, sig: Signature) -> list[str]:
    """match.any.sync: the lanes of the mask holding this lane's value; match.all.sync: the mask (and true) when
    every lane of it holds the same value, else 0 (and false). A 64-bit value goes as two 32-bit halves."""
    lines = []
    if width == "i64":
        lines += ["%lo = trunc i64 %a1 to i32", "%hs = lshr i64 %a1, 32", "%hi = trunc i64 %hs to i32"]
    else:
        lines += ["%lo = add i32 %a1, 0"]
    # %acc: bit i set when lane i (in the mask) holds the same value as this lane
    steps = ["%same0 = icmp eq i32 %x, %lo"]
    if width == "i64":
        steps += [
            "%wh = call i64 @__mneme_shfl(i32 0, i32 %a0, i32 %hi, i32 %i, i32 31)",
            "%xh = trunc i64 %wh to i32",
            "%sameh = icmp eq i32 %xh, %hi",
            "%same = and i1 %same0, %sameh",
        ]
    else:
        steps += ["%same = and i1 %same0, true"]
    steps += ["%one = shl i32 1, %i", "%sel = select i1 %same, i32 %one, i32 0", "%acc2 = or i32 %acc, %sel"]
    if kind == "any":
        tail = "ret i32 %accn"
    else:
        tail = "br label %all"
    body = lines + _over_lanes("%a0", "%lo", "i32", ("0", steps), tail)
    if kind == "all":
        body += [
            "all:",
            "%eq = icmp eq i32 %accn, %a0",
            "%m = select i1 %eq, i32 %a0, i32 0",
            f"%s0 = insertvalue {sig.ret} poison, i32 %m, 0",
            f"%s1 = insertvalue {sig.ret} %s0, i1 %eq, 1",
            f"ret {sig.ret} %s1",
        ]
    return body


def _misc(name: str, sig: Signature) -> list[str] | None:
    if name == "reflect":
        return ["ret i32 0"]
    if m := re.fullmatch(r"isspacep\.(shared|global|local|const)(\..*)?", name):
        kind = m.group(1)
        if kind == "local" or kind == "const":
            return ["ret i1 false"]
        lines = ["%s = call i32 @__mneme_is_shared(ptr %a0)"]
        lines.append("%r = icmp ne i32 %s, 0" if kind == "shared" else "%r = icmp eq i32 %s, 0")
        return [*lines, "ret i1 %r"]
    if m := re.fullmatch(r"(ldg|ldu)\.global\.(i|f|p)(\..*)?", name):
        return [f"%r = load {sig.ret}, ptr %a0", f"ret {sig.ret} %r"]
    if m := re.fullmatch(r"atomic\.(add|exch|max|min|inc|dec|and|or|xor)\.gen\.(i|f)\.(cta|sys)(\.\w+)*", name):
        op = m.group(1)
        ty = sig.ret
        float_ty = ty in ("float", "double")
        rmw = {
            "add": "fadd" if float_ty else "add",
            "exch": "xchg",
            "max": "max",
            "min": "min",
            "inc": "uinc_wrap",
            "dec": "udec_wrap",
            "and": "and",
            "or": "or",
            "xor": "xor",
        }[op]
        return [f"%r = atomicrmw {rmw} ptr %a0, {ty} %a1 seq_cst", f"ret {ty} %r"]
    if re.fullmatch(r"atomic\.cas\.gen\.i\.(cta|sys)(\.\w+)*", name):  # clang 19 adds .i32.p0
        ty = sig.ret
        return [
            f"%p = cmpxchg ptr %a0, {ty} %a1, {ty} %a2 seq_cst seq_cst",
            f"%r = extractvalue {{ {ty}, i1 }} %p, 0",
            f"ret {ty} %r",
        ]
    return None


def implement(intrinsic: str, fn_type: str, new_name: str) -> str | None:
    """IR text defining `new_name` with the behaviour of NVVM intrinsic `intrinsic`, or None if unknown."""
    assert intrinsic.startswith("llvm.nvvm.")
    name = intrinsic[len("llvm.nvvm.") :]
    sig = Signature.parse(fn_type)
    for rule in (_sreg,):
        lines = rule(name)
        if lines:
            return sig.header(new_name) + "\n" + _body(lines) + "\n}"
    for rule in (_float_math, _conversion, _integer, _sync, _misc):
        try:
            lines = rule(name, sig)
        except (KeyError, IndexError):
            lines = None
        if lines:
            return sig.header(new_name) + "\n" + _body(lines) + "\n}"
    return None


# Inline PTX that libdevice uses, by exact asm text: (function body over %a0.., return type).
_MAD_CC = "{\\0A\\09mad.lo.cc.u32   $0, $2, $3, $4;\\0A\\09madc.hi.u32     $1, $2, $3,  0;\\0A\\09}"
INLINE_ASM = {
    "rcp.approx.ftz.f32 $0,$1;": ["%r = fdiv float 1.0, %a0", "ret float %r"],
    "rsqrt.approx.ftz.f64 $0, $1;": [
        "%s = call double @llvm.sqrt.f64(double %a0)",
        "%r = fdiv double 1.0, %s",
        "ret double %r",
    ],
    "bfind.shiftamt.u32 $0, $1;": [
        "%z = call i32 @llvm.ctlz.i32(i32 %a0, i1 false)",
        "%e = icmp eq i32 %a0, 0",
        "%r = select i1 %e, i32 -1, i32 %z",
        "ret i32 %r",
    ],
    _MAD_CC: [
        "%x = zext i32 %a0 to i64",
        "%y = zext i32 %a1 to i64",
        "%z = zext i32 %a2 to i64",
        "%m = mul i64 %x, %y",
        "%s = add i64 %m, %z",
        "%lo = trunc i64 %s to i32",
        "%sh = lshr i64 %s, 32",
        "%hi = trunc i64 %sh to i32",
        "%r0 = insertvalue { i32, i32 } poison, i32 %lo, 0",
        "%r1 = insertvalue { i32, i32 } %r0, i32 %hi, 1",
        "ret { i32, i32 } %r1",
    ],
}
_WIDE = [
    "%a = zext i64 %a0 to i128",
    "%b = zext i64 %a1 to i128",
]
_PAIR = [
    "%lo = trunc i128 %r to i64",
    "%s = lshr i128 %r, 64",
    "%hi = trunc i128 %s to i64",
    "%p0 = insertvalue { i64, i64 } poison, i64 %lo, 0",
    "%p1 = insertvalue { i64, i64 } %p0, i64 %hi, 1",
    "ret { i64, i64 } %p1",
]
_ADD128 = [
    "%al = zext i64 %a0 to i128",
    "%ah = zext i64 %a1 to i128",
    "%ahs = shl i128 %ah, 64",
    "%a = or i128 %ahs, %al",
    "%bl = zext i64 %a2 to i128",
    "%bh = zext i64 %a3 to i128",
    "%bhs = shl i128 %bh, 64",
    "%b = or i128 %bhs, %bl",
]
_REG4 = (
    "{\\0A\\09.reg .u32 r0, r1, r2, r3, a0, a1, a2, a3, b0, b1, b2, b3;\\0A\\09mov.b64 {a0,a1}, $2;\\0A\\09"
    "mov.b64 {a2,a3}, $3;\\0A\\09mov.b64 {b0,b1}, $4;\\0A\\09mov.b64 {b2,b3}, $5;\\0A\\09"
)
_OUT = "mov.b64 $0, {r0,r1};\\0A\\09mov.b64 $1, {r2,r3};\\0A\\09}"
INLINE_ASM.update(
    {
        "{ .reg .pred __$$temp3;\\0A setp.equ.f64 __$$temp3, $1, $2;\\0A selp.f64 $0, $3, $4, __$$temp3;}": [
            "%c = fcmp ueq double %a0, %a1",
            "%r = select i1 %c, double %a2, double %a3",
            "ret double %r",
        ],
        _REG4 + "add.cc.u32 r0, a0, b0; \\0A\\09addc.cc.u32 r1, a1, b1; \\0A\\09addc.cc.u32 r2, a2, b2; \\0A\\09"
        "addc.u32 r3, a3, b3; \\0A\\09" + _OUT: [*_ADD128, "%r = add i128 %a, %b", *_PAIR],
        _REG4 + "sub.cc.u32 r0, a0, b0; \\0A\\09subc.cc.u32 r1, a1, b1; \\0A\\09subc.cc.u32 r2, a2, b2; \\0A\\09"
        "subc.u32 r3, a3, b3; \\0A\\09" + _OUT: [*_ADD128, "%r = sub i128 %a, %b", *_PAIR],
        "{\\0A\\09.reg .u32 r0, r1, r2, r3, alo, ahi, blo, bhi, clo, chi;\\0A\\09mov.b64 {alo,ahi}, $2; \\0A\\09"
        "mov.b64 {blo,bhi}, $3; \\0A\\09mov.b64 {clo,chi}, $4; \\0A\\09mad.lo.cc.u32 r0, alo, blo, clo;\\0A\\09"
        "madc.hi.cc.u32 r1, alo, blo, chi;\\0A\\09madc.hi.u32 r2, alo, bhi, 0;\\0A\\09mad.lo.cc.u32 r1, alo, bhi, r1;"
        "\\0A\\09madc.hi.cc.u32 r2, ahi, blo, r2;\\0A\\09madc.hi.u32 r3, ahi, bhi, 0;\\0A\\09mad.lo.cc.u32 r1, ahi, "
        "blo, r1;\\0A\\09madc.lo.cc.u32 r2, ahi, bhi, r2;\\0A\\09addc.u32 r3, r3, 0; \\0A\\09mov.b64 $0, {r0,r1}; "
        "\\0A\\09mov.b64 $1, {r2,r3}; \\0A\\09}": [
            *_WIDE,
            "%c = zext i64 %a2 to i128",
            "%m = mul i128 %a, %b",
            "%r = add i128 %m, %c",
            *_PAIR,
        ],
        "{\\0A\\09.reg .u32 r0, r1, r2, r3, alo, ahi, blo, bhi;\\0A\\09mov.b64 {alo,ahi}, $2; \\0A\\09"
        "mov.b64 {blo,bhi}, $3; \\0A\\09mul.lo.u32 r0, alo, blo; \\0A\\09mul.hi.u32 r1, alo, blo; \\0A\\09"
        "mad.lo.cc.u32 r1, alo, bhi, r1;\\0A\\09madc.hi.u32 r2, alo, bhi, 0;\\0A\\09mad.lo.cc.u32 r1, ahi, blo, r1;"
        "\\0A\\09madc.hi.cc.u32 r2, ahi, blo, r2;\\0A\\09madc.hi.u32 r3, ahi, bhi, 0;\\0A\\09mad.lo.cc.u32 r2, ahi, "
        "bhi, r2;\\0A\\09addc.u32 r3, r3, 0; \\0A\\09mov.b64 $0, {r0,r1}; \\0A\\09mov.b64 $1, {r2,r3}; \\0A\\09}": [
            *_WIDE,
            "%r = mul i128 %a, %b",
            *_PAIR,
        ],
    }
)


for _reg in ("laneid", "warpid", "nwarpid"):  # cooperative groups read them with inline asm
    INLINE_ASM[f"mov.u32 $0, %{_reg};"] = [
        "%c = call ptr @__mneme_ctx()",
        f"%p = getelementptr i8, ptr %c, i64 {CTX_OFFSETS[_reg]}",
        "%r = load i32, ptr %p, align 4, !invariant.load !{}",
        "ret i32 %r",
    ]


# %envreg1 and %envreg2: the high and low halves of the driver's grid workspace address, where cooperative
# groups keep the grid barrier's word; the runtime gives each grid launch one, zeroed.
for _reg, _half in (
    ("envreg1", ["%s = lshr i64 %w, 32", "%r = trunc i64 %s to i32"]),
    ("envreg2", ["%r = trunc i64 %w to i32"]),
):
    INLINE_ASM[f"mov.u32 $0, %{_reg};"] = ["%w = call i64 @__mneme_grid_workspace()", *_half, "ret i32 %r"]


# The host is one SM, as the %smid/%nsmid intrinsics above say: CUDA guarantees no more than smid < nsmid
INLINE_ASM["mov.u32 $0, %smid;"] = ["ret i32 0"]
INLINE_ASM["mov.u32 $0, %nsmid;"] = ["ret i32 1"]


# Programmatic dependent launch (sm_90): a replayed launch runs alone, so no prerequisite grid is in flight
# (the wait returns at once) and no dependent grid waits for the trigger.
INLINE_ASM["trap;"] = ["call void @__mneme_trap()", "unreachable"]  # the launch fails, as on the GPU
INLINE_ASM["griddepcontrol.wait;"] = ["ret void"]
INLINE_ASM["griddepcontrol.launch_dependents;"] = ["ret void"]

# cuda_fp16.hpp's half2 -> half / float of one half (__low2half, __high2float, ...)
for _half, _shift in (("low", 0), ("high", 16)):
    _pick = [f"%s = lshr i32 %a0, {_shift}", "%h = trunc i32 %s to i16"]
    for _comma in (",", ", "):
        INLINE_ASM[f"{{.reg .f16 low,high; mov.b32 {{low,high}}{_comma}$1; mov.b16 $0, {_half};}}"] = [
            *_pick,
            "ret i16 %h",
        ]
        INLINE_ASM[f"{{.reg .f16 low,high; mov.b32 {{low,high}}{_comma}$1; cvt.f32.f16 $0, {_half};}}"] = [
            *_pick,
            "%f = bitcast i16 %h to half",
            "%r = fpext half %f to float",
            "ret float %r",
        ]


def normalize_asm(text: str) -> str:
    """Inline asm text with runs of whitespace (spaces, escaped tabs and newlines) made one space."""
    return re.sub(r"(?:\s|\\0A|\\09)+", " ", text).strip()


INLINE_ASM = {normalize_asm(k): v for k, v in INLINE_ASM.items()}


for _rm in ("rn", "rz", "rm", "rp"):
    for _ftz in ("", ".ftz"):
        INLINE_ASM[f"sub.{_rm}{_ftz}.f32 $0, $1, $2;"] = ["%r = fsub float %a0, %a1", "ret float %r"]
    INLINE_ASM[f"sub.{_rm}.f64 $0, $1, $2;"] = ["%r = fsub double %a0, %a1", "ret double %r"]


def inline_asm(text: str) -> list[str] | None:
    """The host body for a known inline PTX string (as written in IR text), or None."""
    return INLINE_ASM.get(normalize_asm(text))
