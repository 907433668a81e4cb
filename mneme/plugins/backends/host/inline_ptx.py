"""Single PTX instructions written as inline asm, run on the host with the GPU's semantics.

CUDA's fp16/bf16 headers and hand-written kernels use one-instruction asm for conversions and
packing (``cvt.rn.f16.f32 $0, $1;``, ``mov.b32 $0, {$1,$2};``). Rather than list each string,
this reads the instruction and writes its LLVM IR, for the forms whose host result is exactly the
GPU's (docs/design/internals.md, "Host backend: inline PTX"):

* ``cvt`` between f16/bf16/f32/f64 (widening; narrowing with ``.rn``), float to integer with
  ``.rni/.rzi/.rmi/.rpi`` (saturating, NaN to 0, as PTX does), integer to f32/f64/f16 with ``.rn``,
  ``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32``, the fp8 pairs widened to f16
  (``cvt.rn.f16x2.e4m3x2`` / ``.e5m2x2``, exact) and f32/f16 pairs narrowed to fp8
  (``cvt.rn.satfinite.e4m3x2.f32`` and the like: rounded to nearest even, saturated);
* ``mov.b32``/``mov.b64`` packing and unpacking register pairs;
* ``ld[.global][.nc][.v2|.v4].type``: a plain load (one address space, no cache to bypass);
  ``ld.acquire|relaxed.gpu|sys`` of 32 or 64 bits: an atomic load through the runtime, which lets the
  other blocks of a grid launch run first (cooperative groups' grid barrier polls so);
* ``atom`` on integers in global or generic memory (add, min, max, and, or, xor, exch, cas): an LLVM
  atomic of the same memory order;
* ``add/sub/mul`` on f16 and bf16 (and their x2 pairs) with ``.rn`` or no rounding modifier:
  computed in f32 and rounded once, which is correctly rounded because f32 carries more than
  twice their precision plus two bits;
* ``dp4a.{u32,s32}.{u32,s32}`` and ``dp2a.{lo,hi}.{u32,s32}.{u32,s32}`` (CUDA's ``__dp4a``,
  ``__dp2a_lo``/``__dp2a_hi``: the int8 dot products of quantized matrix products): the bytes (and
  for dp2a the 16-bit halves of the first operand) widened as their types say, multiplied, summed
  and added to the third operand modulo 2^32, as the GPU does;
* the SIMD video instructions on bytes and halves with every field selected (CUDA's ``__vsub4``,
  ``__vsubss4``, ``__vseteq4``, ``__vmaxu2`` and the like): ``vadd/vsub/vmin/vmax/vabsdiff`` and
  ``vset`` with a comparison, ``4`` or ``2`` fields, ``.sat`` clamping to the destination's field;
  no ``.add``, masks or selectors.

Blocks of several instructions over their own registers are `ptx_blocks`'. Anything else
returns None: the backend names the asm as unsupported.
"""

from __future__ import annotations

import re

_FLOAT = {"f16": ("half", 16), "bf16": ("bfloat", 16), "f32": ("float", 32), "f64": ("double", 64)}
_INT = {f"{s}{w}": (s == "s", w) for s in "su" for w in (8, 16, 32, 64)}
_INT.update({f"b{w}": (False, w) for w in (16, 32, 64)})
_ROUND_INT = {"rni": "llvm.roundeven", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}
_OPERAND = re.compile(r"\$(\d+)")


def _parse(text: str) -> tuple[str, list[str]] | None:
    text = re.sub(r"(?:\s|\\0A|\\09)+", " ", text).strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.count(";") != 1 or not text.endswith(";") or "{" in text.replace("{$", "") or "%" in text:
        return None
    op, _, rest = text[:-1].strip().partition(" ")
    operands = [o.strip() for o in re.split(r",(?![^{]*\})", rest)]
    return op, operands


class _Body:
    """IR lines over the asm call's arguments (%a0.. are the inputs, numbered after the outputs) returning its type."""

    def __init__(self, ret: str, args: list[str], outputs: int = 1):
        self.ret, self.args, self.outputs, self.lines, self.n = ret, args, outputs, [], 0

    def tmp(self, line: str) -> str:
        self.n += 1
        self.lines.append(f"%t{self.n} = {line}")
        return f"%t{self.n}"

    def arg(self, operand: str, reg_type: str) -> str | None:
        m = re.fullmatch(r"\$(\d+)", operand)
        index = int(m.group(1)) - self.outputs if m else -1  # inputs are numbered after the outputs
        if not 0 <= index < len(self.args):
            return None
        return f"%a{index}" if self.args[index] == reg_type else None


def _reg(ptx_type: str) -> str:
    if ptx_type in ("f32", "f64"):
        return _FLOAT[ptx_type][0]
    width = _FLOAT[ptx_type][1] if ptx_type in _FLOAT else _INT[ptx_type][1]
    return f"i{max(width, 16) if ptx_type in _FLOAT else width}"


def _float_in(b: _Body, operand: str, ptx_type: str) -> str | None:
    """The operand as an LLVM floating value of its PTX type."""
    llvm_type, width = _FLOAT[ptx_type]
    value = b.arg(operand, _reg(ptx_type))
    if value is None or width != 16:
        return value
    return b.tmp(f"bitcast i16 {value} to {llvm_type}")


def _float_out(b: _Body, value: str, ptx_type: str) -> str:
    llvm_type, width = _FLOAT[ptx_type]
    return b.tmp(f"bitcast {llvm_type} {value} to i16") if width == 16 else value


def _convert_float(b: _Body, value: str, src: str, dst: str, rounding: str) -> str | None:
    (src_t, src_w), (dst_t, dst_w) = _FLOAT[src], _FLOAT[dst]
    if src == dst:
        return value
    if {src, dst} == {"f16", "bf16"} or dst_w < src_w:  # narrowing: round to nearest even only
        if rounding != "rn":
            return None
        if {src, dst} == {"f16", "bf16"}:
            value = b.tmp(f"fpext {src_t} {value} to float")
            src_t = "float"
        return b.tmp(f"fptrunc {src_t} {value} to {dst_t}")
    return b.tmp(f"fpext {src_t} {value} to {dst_t}") if not rounding else None


def _cvt(b: _Body, mods: list[str], operands: list[str]) -> bool:
    if len(mods) < 2 or len(operands) != 2 or operands[0] != "$0":
        return False
    dst, src = mods[-2], mods[-1]
    rounding = mods[0] if len(mods) == 3 else ""
    if len(mods) > 3:
        return False
    if src in _FLOAT and dst in _FLOAT:
        if b.ret != _reg(dst) or (value := _float_in(b, operands[1], src)) is None:
            return False
        out = _convert_float(b, value, src, dst, rounding)
        if out is None:
            return False
        b.lines.append(f"ret {b.ret} {_float_out(b, out, dst)}")
        return True
    if src in _FLOAT and dst in _INT and rounding in _ROUND_INT:
        signed, width = _INT[dst]
        value = _float_in(b, operands[1], src)
        if value is None or not re.fullmatch(r"i\d+", b.ret) or int(b.ret[1:]) < width:
            return False
        llvm_type = _FLOAT[src][0]
        if llvm_type in ("half", "bfloat"):  # exact in f32
            value, llvm_type = b.tmp(f"fpext {llvm_type} {value} to float"), "float"
        suffix = {"float": "f32", "double": "f64"}[llvm_type]
        rounded = b.tmp(f"call {llvm_type} @{_ROUND_INT[rounding]}.{suffix}({llvm_type} {value})")
        sat = "fptosi" if signed else "fptoui"
        out = b.tmp(f"call i{width} @llvm.{sat}.sat.i{width}.{suffix}({llvm_type} {rounded})")
        if int(b.ret[1:]) > width:
            out = b.tmp(f"{'sext' if signed else 'zext'} i{width} {out} to {b.ret}")
        b.lines.append(f"ret {b.ret} {out}")
        return True
    if src in _INT and dst in ("f16", "f32", "f64") and rounding == "rn" and not src.startswith("b"):
        signed, width = _INT[src]
        value = b.arg(operands[1], f"i{max(width, 16) if width == 8 else width}")
        if value is None or b.ret != _reg(dst):
            return False
        if width == 8:
            value = b.tmp(f"trunc i16 {value} to i8")
        # f16 through f64: every integer below f16's overflow threshold is exact in f64, so one rounding
        wide = b.tmp(
            f"{'sitofp' if signed else 'uitofp'} i{width} {value} to {'double' if dst == 'f16' else _FLOAT[dst][0]}"
        )
        out = b.tmp(f"fptrunc double {wide} to half") if dst == "f16" else wide
        b.lines.append(f"ret {b.ret} {_float_out(b, out, dst)}")
        return True
    return False


def _cvt_pair(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """cvt.rn.f16x2.f32 d, a, b: d's upper half is a, its lower half b."""
    if mods[:1] != ["rn"] or len(mods) != 3 or mods[1] not in ("f16x2", "bf16x2") or mods[2] != "f32":
        return False
    if len(operands) != 3 or operands[0] != "$0" or b.ret != "i32":
        return False
    half = "half" if mods[1] == "f16x2" else "bfloat"
    bits = []
    for operand in operands[1:]:
        value = b.arg(operand, "float")
        if value is None:
            return False
        rounded = b.tmp(f"fptrunc float {value} to {half}")
        bits.append(b.tmp(f"zext i16 {b.tmp(f'bitcast {half} {rounded} to i16')} to i32"))
    high = b.tmp(f"shl i32 {bits[0]}, 16")
    b.lines.append(f"ret i32 {b.tmp(f'or i32 {high}, {bits[1]}')}")
    return True


def _fp8_to_f16(b: _Body, byte: str, kind: str) -> str:
    """The f16 bits (i16) of the fp8 value in the low 8 bits of `byte`; exact, as every fp8 value is an f16 one.
    Every NaN becomes the canonical f16 NaN 0x7FFF (no sign, no payload), as CUDA's fp8 header specifies the
    conversion."""
    if kind == "e5m2":  # e5m2 is f16 with the low 8 mantissa bits dropped; NaN: exponent 11111, mantissa not 0
        nan = b.tmp(f"icmp ugt i16 {b.tmp(f'and i16 {byte}, 127')}, 124")
        return b.tmp(f"select i1 {nan}, i16 32767, i16 {b.tmp(f'shl i16 {byte}, 8')}")
    # e4m3: bias 7, 3 mantissa bits, no infinities, S.1111.111 is NaN
    exponent = b.tmp(f"and i16 {b.tmp(f'lshr i16 {byte}, 3')}, 15")
    mantissa = b.tmp(f"and i16 {byte}, 7")
    rebiased = b.tmp(f"shl i16 {b.tmp(f'add i16 {exponent}, 8')}, 10")
    normal = b.tmp(f"or i16 {rebiased}, {b.tmp(f'shl i16 {mantissa}, 7')}")
    scaled = b.tmp(f"fmul float {b.tmp(f'uitofp i16 {mantissa} to float')}, 0x3F60000000000000")  # m * 2^-9
    subnormal = b.tmp(f"bitcast half {b.tmp(f'fptrunc float {scaled} to half')} to i16")
    magnitude = b.tmp(f"select i1 {b.tmp(f'icmp eq i16 {exponent}, 0')}, i16 {subnormal}, i16 {normal}")
    sign = b.tmp(f"shl i16 {b.tmp(f'and i16 {byte}, 128')}, 8")
    nan = b.tmp(f"icmp eq i16 {b.tmp(f'and i16 {byte}, 127')}, 127")
    return b.tmp(f"select i1 {nan}, i16 32767, i16 {b.tmp(f'or i16 {magnitude}, {sign}')}")


# fp8 formats: (mantissa bits, smallest normal exponent, largest finite code); NaN is 0x7F in both
_FP8 = {"e4m3": (3, -6, 0x7E), "e5m2": (2, -14, 0x7B)}


def _f32_to_fp8(b: _Body, value: str, kind: str) -> str:
    """The fp8 code (i16, low byte) of an f32, rounded to nearest even, saturated to the largest finite value
    (`.satfinite`: infinities too), NaN to 0x7F.

    With E = max(exponent of |x|, the smallest normal exponent) and q = roundeven(|x| / 2^(E - mantissa
    bits)), the code is (E - emin) * 2^mbits + q for normal and subnormal values alike (q reaching
    2^(mbits+1) carries into the exponent by itself); every step is exact in f32.
    """
    mbits, emin, largest = _FP8[kind]
    bits = b.tmp(f"bitcast float {value} to i32")
    sign = b.tmp(f"and i32 {b.tmp(f'lshr i32 {bits}, 24')}, 128")
    magnitude = b.tmp(f"call float @llvm.fabs.f32(float {value})")
    field = b.tmp(f"and i32 {b.tmp(f'lshr i32 {bits}, 23')}, 255")
    exponent = b.tmp(f"sub i32 {field}, 127")
    exponent = b.tmp(f"call i32 @llvm.smax.i32(i32 {exponent}, i32 {emin})")
    exponent = b.tmp(f"call i32 @llvm.smin.i32(i32 {exponent}, i32 127)")  # infinity: see the clamp below
    biased = b.tmp(f"add i32 {exponent}, {127 - mbits}")
    ulp = b.tmp(f"bitcast i32 {b.tmp(f'shl i32 {biased}, 23')} to float")
    steps = b.tmp(f"call float @llvm.roundeven.f32(float {b.tmp(f'fdiv float {magnitude}, {ulp}')})")
    finite = b.tmp(f"fcmp olt float {magnitude}, 0x7FF0000000000000")
    steps = b.tmp(f"select i1 {finite}, float {steps}, float 0.0")
    scaled = b.tmp(f"shl i32 {b.tmp(f'sub i32 {exponent}, {emin}')}, {mbits}")
    # an infinity has q = 0 and E = 127 here: its code is beyond the largest, which the clamp gives
    code = b.tmp(f"add i32 {scaled}, {b.tmp(f'fptoui float {steps} to i32')}")
    code = b.tmp(f"or i32 {b.tmp(f'call i32 @llvm.umin.i32(i32 {code}, i32 {largest})')}, {sign}")
    code = b.tmp(f"select i1 {b.tmp(f'fcmp uno float {value}, 0.0')}, i32 127, i32 {code}")
    return b.tmp(f"trunc i32 {code} to i16")


def _cvt_to_fp8_pair(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """cvt.rn.satfinite.e4m3x2|e5m2x2.f32 d, a, b (a to the high byte) and .f16x2 d, a (each half in place)."""
    if mods[:2] != ["rn", "satfinite"] or len(mods) != 4 or mods[2] not in ("e4m3x2", "e5m2x2") or b.ret != "i16":
        return False
    kind = mods[2][:4]
    if mods[3] == "f32" and len(operands) == 3 and operands[0] == "$0":
        high, low = (b.arg(o, "float") for o in operands[1:])
    elif mods[3] == "f16x2" and len(operands) == 2 and operands[0] == "$0" and (pair := b.arg(operands[1], "i32")):
        halves = [b.tmp(f"trunc i32 {pair} to i16"), b.tmp(f"trunc i32 {b.tmp(f'lshr i32 {pair}, 16')} to i16")]
        low, high = (b.tmp(f"fpext half {b.tmp(f'bitcast i16 {h} to half')} to float") for h in halves)
    else:
        return False
    if high is None or low is None:
        return False
    shifted = b.tmp(f"shl i16 {_f32_to_fp8(b, high, kind)}, 8")
    b.lines.append(f"ret i16 {b.tmp(f'or i16 {shifted}, {_f32_to_fp8(b, low, kind)}')}")
    return True


def _cvt_fp8_pair(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """cvt.rn.f16x2.e4m3x2 / .e5m2x2 d, a: each fp8 byte of a widened to the f16 half of d in its place."""
    if "satfinite" in mods:
        return _cvt_to_fp8_pair(b, mods, operands)
    if mods[:2] != ["rn", "f16x2"] or len(mods) != 3 or mods[2] not in ("e4m3x2", "e5m2x2"):
        return False
    if len(operands) != 2 or operands[0] != "$0" or b.ret != "i32" or (pair := b.arg(operands[1], "i16")) is None:
        return False
    low = _fp8_to_f16(b, b.tmp(f"and i16 {pair}, 255"), mods[2][:4])
    high = _fp8_to_f16(b, b.tmp(f"lshr i16 {pair}, 8"), mods[2][:4])
    shifted = b.tmp(f"shl i32 {b.tmp(f'zext i16 {high} to i32')}, 16")
    low_wide = b.tmp(f"zext i16 {low} to i32")
    b.lines.append(f"ret i32 {b.tmp(f'or i32 {shifted}, {low_wide}')}")
    return True


def _mov(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """mov.b32 $0, {$1,$2} (pack, first operand lowest) and mov.b32 {$0,$1}, $2 (unpack)."""
    if len(mods) != 1 or mods[0] not in ("b32", "b64") or len(operands) != 2:
        return False
    wide = int(mods[0][1:])
    part = f"i{wide // 2}"
    if operands[0] == "$0" and (m := re.fullmatch(r"\{\s*(\$\d+)\s*,\s*(\$\d+)\s*\}", operands[1])):
        low, high = b.arg(m.group(1), part), b.arg(m.group(2), part)
        if low is None or high is None or b.ret != f"i{wide}":
            return False
        shifted = b.tmp(f"shl i{wide} {b.tmp(f'zext {part} {high} to i{wide}')}, {wide // 2}")
        low_wide = b.tmp(f"zext {part} {low} to i{wide}")
        b.lines.append(f"ret i{wide} {b.tmp(f'or i{wide} {shifted}, {low_wide}')}")
        return True
    m = re.fullmatch(r"\{\s*\$0\s*,\s*\$1\s*\}", operands[0])
    if m and b.ret == f"{{ {part}, {part} }}" and (value := b.arg(operands[1], f"i{wide}")) is not None:
        low = b.tmp(f"trunc i{wide} {value} to {part}")
        high = b.tmp(f"trunc i{wide} {b.tmp(f'lshr i{wide} {value}, {wide // 2}')} to {part}")
        pair = b.tmp(f"insertvalue {b.ret} poison, {part} {low}, 0")
        b.lines.append(f"ret {b.ret} {b.tmp(f'insertvalue {b.ret} {pair}, {part} {high}, 1')}")
        return True
    return False


def _arith(b: _Body, op: str, mods: list[str], operands: list[str]) -> bool:
    """add/sub/mul .f16/.bf16 (and x2): in f32, rounded once to the 16-bit type."""
    if mods[:1] == ["rn"]:
        mods = mods[1:]
    if len(mods) != 1 or mods[0] not in ("f16", "bf16", "f16x2", "bf16x2") or len(operands) != 3:
        return False
    if operands[0] != "$0":
        return False
    pair = mods[0].endswith("x2")
    half = "half" if mods[0].startswith("f16") else "bfloat"
    reg = "i32" if pair else "i16"
    ins = [b.arg(o, reg) for o in operands[1:]]
    if None in ins or b.ret != reg:
        return False
    instr = {"add": "fadd", "sub": "fsub", "mul": "fmul"}[op]

    def lane(x: str, y: str) -> str:
        fx = b.tmp(f"fpext {half} {b.tmp(f'bitcast i16 {x} to {half}')} to float")
        fy = b.tmp(f"fpext {half} {b.tmp(f'bitcast i16 {y} to {half}')} to float")
        result = b.tmp(f"{instr} float {fx}, {fy}")
        return b.tmp(f"bitcast {half} {b.tmp(f'fptrunc float {result} to {half}')} to i16")

    if not pair:
        b.lines.append(f"ret i16 {lane(ins[0], ins[1])}")
        return True
    lows = [b.tmp(f"trunc i32 {v} to i16") for v in ins]
    highs = [b.tmp(f"trunc i32 {b.tmp(f'lshr i32 {v}, 16')} to i16") for v in ins]
    lo, hi = lane(*lows), lane(*highs)
    shifted = b.tmp(f"shl i32 {b.tmp(f'zext i16 {hi} to i32')}, 16")
    low_wide = b.tmp(f"zext i16 {lo} to i32")
    b.lines.append(f"ret i32 {b.tmp(f'or i32 {shifted}, {low_wide}')}")
    return True


def _field(b: _Body, value: str, bits: int, index: int, signed: bool) -> str:
    """Field `index` (lowest first) of `bits` bits of the i32 `value`, widened to i32: shifted to the top, then
    back (arithmetically where `signed`)."""
    top = b.tmp(f"shl i32 {value}, {32 - bits * (index + 1)}")
    return b.tmp(f"{'ashr' if signed else 'lshr'} i32 {top}, {32 - bits}")


def _dot(b: _Body, op: str, mods: list[str], operands: list[str]) -> bool:
    """dp4a.atype.btype d, a, b, c and dp2a.mode.atype.btype d, a, b, c (types u32 or s32): c plus the products of
    a's bytes (dp2a: its two 16-bit halves) with b's bytes (dp2a: bytes 0-1 for .lo, 2-3 for .hi), in 32 bits."""
    mode = None
    if op == "dp2a":
        if not mods or mods[0] not in ("lo", "hi"):
            return False
        mode, mods = mods[0], mods[1:]
    if len(mods) != 2 or any(m not in ("u32", "s32") for m in mods) or len(operands) != 4 or operands[0] != "$0":
        return False
    ins = [b.arg(o, "i32") for o in operands[1:]]
    if None in ins or b.ret != "i32":
        return False
    a, bv, c = ins
    a_signed, b_signed = (m == "s32" for m in mods)
    lanes = 4 if mode is None else 2
    a_bits = 8 if mode is None else 16
    first_byte = 2 if mode == "hi" else 0
    total = c
    for k in range(lanes):
        a_k, b_k = _field(b, a, a_bits, k, a_signed), _field(b, bv, 8, first_byte + k, b_signed)
        total = b.tmp(f"add i32 {total}, {b.tmp(f'mul i32 {a_k}, {b_k}')}")
    b.lines.append(f"ret i32 {total}")
    return True


_SIMD = {"vadd": "add", "vsub": "sub", "vmin": "min", "vmax": "max", "vabsdiff": "absdiff"}
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}


def _simd(b: _Body, op: str, mods: list[str], operands: list[str]) -> bool:
    """vop4/vop2.dtype.atype.btype{.sat} d, a, b, c and vset4/vset2.atype.btype.cmp d, a, b, c: per byte (4) or
    16-bit half (2), the fields widened as their types say, combined in 32 bits, clamped with .sat, truncated into
    d's field (vset: 1 where the comparison holds, else 0). c is not read: every field of d is written."""
    fields = int(op[-1])
    name = op[:-1]
    compare = None
    if name == "vset":
        if len(mods) != 3 or mods[2] not in _COMPARE:
            return False
        compare, types, saturate = _COMPARE[mods[2]], ["u32", *mods[:2]], False
    else:
        saturate = mods[-1:] == ["sat"]
        types = mods[:-1] if saturate else mods
    if name not in (*_SIMD, "vset") or len(types) != 3 or any(t not in ("u32", "s32") for t in types):
        return False
    if len(operands) != 4 or operands[0] != "$0" or any(not re.fullmatch(r"\$\d+", o) for o in operands):
        return False
    ins = [b.arg(o, "i32") for o in operands[1:3]]
    if None in ins or b.arg(operands[3], "i32") is None or b.ret != "i32":
        return False
    d_signed, a_signed, b_signed = (t == "s32" for t in types)
    bits = 32 // fields
    mask = (1 << bits) - 1
    result = "0"
    for k in range(fields):
        x, y = _field(b, ins[0], bits, k, a_signed), _field(b, ins[1], bits, k, b_signed)
        if compare is not None:
            t = b.tmp(f"zext i1 {b.tmp(f'icmp {compare} i32 {x}, {y}')} to i32")
        elif name in ("vadd", "vsub"):
            t = b.tmp(f"{_SIMD[name]} i32 {x}, {y}")
        elif name == "vabsdiff":
            diff = b.tmp(f"sub i32 {x}, {y}")
            t = b.tmp(f"select i1 {b.tmp(f'icmp slt i32 {diff}, 0')}, i32 {b.tmp(f'sub i32 0, {diff}')}, i32 {diff}")
        else:
            pick = "slt" if name == "vmin" else "sgt"
            t = b.tmp(f"select i1 {b.tmp(f'icmp {pick} i32 {x}, {y}')}, i32 {x}, i32 {y}")
        if saturate:
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if d_signed else (0, mask)
            t = b.tmp(f"select i1 {b.tmp(f'icmp slt i32 {t}, {low}')}, i32 {low}, i32 {t}")
            t = b.tmp(f"select i1 {b.tmp(f'icmp sgt i32 {t}, {high}')}, i32 {high}, i32 {t}")
        placed = b.tmp(f"shl i32 {b.tmp(f'and i32 {t}, {mask}')}, {bits * k}")
        result = b.tmp(f"or i32 {result}, {placed}")
    b.lines.append(f"ret i32 {result}")
    return True


_LOAD_HINTS = {"global", "nc", "ca", "cg", "cs", "lu"}  # where and how it is cached; the value is the same


def _ld(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """ld[.global][.nc][.vN].type: a plain load (the host has one address space, no caches to bypass)."""
    hints = [m for m in mods if m in _LOAD_HINTS]
    rest = [m for m in mods if m not in _LOAD_HINTS]
    count = 1
    if rest and re.fullmatch(r"v[24]", rest[0]):
        count, rest = int(rest[0][1:]), rest[1:]
    if len(rest) != 1 or len(hints) + 1 + (count > 1) != len(mods) or len(operands) != 2:
        return False
    ptx_type = rest[0]
    value_type = _FLOAT[ptx_type][0] if ptx_type in ("f32", "f64") else f"i{(_INT.get(ptx_type) or (0, 0))[1]}"
    if value_type == "i0" or value_type == "i8":
        return False
    outs = [o.strip() for o in operands[0].strip("{}").split(",")]
    if outs != [f"${n}" for n in range(count)]:
        return False
    m = re.fullmatch(r"\[\s*(\$\d+)\s*\]", operands[1])
    if not m or int(m.group(1)[1:]) != count:
        return False
    address = m.group(1)
    pointer = b.arg(address, "ptr")
    if pointer is None and (integer := b.arg(address, "i64")) is not None:
        pointer = b.tmp(f"inttoptr i64 {integer} to ptr")
    if pointer is None:
        return False
    width = int(value_type[1:]) // 8 if value_type.startswith("i") else {"float": 4, "double": 8}[value_type]
    if count == 1:
        if b.ret != value_type:
            return False
        b.lines.append(f"ret {value_type} {b.tmp(f'load {value_type}, ptr {pointer}, align {width}')}")
        return True
    if b.ret != "{ " + ", ".join([value_type] * count) + " }":
        return False
    result = "poison"
    for lane in range(count):
        at = b.tmp(f"getelementptr {value_type}, ptr {pointer}, i64 {lane}")
        value = b.tmp(f"load {value_type}, ptr {at}, align {width}")
        result = b.tmp(f"insertvalue {b.ret} {result}, {value_type} {value}, {lane}")
    b.lines.append(f"ret {b.ret} {result}")
    return True


def _address(b: _Body, operand: str) -> str | None:
    """The pointer an address operand ``[$n]`` names (a pointer or a 64-bit integer argument)."""
    m = re.fullmatch(r"\[\s*(\$\d+)\s*\]", operand)
    if not m:
        return None
    pointer = b.arg(m.group(1), "ptr")
    if pointer is None and (integer := b.arg(m.group(1), "i64")) is not None:
        pointer = b.tmp(f"inttoptr i64 {integer} to ptr")
    return pointer


def _qualifiers(mods: list[str], kinds: dict[str, set[str]]) -> dict[str, str] | None:
    """Each modifier sorted into its kind (at most one of each; PTX accepts them in any order), or None."""
    found: dict[str, str] = {}
    for mod in mods:
        kind = next((k for k, names in kinds.items() if mod in names), None)
        if kind is None or kind in found:
            return None
        found[kind] = mod
    return found


_WORD = {"u32": 32, "s32": 32, "b32": 32, "u64": 64, "s64": 64, "b64": 64}


def _ld_ordered(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """ld.acquire|relaxed.gpu|sys[.global].{u,s,b}{32,64}: an atomic load, through the runtime, which in a
    grid launch first lets the other blocks run (the thread may be polling for what one of them writes)."""
    q = _qualifiers(
        mods, {"sem": {"acquire", "relaxed"}, "scope": {"gpu", "sys"}, "space": {"global"}, "type": set(_WORD)}
    )
    if q is None or not {"sem", "scope", "type"} <= q.keys() or len(operands) != 2 or operands[0] != "$0":
        return False
    width = _WORD[q["type"]]
    pointer = _address(b, operands[1])
    if pointer is None or b.ret != f"i{width}":
        return False
    b.lines.append(f"ret i{width} {b.tmp(f'call i{width} @__mneme_poll{width}(ptr {pointer})')}")
    return True


_ATOM_ORDER = {"relaxed": "monotonic", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel"}
# op -> (atomicrmw operation for unsigned, for signed types; the PTX types it takes)
_ATOM_OPS = {
    "add": ("add", "add", {"u32", "s32", "u64", "s64"}),
    "min": ("umin", "min", {"u32", "s32", "u64", "s64"}),
    "max": ("umax", "max", {"u32", "s32", "u64", "s64"}),
    **{op: (rmw, rmw, {"b32", "b64"}) for op, rmw in (("and", "and"), ("or", "or"), ("xor", "xor"), ("exch", "xchg"))},
    "cas": ("", "", {"b32", "b64"}),
}


def _atom(b: _Body, mods: list[str], operands: list[str]) -> bool:
    """atom[.sem][.scope][.global].op.type on integers (add, min, max, and, or, xor, exch, cas): an LLVM atomic
    with the same ordering (no .sem: relaxed, as PTX says). Shared memory (.shared) is another address space."""
    q = _qualifiers(
        mods,
        {
            "sem": set(_ATOM_ORDER),
            "scope": {"cta", "cluster", "gpu", "sys"},
            "space": {"global"},
            "op": set(_ATOM_OPS),
            "type": set(_WORD),
        },
    )
    if q is None or not {"op", "type"} <= q.keys() or q["type"] not in _ATOM_OPS[q["op"]][2] or operands[:1] != ["$0"]:
        return False
    ty = f"i{_WORD[q['type']]}"
    order = _ATOM_ORDER[q.get("sem", "relaxed")]
    pointer = _address(b, operands[1]) if len(operands) > 1 else None
    values = [b.arg(o, ty) for o in operands[2:]]
    if pointer is None or b.ret != ty or None in values or len(values) != (2 if q["op"] == "cas" else 1):
        return False
    if q["op"] == "cas":  # the failure ordering: the success one without its release part
        failure = {"release": "monotonic", "acq_rel": "acquire"}.get(order, order)
        pair = b.tmp(f"cmpxchg ptr {pointer}, {ty} {values[0]}, {ty} {values[1]} {order} {failure}")
        b.lines.append(f"ret {ty} {b.tmp(f'extractvalue {{ {ty}, i1 }} {pair}, 0')}")
        return True
    unsigned, signed, _ = _ATOM_OPS[q["op"]]
    rmw = signed if q["type"].startswith("s") else unsigned
    b.lines.append(f"ret {ty} {b.tmp(f'atomicrmw {rmw} ptr {pointer}, {ty} {values[0]} {order}')}")
    return True


def body(text: str, ret: str, args: list[str]) -> list[str] | None:
    """IR lines implementing the one-instruction inline PTX `text` for a call of type `ret (args)`, or None."""
    parsed = _parse(text)
    if parsed is None:
        return None
    op, operands = parsed
    name, *mods = op.split(".")
    b = _Body(ret, args, len(_OPERAND.findall(operands[0])) if operands else 1)
    try:
        if name == "cvt":
            if any(m in ("e4m3x2", "e5m2x2") for m in mods):
                done = _cvt_fp8_pair(b, mods, operands)
            elif any(m.endswith("x2") for m in mods):
                done = _cvt_pair(b, mods, operands)
            else:
                done = _cvt(b, mods, operands)
        elif name == "mov":
            done = _mov(b, mods, operands)
        elif name == "ld":
            done = _ld_ordered(b, mods, operands) if {"acquire", "relaxed"} & set(mods) else _ld(b, mods, operands)
        elif name == "atom":
            done = _atom(b, mods, operands)
        elif name in ("add", "sub", "mul"):
            done = _arith(b, name, mods, operands)
        elif name in ("dp4a", "dp2a"):
            done = _dot(b, name, mods, operands)
        elif re.fullmatch(r"v(?:add|sub|min|max|absdiff|set)[24]", name):
            done = _simd(b, name, mods, operands)
        else:
            done = False
    except KeyError:  # a type name it does not know
        return None
    return b.lines if done else None
