"""The floating-point behaviour nvcc gave an application, read from its PTX, given to the kernel's IR.

nvcc's `-ftz`, `-prec-div`, `-prec-sqrt` and `-fmad` show in the PTX it writes: `.ftz` on f32
arithmetic; `div.rn.f32` (IEEE), `div.full.f32` (-prec-div=false) or `div.approx.f32` (fast math);
`sqrt.rn.f32` or `sqrt.approx.f32`; and, with -fmad=false, `mul.rn.f32`/`add.rn.f32`, whose rounding
modifier forbids ptxas to fuse them. The IR `mneme-cc` embeds comes from clang, which takes -ftz,
-fmad=false and fast math from the same command line but has no -prec-div/-prec-sqrt=false, and IR from
other sources (--ir files) knows none of them. `apply` rewrites a module so that NVPTX emits the same
instructions: the denormal mode and the `nvvm-reflect-ftz` flag (libdevice's __CUDA_FTZ), no contraction
where nvcc fused nothing, division as inline PTX where nvcc did not round it to nearest (marked `afn` where
nvcc's was approximate: NVPTX then writes nvcc's div.approx and rcp.approx), square roots as the PTX nvcc
used (`sqrt.rn` by default, where clang's libdevice path takes `sqrt.approx`), and, where nvcc fuses
(-fmad=true), libdevice's multiplies and adds contractable as nvcc's are, and a product with several uses
nvcc's multiply (NVPTX would fold it into each use).
"""

from __future__ import annotations

import collections
import re

import attrs

from mneme.core import ir

# An f32 operation flushing denormals: `.ftz` on arithmetic that is not an approximation. libdevice's own
# expansions (powf, expf, ...) use `rcp.approx.ftz`/`ex2.approx.ftz` whatever -ftz says, so those tell nothing.
_FTZ_OP = re.compile(
    r"^\s*(?:add|sub|mul|fma|div|sqrt|min|max|neg|abs|rcp|setp|selp|cvt)(?![.\w]*\.approx\b)"
    r"[.\w]*\.ftz\b",
    re.M,
)
_F32_OP = re.compile(r"^\s*(?:add|sub|mul|fma|div|sqrt)[.\w]*\.f32\b", re.M)


@attrs.frozen
class FpBehaviour:
    """How an application's f32 arithmetic was compiled."""

    ftz: bool = False  # denormals flushed to zero (-ftz=true)
    # "rn" (IEEE, -prec-div=true), "full" (-prec-div=false) or "approx" (fast math); None: the PTX divides
    # nothing, so it tells nothing (fast math turns a / b into rcp.approx times a): clang's IR keeps its own
    div: str | None = "rn"
    sqrt: str | None = "rn"  # "rn" (-prec-sqrt=true) or "approx"; None: no square root to read it from
    fmad: bool = True  # multiplies and adds may be fused (-fmad=true)

    @classmethod
    def from_ptx(cls, text: str) -> FpBehaviour | None:
        """Read from PTX text; None where it holds no f32 arithmetic to read it from."""
        if not _F32_OP.search(text):
            return None
        div = (
            "approx"
            if re.search(r"\bdiv\.approx\.", text)
            else "full"
            if re.search(r"\bdiv\.full\.", text)
            else "rn"
            if re.search(r"\b(?:div|rcp)\.rn(?:\.ftz)?\.f32\b", text)
            else None
        )
        sqrt = (
            "approx"
            if re.search(r"\bsqrt\.approx\.", text)
            else "rn"
            if re.search(r"\bsqrt\.rn(?:\.ftz)?\.f32\b", text)
            else None
        )
        no_fma = (
            re.search(r"\b(?:mul|add|sub)\.rn(?:\.ftz)?\.f32\b", text) is not None
            and re.search(r"\bfma\.rn(?:\.ftz)?\.f32\b", text) is None
        )
        return cls(ftz=_FTZ_OP.search(text) is not None, div=div, sqrt=sqrt, fmad=not no_fma)

    @property
    def default(self) -> bool:
        return self == FpBehaviour()

    def describe(self) -> str:
        div = {"rn": "true", None: "unseen"}.get(self.div, self.div)
        sqrt = {"rn": "true", None: "unseen"}.get(self.sqrt, "false")
        return f"ftz={'true' if self.ftz else 'false'} prec-div={div} prec-sqrt={sqrt} fmad={'true' if self.fmad else 'false'}"


_FDIV = re.compile(r"^(\s*)(%[-\w.$]+) = fdiv((?: \w+)*) float (%[-\w.$]+|[-\w.+]+), (%[-\w.$]+|[-\w.+]+)(.*)$")
_SQRT_CALL = re.compile(
    r"^(\s*)(%[-\w.$]+) = (?:tail |notail |musttail )?call(?: \w+)* float "
    r"@llvm\.(?:sqrt\.f32|nvvm\.sqrt(?:\.(?:rn|rz|rm|rp|approx))?(?:\.ftz)?\.f)"
    r"\(float(?: \w+)* ([^)]+)\)(.*)$"
)
_FMULADD = re.compile(
    r"^(\s*)(%[-\w.$]+) = (?:tail |notail )?call((?: \w+)*) float @llvm\.fmuladd\.f32\("
    r"float(?: \w+)* ([^,]+), float(?: \w+)* ([^,]+), float(?: \w+)* ([^)]+)\)(.*)$"
)
_UNCONTRACTED = re.compile(r"^\s*(%[-\w.$]+) = (fmul|fadd|fsub)((?: \w+)*) (?:float|double)\b")
_FMUL_FLOAT = re.compile(r"^(\s*)(%[-\w.$]+) = fmul(?: \w+)* float (%[-\w.$]+|[-\w.+]+), (%[-\w.$]+|[-\w.+]+)(.*)$")
_LOCAL = re.compile(r"%[-\w.$]+")
_CONTRACT = re.compile(r"(= (?:fadd|fsub|fmul|fneg|call)(?: (?:nnan|ninf|nsz|arcp|afn|reassoc|fast))*) contract\b")


def apply(text: str, fp: FpBehaviour) -> str:
    """`text` (a module) rewritten to compile to the f32 instructions `fp` describes."""
    ftz = ".ftz" if fp.ftz else ""
    if fp.ftz:
        for name, _start, _body, _end in ir.defined_function_spans(text):
            text = ir.set_function_attributes(text, name, {"denormal-fp-math-f32": "preserve-sign,preserve-sign"})
        text = _reflect_ftz(text)
    lines = []
    uses = _uses_per_line(text) if fp.fmad else None
    for index, line in enumerate(text.split("\n")):
        m = _FDIV.match(line)
        if m and fp.div == "approx":
            # `afn` is how NVPTX reads a fast division: div.approx, and rcp.approx for 1.0 / x, as nvcc writes them
            if not re.search(r"\b(?:afn|fast)\b", m.group(3)):
                line = line.replace(" = fdiv", " = fdiv afn", 1)
        elif m and fp.div is not None and (fp.div != "rn" or re.search(r"\b(?:arcp|afn|fast)\b", m.group(3))):
            indent, result, _flags, a, b, rest = m.groups()
            line = (
                f'{indent}{result} = call float asm "div.{fp.div}{ftz}.f32 $0, $1, $2;", "=f,f,f"'
                f"(float {a}, float {b}){_trailing(rest)}"
            )
        elif fp.sqrt is not None and (m := _SQRT_CALL.match(line)):
            # Always: clang's libdevice path takes sqrt.approx unless told __CUDA_PREC_SQRT, nvcc's sqrt.rn.
            indent, result, operand, rest = m.groups()
            line = (
                f'{indent}{result} = call float asm "sqrt.{fp.sqrt}{ftz}.f32 $0, $1;", "=f,f"(float {operand})'
                f"{_trailing(rest)}"
            )
        elif not fp.fmad and (m := _FMULADD.match(line)):
            indent, result, _flags, a, b, c, rest = m.groups()
            line = f"{indent}{result}.mul = fmul float {a}, {b}\n{indent}{result} = fadd float {result}.mul, {c}"
        elif not fp.fmad:
            line = ir.sub_outside_strings(_CONTRACT, lambda mm: mm.group(1), line)
        elif m := _UNCONTRACTED.match(line):
            line = _contraction_as_nvcc(line, m, uses[index], ftz)
        lines.append(line)
    return "\n".join(lines)


def _contraction_as_nvcc(line: str, m: re.Match, uses, ftz: str) -> str:
    """A multiply or add contractable where nvcc (-fmad=true) fuses it: every one whose product has one use.

    nvcc fuses libdevice's inlined multiplies and adds too, which clang links without `contract` (NVPTX then
    writes mul.rn, never fused: logf(x) + y would round twice). A product used more than once nvcc and ptxas
    keep as a multiply, where NVPTX's aggressive fusion would fold it into each use (ggml's RoPE: 1 - ramp_mix).
    """
    op, flags = m.group(2), m.group(3)
    if op == "fmul" and uses[m.group(1)] > 2:  # the definition and more than one use
        plain = _FMUL_FLOAT.match(line)
        if plain:  # nvcc's very instruction, which ptxas may still fuse where it chooses to
            indent, result, a, b, rest = plain.groups()
            asm = f'call float asm "mul{ftz}.f32 $0, $1, $2;", "=f,f,f"(float {a}, float {b})'
            return f"{indent}{result} = {asm}{_trailing(rest)}"
        if "contract" in flags.split():
            return line[: m.start(3)] + flags.replace(" contract", "") + line[m.end(3) :]
        if "fast" in flags.split():
            return line[: m.start(3)] + flags.replace(" fast", " reassoc nnan ninf nsz arcp afn") + line[m.end(3) :]
        return line
    if re.search(r"\b(?:contract|fast)\b", flags):
        return line
    return line[: m.end(2)] + " contract" + line[m.end(2) :]


def _uses_per_line(text: str) -> list:
    """For each line, how often each local name occurs in the function it belongs to (definition included)."""
    lines = text.split("\n")
    found: list = [None] * len(lines)
    start = None
    for i, line in enumerate(lines):
        if line.startswith("define "):
            start = i
        elif start is not None and line == "}":
            body = [x for x in lines[start : i + 1] if "llvm.dbg." not in x and not x.lstrip().startswith("#dbg_")]
            counts = collections.Counter(_LOCAL.findall("\n".join(body)))  # debug records use nothing
            found[start : i + 1] = [counts] * (i + 1 - start)
            start = None
    return found


def _trailing(rest: str) -> str:
    """What follows an instruction that stays valid after a call: its metadata attachments, if any."""
    attachments = re.findall(r",\s*![\w.]+\s+!\d+", rest)
    return "".join(attachments)


def _reflect_ftz(text: str) -> str:
    """Set the module flag `nvvm-reflect-ftz` (what __nvvm_reflect("__CUDA_FTZ") answers) to 1."""
    flag = re.search(r'^(![\d]+) = !\{i32 \d+, !"nvvm-reflect-ftz", i32 \d+\}$', text, re.M)
    if flag:
        return text[: flag.start()] + f'{flag.group(1)} = !{{i32 4, !"nvvm-reflect-ftz", i32 1}}' + text[flag.end() :]
    ids = [int(n) for n in re.findall(r"^!(\d+) = ", text, re.M)]
    new_id = max(ids, default=-1) + 1
    node = f'!{new_id} = !{{i32 4, !"nvvm-reflect-ftz", i32 1}}'
    flags = re.search(r"^!llvm\.module\.flags = !\{(.*)\}$", text, re.M)
    if flags:
        listed = flags.group(1).strip()
        text = (
            text[: flags.start()]
            + f"!llvm.module.flags = !{{{listed + ', ' if listed else ''}!{new_id}}}"
            + text[flags.end() :]
        )
    else:
        text += f"\n!llvm.module.flags = !{{!{new_id}}}"
    return text + f"\n{node}\n"


def ptx_of(image: bytes, arch: str) -> str | None:
    """The PTX a recorded code image holds (from a fatbin, the newest not past `arch`), None where none."""
    from mneme.instrument.fatbin import FATBIN_MAGIC, entries

    if image[:4] == b"\x7fELF":
        return None
    if len(image) >= 16 and int.from_bytes(image[:4], "little") == FATBIN_MAGIC:
        want = int(re.sub(r"\D", "", arch) or 90)
        ptx = [e for e in entries(image, "<image>") if e.kind == "ptx" and e.arch <= want]
        return max(ptx, key=lambda e: e.arch).image.decode(errors="replace") if ptx else None
    text = image.split(b"\0", 1)[0].decode(errors="replace")
    return text if ".version" in text and ".target" in text else None


def recorded_behaviour(image: bytes, arch: str) -> FpBehaviour | None:
    """The floating-point behaviour of the application's build, from the PTX in its code image."""
    ptx = ptx_of(image, arch)
    return FpBehaviour.from_ptx(ptx) if ptx else None


def ir_numerics(image: bytes, arch: str) -> tuple[str, object] | None:
    """For finalize (`RawFormat.ir_numerics`): the recorded build's behaviour and the IR rewrite giving it."""
    fp = recorded_behaviour(image, arch)
    if fp is None:
        return None
    return f"nvcc {fp.describe()}, read from its PTX", lambda text: apply(text, fp)
