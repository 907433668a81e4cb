"""Host implementations of AMDGPU cross-lane intrinsics: ballots, lane reads, DPP, permutes.

Every operation meets the wave (64 lanes on gfx9, 32 by default on gfx10 and later) through two
runtime functions: ``__mneme_wave_read(value, lane)`` (every lane puts a 32-bit value, each reads
the one of lane ``lane``; past the wave's end it reads 0) and ``__mneme_wave_ballot(pred)`` (the
64-bit mask of the lanes whose predicate holds). Values wider than 32 bits travel in halves. The
host runs whole waves, so every lane is active (``exec`` is all ones). See docs/design/host-amdgpu.md.
"""

from __future__ import annotations

import re

from mneme.plugins.backends.host.intrinsics import CTX_OFFSETS, Signature

# LLVM integer comparison predicates (llvm::CmpInst), as used by llvm.amdgcn.icmp.
ICMP = {32: "eq", 33: "ne", 34: "ugt", 35: "uge", 36: "ult", 37: "ule", 38: "sgt", 39: "sge", 40: "slt", 41: "sle"}
# ... and the floating-point ones, as used by llvm.amdgcn.fcmp.
FCMP = {
    0: "false",
    1: "oeq",
    2: "ogt",
    3: "oge",
    4: "olt",
    5: "ole",
    6: "one",
    7: "ord",
    8: "uno",
    9: "ueq",
    10: "ugt",
    11: "uge",
    12: "ult",
    13: "ule",
    14: "une",
    15: "true",
}
# The intrinsics below that meet the wave (the kernel then runs one fiber per work-item).
CROSS_LANE = re.compile(
    r"ds\.bpermute|ds\.permute|ds\.swizzle|readlane|readfirstlane|ballot|icmp|fcmp|mov\.dpp8?|update\.dpp"
    r"|permlanex?16|permlane64"
)


def lane_id() -> list[str]:
    """Lines that load this work-item's lane in its wave into ``%lane``."""
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
    if ty in ("<2 x i16>", "<2 x half>", "<2 x bfloat>", "<4 x i8>"):
        return [f"{out} = bitcast {ty} {value} to i32"]
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
    if ty in ("<2 x i16>", "<2 x half>", "<2 x bfloat>", "<4 x i8>"):
        return [f"{out} = bitcast i32 {value} to {ty}"]
    raise KeyError(ty)


_WIDE = {
    "i64": "",
    "double": "bitcast double",
    "ptr": "ptrtoint ptr",
    "<2 x i32>": "bitcast <2 x i32>",
    "<2 x float>": "bitcast <2 x float>",
    "<4 x i16>": "bitcast <4 x i16>",
    "<4 x half>": "bitcast <4 x half>",
}


def read_lane(ty: str, value: str, src: str, out: str = "%r") -> list[str]:
    """Lines that read `value` (of type `ty`) from lane `src` (an i32) into `out` (of type `ty`)."""
    if ty in _WIDE:
        to = _WIDE[ty]
        lines = [f"{out}.w = {to} {value} to i64" if to else f"{out}.w = add i64 {value}, 0"]
        lines += [
            f"{out}.lo = trunc i64 {out}.w to i32",
            f"{out}.hs = lshr i64 {out}.w, 32",
            f"{out}.hi = trunc i64 {out}.hs to i32",
            f"{out}.rlo = call i32 @__mneme_wave_read(i32 {out}.lo, i32 {src})",
            f"{out}.rhi = call i32 @__mneme_wave_read(i32 {out}.hi, i32 {src})",
            f"{out}.zlo = zext i32 {out}.rlo to i64",
            f"{out}.zhi = zext i32 {out}.rhi to i64",
            f"{out}.sh = shl i64 {out}.zhi, 32",
            f"{out}.v = or i64 {out}.sh, {out}.zlo",
        ]
        back = {"i64": f"{out} = add i64 {out}.v, 0", "ptr": f"{out} = inttoptr i64 {out}.v to ptr"}
        return [*lines, back.get(ty, f"{out} = bitcast i64 {out}.v to {ty}")]
    return [
        *_as_i32(ty, value, f"{out}.vi"),
        f"{out}.ri = call i32 @__mneme_wave_read(i32 {out}.vi, i32 {src})",
        *_from_i32(ty, f"{out}.ri", out),
    ]


def _ballot_of(pred: str, ret: str) -> list[str]:
    lines = [f"%p = zext i1 {pred} to i32", "%b = call i64 @__mneme_wave_ballot(i32 %p)"]
    return [*lines, "ret i64 %b"] if ret == "i64" else [*lines, "%r = trunc i64 %b to i32", "ret i32 %r"]


def _compare(kind: str, predicates: dict[int, str], ty: str) -> list[str]:
    """The comparison of %a0 and %a1 under the predicate code %a2 (an immediate LLVM folds)."""
    lines, prev = [], "false"
    for code, pred in predicates.items():
        lines += [
            f"%c{code} = {kind} {pred} {ty} %a0, %a1",
            f"%is{code} = icmp eq i32 %a2, {code}",
            f"%s{code} = select i1 %is{code}, i1 %c{code}, i1 {prev}",
        ]
        prev = f"%s{code}"
    return [*lines, f"%pred = or i1 {prev}, false"]


# -- DPP -----------------------------------------------------------------------------------------------


def dpp_source() -> list[str]:
    """Lines that compute, from ``%lane`` and the DPP control ``%ctrl``, the source lane ``%src`` and
    whether it exists (``%valid``): quad_perm (0x00-0xFF), row_shl/shr/ror:1-15 (0x101-0x12F),
    wave_shl/rol/shr/ror:1 (0x130/134/138/13C), row_mirror (0x140), row_half_mirror (0x141),
    row_bcast:15 (0x142, lane 15 of the row below; row 0 has none), row_bcast:31 (0x143, lane 31 for
    lanes 32 and up), row_share:0-15 (0x150) and row_xmask:0-15 (0x160). A row is 16 lanes."""
    cases = [
        # (condition on ctrl, source lane, valid)
        ("%isquad", "%quad", "true"),
        ("%isshl", "%shl", "%shlok"),
        ("%isshr", "%shr", "%shrok"),
        ("%isror", "%ror", "true"),
        ("%iswshl", "%lane1", "%wshlok"),
        ("%iswrol", "%wrol", "true"),
        ("%iswshr", "%lanem1", "%notfirst"),
        ("%iswror", "%wror", "true"),
        ("%ismirror", "%mirror", "true"),
        ("%ishalf", "%half", "true"),
        ("%isb15", "%b15", "%b15ok"),
        ("%isb31", "31", "%b31ok"),
        ("%isshare", "%share", "true"),
        ("%isxmask", "%xmask", "true"),
    ]
    lines = [
        "%inrow = and i32 %lane, 15",
        "%row0 = and i32 %lane, -16",
        "%n = and i32 %ctrl, 15",
        "%isquad = icmp ult i32 %ctrl, 256",
        "%q = and i32 %lane, 3",
        "%qs = shl i32 %q, 1",
        "%qsel0 = lshr i32 %ctrl, %qs",
        "%qsel = and i32 %qsel0, 3",
        "%qbase = and i32 %lane, -4",
        "%quad = or i32 %qbase, %qsel",
        "%hi = and i32 %ctrl, -16",
        "%isshl0 = icmp eq i32 %hi, 256",
        "%nz = icmp ne i32 %n, 0",
        "%isshl = and i1 %isshl0, %nz",
        "%s1 = add i32 %inrow, %n",
        "%shlok = icmp ult i32 %s1, 16",
        "%shl = add i32 %row0, %s1",
        "%isshr0 = icmp eq i32 %hi, 272",
        "%isshr = and i1 %isshr0, %nz",
        "%s2 = sub i32 %inrow, %n",
        "%shrok = icmp sge i32 %s2, 0",
        "%shr = add i32 %row0, %s2",
        "%isror0 = icmp eq i32 %hi, 288",
        "%isror = and i1 %isror0, %nz",
        "%s3 = and i32 %s2, 15",
        "%ror = add i32 %row0, %s3",
        "%iswshl = icmp eq i32 %ctrl, 304",
        "%lane1 = add i32 %lane, 1",
        "%wshlok = icmp ult i32 %lane1, %wave",
        "%iswrol = icmp eq i32 %ctrl, 308",
        "%wavem1 = sub i32 %wave, 1",
        "%wrol = and i32 %lane1, %wavem1",
        "%iswshr = icmp eq i32 %ctrl, 312",
        "%lanem1 = sub i32 %lane, 1",
        "%notfirst = icmp ne i32 %lane, 0",
        "%iswror = icmp eq i32 %ctrl, 316",
        "%wror = and i32 %lanem1, %wavem1",
        "%ismirror = icmp eq i32 %ctrl, 320",
        "%mi = sub i32 15, %inrow",
        "%mirror = add i32 %row0, %mi",
        "%ishalf = icmp eq i32 %ctrl, 321",
        "%h0 = and i32 %lane, -8",
        "%h1 = and i32 %lane, 7",
        "%h2 = sub i32 7, %h1",
        "%half = add i32 %h0, %h2",
        "%isb15 = icmp eq i32 %ctrl, 322",
        "%b15 = sub i32 %row0, 1",
        "%b15ok = icmp uge i32 %lane, 16",
        "%isb31 = icmp eq i32 %ctrl, 323",
        "%b31ok = icmp uge i32 %lane, 32",
        "%isshare = icmp eq i32 %hi, 336",
        "%share = add i32 %row0, %n",
        "%isxmask = icmp eq i32 %hi, 352",
        "%x0 = xor i32 %inrow, %n",
        "%xmask = add i32 %row0, %x0",
    ]
    src, valid = "0", "false"
    for k, (cond, lane, ok) in enumerate(cases):
        lines += [
            f"%src{k} = select i1 {cond}, i32 {lane}, i32 {src}",
            f"%ok{k} = select i1 {cond}, i1 {ok}, i1 {valid}",
        ]
        src, valid = f"%src{k}", f"%ok{k}"
    return [*lines, f"%src = select i1 {valid}, i32 {src}, i32 0", f"%valid = or i1 {valid}, false"]


def zero_of(ty: str) -> str:
    """The zero constant of IR type `ty`."""
    if ty.startswith("<"):
        return "zeroinitializer"
    if ty == "ptr":
        return "null"
    return "0.0" if ty in ("float", "double", "half", "bfloat") else "0"


def _dpp(
    ty: str, old: str, src: str, ctrl: str, row_mask: str, bank_mask: str, bound_ctrl: str, wave: int
) -> list[str]:
    """``update.dpp``: each lane reads the DPP source lane's `src`. A lane whose row (``lane / 16``)
    or bank (``lane / 4 % 4``) is masked off keeps `old`; one whose source lane does not exist writes
    0 with `bound_ctrl`, else keeps `old`."""
    lines = [*lane_id(), f"%ctrl = add i32 {ctrl}, 0", f"%wave = add i32 {wave}, 0", *dpp_source()]
    lines += read_lane(ty, src, "%src", "%moved")
    zero = zero_of(ty)
    lines += [
        f"%unread = select i1 {bound_ctrl}, {ty} {zero}, {ty} {old}",
        f"%written = select i1 %valid, {ty} %moved, {ty} %unread",
        "%row = lshr i32 %lane, 4",
        f"%rm = lshr i32 {row_mask}, %row",
        "%rm1 = and i32 %rm, 1",
        "%bank0 = lshr i32 %lane, 2",
        "%bank = and i32 %bank0, 3",
        f"%bm = lshr i32 {bank_mask}, %bank",
        "%bm1 = and i32 %bm, 1",
        "%en0 = and i32 %rm1, %bm1",
        "%en = icmp ne i32 %en0, 0",
        f"%r = select i1 %en, {ty} %written, {ty} {old}",
        f"ret {ty} %r",
    ]
    return lines


def _dpp8(ty: str) -> list[str]:
    """``mov.dpp8``: lane ``8k + i`` reads lane ``8k + sel[3i+2:3i]``."""
    lines = [
        *lane_id(),
        "%i = and i32 %lane, 7",
        "%sh = mul i32 %i, 3",
        "%s0 = lshr i32 %a1, %sh",
        "%s = and i32 %s0, 7",
        "%g = and i32 %lane, -8",
        "%src = or i32 %g, %s",
    ]
    return [*lines, *read_lane(ty, "%a0", "%src"), f"ret {ty} %r"]


def _permlane16(ty: str, cross: bool) -> list[str]:
    """``permlane16``: lane ``16r + i`` reads lane ``16r + sel[4i+3:4i]``, `sel` the 64 bits
    {%a3:%a2}; ``permlanex16`` reads from the other row of the lane's 32-lane half."""
    lines = [
        *lane_id(),
        "%i = and i32 %lane, 15",
        "%sh0 = mul i32 %i, 4",
        "%sh = zext i32 %sh0 to i64",
        "%lo = zext i32 %a2 to i64",
        "%hi0 = zext i32 %a3 to i64",
        "%hi = shl i64 %hi0, 32",
        "%sel = or i64 %hi, %lo",
        "%s0 = lshr i64 %sel, %sh",
        "%s1 = trunc i64 %s0 to i32",
        "%s = and i32 %s1, 15",
        "%row = and i32 %lane, -16",
        f"%row1 = xor i32 %row, {16 if cross else 0}",
        "%src = or i32 %row1, %s",
    ]
    return [*lines, *read_lane(ty, "%a1", "%src"), f"ret {ty} %r"]


def _permute(wave: int) -> list[str]:
    """``ds.permute``: lane i sends %a1 to lane ``%a0 / 4 mod 64``; a lane receiving from several
    takes the highest sender's value, from none 0. Six ballots tell every lane every destination."""
    lines = [*lane_id(), "%d0 = lshr i32 %a0, 2", "%dst = and i32 %d0, 63", f"%match0 = add i64 {(1 << wave) - 1}, 0"]
    prev = "%match0"
    for bit in range(6):
        lines += [
            f"%db{bit} = lshr i32 %dst, {bit}",
            f"%p{bit} = and i32 %db{bit}, 1",
            f"%B{bit} = call i64 @__mneme_wave_ballot(i32 %p{bit})",
            f"%nB{bit} = xor i64 %B{bit}, -1",
            f"%lb{bit} = lshr i32 %lane, {bit}",
            f"%l{bit} = and i32 %lb{bit}, 1",
            f"%set{bit} = icmp ne i32 %l{bit}, 0",
            f"%want{bit} = select i1 %set{bit}, i64 %B{bit}, i64 %nB{bit}",
            f"%m{bit} = and i64 {prev}, %want{bit}",
        ]
        prev = f"%m{bit}"
    lines += [
        f"%none = icmp eq i64 {prev}, 0",
        f"%lz = call i64 @llvm.ctlz.i64(i64 {prev}, i1 false)",
        "%lz32 = trunc i64 %lz to i32",
        "%from = sub i32 63, %lz32",
        "%v = call i32 @__mneme_wave_read(i32 %a1, i32 %from)",
        "%r = select i1 %none, i32 0, i32 %v",
        "ret i32 %r",
    ]
    return lines


def _swizzle() -> list[str]:
    """``ds.swizzle``: offset >= 0x8000: quad permute (2 bits per lane of each quad); else the
    bit-mask mode over groups of 32 lanes: ``((lane & and) | or) ^ xor`` (5-bit masks)."""
    return [
        *lane_id(),
        "%quad = icmp uge i32 %a1, 32768",
        "%q = and i32 %lane, 3",
        "%qs = shl i32 %q, 1",
        "%sel0 = lshr i32 %a1, %qs",
        "%sel = and i32 %sel0, 3",
        "%qbase = and i32 %lane, -4",
        "%qsrc = or i32 %qbase, %sel",
        "%andm = and i32 %a1, 31",
        "%or0 = lshr i32 %a1, 5",
        "%orm = and i32 %or0, 31",
        "%x0 = lshr i32 %a1, 10",
        "%xorm = and i32 %x0, 31",
        "%lo = and i32 %lane, 31",
        "%t0 = and i32 %lo, %andm",
        "%t1 = or i32 %t0, %orm",
        "%t2 = xor i32 %t1, %xorm",
        "%grp = and i32 %lane, -32",
        "%bsrc = or i32 %grp, %t2",
        "%src = select i1 %quad, i32 %qsrc, i32 %bsrc",
        "%r = call i32 @__mneme_wave_read(i32 %a0, i32 %src)",
        "ret i32 %r",
    ]


def _mbcnt(name: str) -> list[str]:
    """Popcount of the mask's bits for the lanes below this one, in the low or high 32 lanes, plus %a1."""
    lines = [*lane_id(), "%l64 = zext i32 %lane to i64", "%bit = shl i64 1, %l64", "%below = sub i64 %bit, 1"]
    if name == "mbcnt.hi":
        lines += ["%below.hi = lshr i64 %below, 32", "%b32 = trunc i64 %below.hi to i32"]
    else:
        lines.append("%b32 = trunc i64 %below to i32")
    return [
        *lines,
        "%m = and i32 %a0, %b32",
        "%n = call i32 @llvm.ctpop.i32(i32 %m)",
        "%r = add i32 %n, %a1",
        "ret i32 %r",
    ]


def implement(name: str, sig: Signature, wave: int) -> list[str] | None:
    """The body of intrinsic ``llvm.amdgcn.<name>`` when it is a lane operation, else None."""
    if name == "wavefrontsize":
        return [f"ret i32 {wave}"]
    if name in ("mbcnt.lo", "mbcnt.hi"):
        return _mbcnt(name)
    if name == "ds.bpermute":  # a byte address: lane = addr / 4, modulo the wave
        return [
            "%l = lshr i32 %a0, 2",
            f"%s = and i32 %l, {wave - 1}",
            "%r = call i32 @__mneme_wave_read(i32 %a1, i32 %s)",
            "ret i32 %r",
        ]
    if name == "ds.permute":
        return _permute(wave)
    if name == "ds.swizzle":
        return _swizzle()
    if re.fullmatch(r"readlane(\..+)?", name):
        return [*read_lane(sig.ret, "%a0", "%a1"), f"ret {sig.ret} %r"]
    if re.fullmatch(r"readfirstlane(\..+)?", name):
        # the first active lane; the host runs whole waves, so lane 0 (docs/design/host-amdgpu.md)
        return [*read_lane(sig.ret, "%a0", "0"), f"ret {sig.ret} %r"]
    if re.fullmatch(r"writelane(\..+)?", name):  # the value and lane are uniform: no meeting
        return [
            *lane_id(),
            "%me = icmp eq i32 %lane, %a1",
            f"%r = select i1 %me, {sig.ret} %a0, {sig.ret} %a2",
            f"ret {sig.ret} %r",
        ]
    if m := re.fullmatch(r"ballot\.(i32|i64)", name):
        return _ballot_of("%a0", m.group(1))
    if m := re.fullmatch(r"icmp\.(i32|i64)\.(i\d+)", name):
        return [*_compare("icmp", ICMP, m.group(2)), *_ballot_of("%pred", m.group(1))]
    if m := re.fullmatch(r"fcmp\.(i32|i64)\.(f16|f32|f64)", name):
        ty = {"f16": "half", "f32": "float", "f64": "double"}[m.group(2)]
        return [*_compare("fcmp", FCMP, ty), *_ballot_of("%pred", m.group(1))]
    if re.fullmatch(r"update\.dpp(\..+)?", name):
        return _dpp(sig.ret, "%a0", "%a1", "%a2", "%a3", "%a4", "%a5", wave)
    if re.fullmatch(r"mov\.dpp(\.[^8].*)?", name):  # lanes the GPU leaves unwritten read 0 here
        return _dpp(sig.ret, zero_of(sig.ret), "%a0", "%a1", "%a2", "%a3", "%a4", wave)
    if re.fullmatch(r"mov\.dpp8(\..+)?", name):
        return _dpp8(sig.ret)
    if m := re.fullmatch(r"permlane(x?)16(\..+)?", name):
        return _permlane16(sig.ret, bool(m.group(1)))
    if re.fullmatch(r"permlane64(\..+)?", name):
        if wave != 64:
            return [f"ret {sig.ret} %a0"]
        return [*lane_id(), "%src = xor i32 %lane, 32", *read_lane(sig.ret, "%a0", "%src"), f"ret {sig.ret} %r"]
    if re.fullmatch(r"(set\.inactive|strict\.wwm|strict\.wqm|wwm|wqm|softwqm)(\..+)?", name):
        return [f"ret {sig.ret} %a0"]  # every lane is active on the host
    if name in ("live.mask", "ps.live"):
        return ["ret i1 true"]
    return None
