"""IR variant against nvcc's binary, kernel by kernel, without a GPU (issue 38, point 6).

    python benchmarks/ir_vs_nvcc.py [--sets corpus,programs,llama] [--max-kernels 4] [--json out.json] [--md out.md]

Each translation unit is built once as an application build is, `mneme-cc nvcc -arch=sm_90 -O3 -c`,
and the one object gives both sides: nvcc's cubin and PTX (its fatbin) and the device IR mneme-cc
embeds. The IR then goes the way of a recording: finalize's floating-point rewrite (the numerics
nvcc applied, read from its PTX: `mneme_cuda.numerics`), then the recorded configuration's build
(prune, internalize, `default<O3>`, codegen level 3, NVPTX, then the assembler). For every kernel
the table sets the two side by side: registers and stack; PTX instructions (the kernel and what it
calls) by kind: loads and stores by state space (`global`, `global.nc`, generic, `local`, `shared`),
fused multiply-adds, divisions and square roots by rounding, calls, branches; SASS instructions
where `cuobjdump` is found (PATH or MNEME_CUOBJDUMP; PyPI's nvidia-cuda-cuobjdump has it).

Sets: `corpus` (tests/data/kernels), `programs` (tests/gpu/programs, the GPU suite's applications),
`llama` (llama.cpp's CUDA units of tests/kernel_corpus.py, fetched from PyPI; skipped offline).
The GPU timing of the same variants is `benchmarks/gpu/bench_cuda_replay.py --ir-vs-binary`.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "backends" / "cuda")]
ARCH = "sm_90"
NVCC = os.environ.get("MNEME_CORPUS_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
log = logging.getLogger("ir_vs_nvcc")

# -- PTX ------------------------------------------------------------------------------------------

_HEADER = re.compile(r"^(?:\.(?:visible|weak|extern)\s+)*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)", re.MULTILINE)
_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)")
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)", re.MULTILINE)
_SPACES = ("global", "shared", "local", "param", "const")


def ptx_functions(text: str) -> dict[str, str]:
    """Name -> body of every function (`.entry`/`.func`) a PTX module defines (declarations left out)."""
    found = {}
    for m in _HEADER.finditer(text):
        start = text.find("{", m.end())
        semicolon = text.find(";", m.end())
        if start < 0 or (0 <= semicolon < start):
            continue  # a prototype
        depth, i = 0, start
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        found[m.group(1)] = text[start + 1 : i]
    return found


def reachable(functions: dict[str, str], kernel: str) -> list[str]:
    """The kernel and every function it calls, transitively."""
    seen, todo = [], [kernel]
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.append(name)
        todo += _CALL.findall(functions[name])
    return seen


def classify(op: str) -> str | None:
    """The kind an instruction is counted under (None: only in the total)."""
    parts = op.split(".")
    base = parts[0]
    if base in ("ld", "st", "atom", "red", "ldu"):
        space = parts[1] if len(parts) > 1 and parts[1] in _SPACES else "generic"
        return f"{base}.{space}" + (".nc" if "nc" in parts else "")
    if base in ("div", "sqrt", "rcp", "rsqrt"):
        rounding = next((p for p in parts[1:] if p in ("rn", "rz", "rm", "rp", "approx", "full")), "")
        return f"{base}.{rounding}" if rounding else base
    if base in ("fma", "ex2", "lg2", "sin", "cos", "tanh", "call", "bra", "cvta", "bar", "shfl", "vote", "mad"):
        return base
    return None


def ptx_counts(text: str, kernel: str) -> dict[str, int]:
    """Instruction counts of `kernel` and the functions it calls, by kind, plus `instructions` and `functions`."""
    functions = ptx_functions(text)
    names = reachable(functions, kernel)
    counts: collections.Counter = collections.Counter(functions=len(names))
    for name in names:
        for line in functions[name].splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith(("//", ".", "$", "{", "}")) or stripped.endswith(":"):
                continue
            m = _INSTRUCTION.match(line)
            if not m:
                continue
            counts["instructions"] += 1
            if ".ftz" in m.group(1):
                counts["ftz"] += 1
            kind = classify(m.group(1))
            if kind:
                counts[kind] += 1
    return dict(counts)


def sass_counts(cubin: bytes) -> dict[str, int] | None:
    """SASS instructions per kernel of a cubin (cuobjdump), None where cuobjdump is not found."""
    tool = os.environ.get("MNEME_CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=False)
    if done.returncode:
        return None
    counts: dict[str, int] = {}
    current = None
    for line in done.stdout.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = m.group(1)
            counts[current] = 0
        elif current and re.match(r"^\s+/\*[0-9a-f]{4}\*/\s+\S", line) and "NOP" not in line:
            counts[current] += 1
    return counts


# -- the two sides ----------------------------------------------------------------------------------


def build_object(source: Path, out: Path, flags: tuple[str, ...] = ("-O3",)) -> Path:
    """`mneme-cc nvcc -arch=sm_90 FLAGS -c source`: the object an application build makes."""
    obj = out / f"{source.stem}.o"
    cmd = [
        sys.executable,
        "-m",
        "mneme.instrument.launcher",
        NVCC,
        f"-arch={ARCH}",
        *flags,
        "-c",
        str(source),
        "-o",
        str(obj),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=source.parent, check=False)
    if done.returncode or not obj.exists():
        raise RuntimeError(f"mneme-cc nvcc failed for {source}: {done.stderr[-600:]}")
    return obj


def nvcc_side(obj: Path) -> tuple[bytes, str, bytes]:
    """(cubin, PTX, the fatbin as the recorder stores it) of the object's sm_90 code."""
    from mneme.core.elf import ElfFile
    from mneme.instrument.fatbin import FATBIN_SECTION, entries

    elf = ElfFile.read(obj)
    (section,) = elf.sections_named(FATBIN_SECTION)
    data = elf.section_data(section)
    found = entries(data, str(obj))
    cubin = next(e.image for e in found if e.kind == "cubin" and e.arch == 90)
    ptx = next(e.image for e in found if e.kind == "ptx").split(b"\0", 1)[0].decode()
    return cubin, ptx, bytes(data)


def recorded_ir(obj: Path, fatbin: bytes):
    """The module a recording holds: the embedded IR with the numerics nvcc applied (finalize's rewrite)."""
    from mneme_cuda import numerics

    from mneme.core import ir
    from mneme.instrument.section import read_entries

    found = [e for e in read_entries(str(obj)) if e.arch == ARCH]
    if len(found) != 1:
        raise RuntimeError(f"{obj} holds {len(found)} {ARCH} IR entries, not one (did clang build it?)")
    entry = found[0]
    text = str(ir.load(entry.bitcode, entry.source))
    found = numerics.ir_numerics(fatbin, ARCH)
    if found is not None:
        text = found[1](text)
    return ir.load(text, entry.source), entry.kernels


def mneme_side(module, kernel: str, changes: dict | None = None):
    """(PTX, cubin binary) of the recorded configuration's IR variant (as `mneme replay --mode ir` builds it).

    `changes`: configuration fields to set instead (e.g. {"unroll_threshold": 1200}).
    """
    from mneme.core import build
    from mneme.core.types import ExperimentConfiguration, dim3

    config = ExperimentConfiguration(grid=dim3(1), block=dim3(1))  # launch dims do not reach the code here
    if changes:
        config = config.replace(**changes)
    ptx = build.compile(module, kernel, config, ARCH, emit="ptx", cache=False)
    cubin = build.compile(module, kernel, config, ARCH, emit="cubin", cache=False)
    return ptx.data.decode(), cubin


def compare_unit(name: str, obj: Path, max_kernels: int, changes: dict | None = None) -> list[dict]:
    from mneme_cuda.cubin import resources

    cubin, ptx, fatbin = nvcc_side(obj)
    module, kernels = recorded_ir(obj, fatbin)
    nv_sass = sass_counts(cubin) or {}
    rows = []
    for kernel in list(kernels)[:max_kernels]:
        row: dict = {"unit": name, "kernel": kernel}
        try:
            m_ptx, m_bin = mneme_side(module, kernel, changes)
        except Exception as exc:  # noqa: BLE001 - one kernel that does not build must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            continue
        nv_res = resources(cubin, kernel)
        row["nvcc"] = {
            "registers": nv_res.registers,
            "local": nv_res.local_mem,
            **ptx_counts(ptx, kernel),
            "sass": nv_sass.get(kernel),
        }
        m_sass = sass_counts(m_bin.data) or {}
        row["mneme"] = {
            "registers": m_bin.resources.registers,
            "local": m_bin.resources.local_mem,
            **ptx_counts(m_ptx, kernel),
            "sass": m_sass.get(kernel),
        }
        rows.append(row)
    return rows


def unit_sources(sets: list[str], tmp: Path, keep: set[str] = frozenset()) -> list[tuple[str, Path]]:
    """(name, object) of every unit of the chosen sets (only those named in `keep`, when given), built here
    (llama.cpp's through its corpus cache)."""

    def wanted(name: str) -> bool:
        return not keep or name in keep

    out = []
    if "corpus" in sets:
        for src in sorted((ROOT / "tests" / "data" / "kernels").glob("*.cu")):
            if wanted(src.stem):
                out.append((src.stem, build_object(src, tmp)))
    if "programs" in sets:
        for src in sorted((ROOT / "tests" / "gpu" / "programs").glob("*.cu")):
            if not wanted(src.stem):
                continue
            try:
                out.append((src.stem, build_object(src, tmp)))
            except RuntimeError as exc:
                log.warning("%s", exc)
    if "llama" in sets:
        import kernel_corpus as kc

        try:
            units = [u for u in kc.ggml_units(kc.fetch(kc.LLAMA), kc.GGML_CI_UNITS) if wanted(u.name)]
            for built in kc.build(units):
                if built.nvcc_ok and built.obj is not None:
                    out.append((f"llama.cpp/{built.unit.name}", built.obj))
        except kc.CorpusUnavailable as exc:
            log.warning("llama.cpp units skipped: %s", exc)
    return out


_COLUMNS = (
    "registers",
    "local",
    "instructions",
    "sass",
    "ld.global",
    "ld.global.nc",
    "ld.generic",
    "st.generic",
    "ld.local",
    "fma",
    "div.rn",
    "div.full",
    "div.approx",
    "sqrt.rn",
    "sqrt.approx",
    "call",
    "bra",
)


def markdown(rows: list[dict]) -> str:
    """One table: per kernel, nvcc / Mneme for each column."""
    head = "| unit | kernel | " + " | ".join(_COLUMNS) + " |"
    lines = [head, "|" + " --- |" * (len(_COLUMNS) + 2)]
    for row in rows:
        name = row["kernel"] if len(row["kernel"]) <= 40 else row["kernel"][:37] + "..."
        if "error" in row:
            lines.append(
                f"| {row['unit']} | `{name}` | " + f"error: {row['error'][:80]} |" + " |" * (len(_COLUMNS) - 1)
            )
            continue
        cells = []
        for col in _COLUMNS:
            a, b = row["nvcc"].get(col, 0), row["mneme"].get(col, 0)
            a, b = ("-" if a is None else a), ("-" if b is None else b)
            cells.append(f"{a} / {b}" if a == b else f"**{a} / {b}**")
        lines.append(f"| {row['unit']} | `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="corpus,programs,llama")
    parser.add_argument("--units", default="", help="Comma-separated unit names to keep (default: all).")
    parser.add_argument("--max-kernels", type=int, default=4, help="Kernels compared per unit.")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="Build Mneme's side with this configuration field changed (JSON value; repeatable).",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    keep = {u for u in opts.units.split(",") if u}
    changes = {}
    for item in opts.set:
        field, _, raw = item.partition("=")
        changes[field] = json.loads(raw)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, obj in unit_sources(opts.sets.split(","), Path(tmp), keep):
            log.warning("comparing %s", name)
            try:
                rows += compare_unit(name, obj, opts.max_kernels, changes)
            except Exception as exc:  # noqa: BLE001 - a unit without IR or without an sm_90 image: listed, the others go on
                rows.append({"unit": name, "kernel": "-", "error": f"{type(exc).__name__}: {exc}"[:300]})
    table = markdown(rows)
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))
    if opts.md:
        opts.md.write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
