"""Mneme on a third-party kernel corpus fetched from PyPI (tests/kernel_corpus.py): IR capture,
host-backend coverage, compile speed against `nvcc -cubin`, and resources against `ptxas -v`.

For every translation unit: `mneme-cc nvcc -c` (cached); how many nvcc compiles and how many of
those carry IR. For every kernel with IR: `mneme ir check --backend host` (accepted, and every
refused construct by name), an uncached compile to an sm_90 cubin through `build.compile` (median
of --reps, per stage), and `ptxas -v` on the same kernel's PTX against the resources Mneme reads
from its cubin. In the same run, `nvcc -cubin` of each unit (median of --nvcc-reps), per kernel = the
unit's time / its kernels. Writes a Markdown report (default benchmarks/results/cpu-corpus.md).
Run: python benchmarks/bench_corpus.py [--reps N] [--out FILE] [--limit N]

The compile timing alone can run on a machine without nvcc or clang (the GPU machine):
`--export-bitcode DIR` writes the corpus IR (what mneme-cc embedded: third-party code, never
committed) with an index, and `--compile-only DIR --out FILE` times the same uncached builds from it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import kernel_corpus as kc

from mneme.core import build, ir
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.check_commands import check

CONFIG = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))
SMALL = 200  # IR instructions: a "small kernel" (issue 28's compile target is for those)
FIELDS = ("registers", "spill_stores", "spill_loads", "shared_mem", "local_mem", "const_mem")


def _refused_name(construct: str) -> str:
    """A short name for a refused construct: the PTX instruction of an inline asm, else the text."""
    m = re.match(r"inline assembly '(.*)'", construct, re.S)
    if m:
        text = re.sub(r"(?:\\0A|\\09|\s)+", " ", m.group(1)).strip(" {}")
        ops = [s.strip().split(" ")[0] for s in text.split(";") if s.strip() and not s.strip().startswith(".reg")]
        return "asm " + " ".join(dict.fromkeys(ops))[:60]
    return construct[:90]


def _instructions(module) -> int:
    """The IR instructions of every function defined in the linked, pruned module."""
    return sum(1 for fn in module.functions for block in fn.blocks for _ in block.instructions)


def _ptxas_v(ptx: str, arch: str, folder: Path) -> str:
    from mneme_cuda import codegen

    src = folder / "k.ptx"
    src.write_text(ptx)
    done = subprocess.run(
        [codegen.ptxas_path(), f"-arch={arch}", "-v", str(src), "-o", str(folder / "k.cubin")],
        capture_output=True,
        text=True,
    )
    return done.stdout + done.stderr


def _ptxas_numbers(report: str, kernel: str) -> dict[str, int]:
    start = report.find(f"Compiling entry function '{kernel}'")
    section = report[start:] if start >= 0 else ""
    nxt = section.find("Compiling entry function", 10)
    section = section[: nxt if nxt > 0 else len(section)]

    def grab(pattern: str) -> int:
        found = re.search(pattern, section)
        return int(found.group(1)) if found else 0

    # the user constant bank: the module's line before the first entry (sm_80: `272 bytes cmem[3]`) and the entry's
    # own; not bank 4, where standalone ptxas keeps the addresses of globals (the driver does not count it)
    header = report[: report.find("Compiling entry function")] if "Compiling entry function" in report else ""
    from mneme_cuda.cubin import USER_CONSTANT_BANK

    cmem = sum(int(n) for n in re.findall(rf"(\d+) bytes cmem\[{USER_CONSTANT_BANK}\]", header + section))
    return {
        "registers": grab(r"Used (\d+) registers"),
        "spill_stores": grab(r"(\d+) bytes spill stores"),
        "spill_loads": grab(r"(\d+) bytes spill loads"),
        "shared_mem": grab(r"(\d+) bytes smem"),
        "local_mem": grab(r"(\d+) bytes stack frame"),
        "const_mem": cmem,
        "found": start >= 0,
        "cmem_printed": "cmem[" in report,
    }


_CONST_DECL = re.compile(
    r"^\s*(?:\.visible\s+|\.global\s+)?\.const\s+\.align\s+(\d+)\s+\.\w+\s+[\w$]+((?:\[\d+\])*)", re.MULTILINE
)


def ptx_const_bytes(ptx: str) -> int:
    """The size of the user constant bank the PTX declares: its `.const` variables laid out in order, aligned."""
    end = 0
    for align, dims in _CONST_DECL.findall(ptx):
        size = 1
        for n in re.findall(r"\d+", dims):
            size *= int(n)
        end = (end + int(align) - 1) // int(align) * int(align) + size
    return end


def const_at_sm80(module, kernel: str, folder: Path) -> tuple[int, int] | None:
    """(Mneme's const_mem, `ptxas -v`'s cmem banks) of the kernel built for sm_80, where ptxas prints the
    user constant bank; None where the kernel cannot be built for sm_80 (sm_90-only instructions)."""
    from mneme_cuda import codegen, cubin

    try:
        ptx = build.compile(module, kernel, CONFIG, "sm_80", emit="ptx", cache=False).data.decode()
        data, log, tool = codegen.assemble_ptx(ptx, "sm_80", CONFIG, name=kernel, assembler="ptxas")
    except Exception:  # counted by the caller as not buildable for sm_80
        return None
    return cubin.resources(data, kernel, log, tool).const_mem, _ptxas_numbers(_ptxas_v(ptx, "sm_80", folder), kernel)[
        "const_mem"
    ]


def ptxas_release() -> str:
    from mneme_cuda import codegen

    done = subprocess.run([codegen.ptxas_path(), "--version"], capture_output=True, text=True)
    return "ptxas " + (done.stdout.strip().splitlines() or ["?"])[-1]


def nvcc_cubin_seconds(unit: kc.Unit, reps: int, folder: Path) -> float | None:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        done = subprocess.run(
            [kc.NVCC, f"-arch={kc.ARCH}", *unit.flags, "-cubin", str(unit.source), "-o", str(folder / "u.cubin")],
            capture_output=True,
            cwd=unit.source.parent,
        )
        if done.returncode != 0:
            return None
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3 if seconds else float("nan")


class CompileTimes:
    """Uncached IR -> cubin builds of the corpus's kernels, and their rows in a report's compile table."""

    def __init__(self, reps: int):
        self.reps = reps
        self.stages: dict[str, list[float]] = collections.defaultdict(list)
        self.totals: list[float] = []
        self.small: list[float] = []  # kernels of at most SMALL instructions after linking
        self.small_first: list[float] = []  # their first builds
        self.projects: dict[str, list[float]] = collections.defaultdict(list)

    def add(self, module, kernel: str, project: str):
        """Build `kernel` `reps` times (Mneme's build cache off); returns (the median seconds, the last binary).

        The first build is also the first time the assembler sees this PTX in the process, should it keep
        results of its own: the small kernels' first builds are a row of their own.
        """
        times = []
        for _ in range(self.reps):
            binary = build.compile(module, kernel, CONFIG, kc.ARCH, cache=False)
            times.append(sum(binary.stage_times.values()))
            for stage, seconds in binary.stage_times.items():
                self.stages[stage].append(seconds)
        total = statistics.median(times)
        self.totals.append(total)
        self.projects[project].append(total)
        if _instructions(module) <= SMALL:
            self.small.append(total)
            self.small_first.append(times[0])
        return total, binary

    def rows(self) -> list[str]:
        return [
            "| stage | median ms per kernel |",
            "| --- | --- |",
            *(f"| {stage} | {_ms(v):.1f} |" for stage, v in self.stages.items()),
            f"| **total (Mneme, IR -> cubin)** | {_ms(self.totals):.1f} |",
            f"| total, the {len(self.small)} small kernels (at most {SMALL} IR instructions) | {_ms(self.small):.1f} |",
            f"| total, the small kernels' first builds | {_ms(self.small_first):.1f} |",
            *(f"| total, {name}'s {len(v)} kernels | {_ms(v):.1f} |" for name, v in self.projects.items()),
        ]


def corpus_names() -> list[str]:
    return [f"{s.name} {s.version} (sdist sha256 {s.sha256[:12]}..., {s.licence})" for s in kc.PROJECTS]


def machine() -> str:
    """The host's name, CPU model and cores, for a report's first line."""
    model = ""
    try:
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    return f"{platform.node() or 'this machine'} ({model or platform.processor() or 'CPU unknown'}), {os.cpu_count()} cores"


def export_bitcode(built: list[kc.Built], folder: Path) -> int:
    """Write each unit's embedded IR as `<unit>.<n>.bc` and `index.json` (project, unit, file, kernels); returns kernels."""
    folder.mkdir(parents=True, exist_ok=True)
    modules = []
    for b in built:
        for n, entry in enumerate(b.entries()):
            name = f"{b.unit.name}.{n}.bc"
            (folder / name).write_bytes(entry.bitcode)
            modules.append(
                {"project": b.unit.project, "unit": b.unit.name, "file": name, "kernels": list(entry.kernels)}
            )
    index = {"arch": kc.ARCH, "corpus": corpus_names(), "modules": modules}
    (folder / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return sum(len(m["kernels"]) for m in modules)


def compile_only(folder: Path, reps: int, out: Path) -> str:
    """Time the uncached builds of every kernel in an `export_bitcode` folder; write and return the report."""
    from mneme_cuda import codegen

    try:
        index = json.loads((folder / "index.json").read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{folder / 'index.json'}: not an exported corpus ({exc}); make one with --export-bitcode")
    times, failed = CompileTimes(reps), []
    for item in index["modules"]:
        for kernel in item["kernels"]:
            try:
                times.add(ir.link([folder / item["file"]], kernel), kernel, item["project"])
            except Exception as exc:  # counted and named, the run goes on
                failed.append(f"{kernel}: {type(exc).__name__}: {str(exc)[:120]}")
    import llvmlite.binding as llvm

    lines = [
        "# Third-party kernel corpus: compile time only",
        "",
        f"`python benchmarks/bench_corpus.py --compile-only DIR --reps {reps}` on {machine()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; LLVM {'.'.join(map(str, llvm.llvm_version_info))} "
        f"(llvmlite); assembler {codegen.ptxas_version()}; architecture {index['arch']}.",
        "",
        "Corpus: " + "; ".join(index["corpus"]) + ", the IR mneme-cc embedded, exported with `--export-bitcode`.",
        "",
        f"{len(times.totals)} kernels compiled, {len(failed)} failed; each uncached, IR -> cubin, process start-up "
        f"excluded, median of {reps} builds per kernel.",
        "",
        *times.rows(),
    ]
    if failed:
        lines += ["", "Failures:", ""] + [f"- {f}" for f in failed[:40]]
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--nvcc-reps", type=int, default=1, help="runs of nvcc -cubin per unit (seconds each)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N units (quick runs)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cpu-corpus.md"))
    parser.add_argument("--export-bitcode", metavar="DIR", help="write the corpus IR and its index to DIR, then stop")
    parser.add_argument(
        "--compile-only", metavar="DIR", help="time the compiles of an exported corpus (no nvcc needed)"
    )
    args = parser.parse_args()
    from mneme_cuda import codegen, cubin

    if args.compile_only:
        print(compile_only(Path(args.compile_only), args.reps, Path(args.out)))
        return
    if args.export_bitcode:
        built = [b for b in kc.build(kc.units()[: args.limit or None]) if b.nvcc_ok and b.ir_embedded]
        print(
            f"{export_bitcode(built, Path(args.export_bitcode))} kernels of {len(built)} units -> {args.export_bitcode}"
        )
        return

    start = time.perf_counter()
    units = kc.units()[: args.limit or None]
    built = kc.build(units)
    build_seconds = time.perf_counter() - start
    nvcc_ok = [b for b in built if b.nvcc_ok]
    with_ir = [b for b in nvcc_ok if b.ir_embedded]
    workarounds = collections.Counter()
    for b in with_ir:
        for entry in b.entries():
            if "workarounds:" in entry.producer:
                workarounds[entry.producer.split("workarounds:", 1)[1].strip(" )")] += 1

    per_project = collections.defaultdict(lambda: collections.Counter())
    refused = collections.Counter()
    times = CompileTimes(args.reps)
    agree = collections.Counter()
    disagree: list[str] = []
    nvcc_per_kernel: list[float] = []
    mneme_per_unit: list[tuple[float, float]] = []
    compiled = failed = 0
    const80 = collections.Counter()
    const_ptx = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for b in built:
            p = per_project[b.unit.project]
            p["units"] += 1
            p["nvcc"] += b.nvcc_ok
            p["ir"] += b.nvcc_ok and b.ir_embedded
        for b in with_ir:
            p = per_project[b.unit.project]
            unit_mneme = 0.0
            kernels_in_unit = 0
            for n, entry in enumerate(b.entries()):
                (folder / f"{b.unit.name}.{n}.bc").write_bytes(entry.bitcode)
            verdicts = check((str(b.obj),), None, None, "host")
            for v in verdicts:
                p["kernels"] += 1
                p["accepted"] += v.runnable
                for construct in v.unsupported:
                    refused[_refused_name(construct)] += 1
            for n, entry in enumerate(b.entries()):
                bc = folder / f"{b.unit.name}.{n}.bc"
                for kernel in entry.kernels:
                    kernels_in_unit += 1
                    try:
                        module = ir.link([bc], kernel)
                        total, binary = times.add(module, kernel, b.unit.project)
                        unit_mneme += total
                        ptx = build.compile(module, kernel, CONFIG, kc.ARCH, emit="ptx", cache=False).data.decode()
                        compiled += 1
                    except Exception as exc:  # counted and named, the run goes on
                        failed += 1
                        disagree.append(f"{kernel}: compile failed ({type(exc).__name__}: {str(exc)[:120]})")
                        continue
                    want = _ptxas_numbers(_ptxas_v(ptx, kc.ARCH, folder), kernel)
                    if not want["cmem_printed"]:  # CUDA 13 on sm_90: no cmem line; the PTX's declarations, and sm_80
                        declared = ptx_const_bytes(ptx)
                        const_ptx["agree" if declared == binary.resources.const_mem else "differ"] += 1
                        const_ptx["nonzero"] += declared != 0
                        want["const_mem"] = declared  # the reference where ptxas -v prints no bank
                        pair = const_at_sm80(module, kernel, folder)
                        if pair is None:
                            const80["not buildable for sm_80"] += 1
                        else:
                            const80["agree" if pair[0] == pair[1] else "differ"] += 1
                            const80["nonzero"] += pair[1] != 0
                            if pair[0] != pair[1]:
                                disagree.append(f"{kernel} (sm_80): const_mem {pair[0]} vs ptxas -v {pair[1]}")
                    data, log, tool = codegen.assemble_ptx(ptx, kc.ARCH, CONFIG, name=kernel, assembler="ptxas")
                    readings = {"ptxas": cubin.resources(data, kernel, log, tool), "default": binary.resources}
                    for which, got in readings.items():
                        same = [f for f in FIELDS if getattr(got, f) == want[f]]
                        for f in same:
                            agree[which, f] += 1
                        if len(same) != len(FIELDS) and which == "ptxas":
                            disagree.append(
                                f"{kernel}: "
                                + ", ".join(
                                    f"{f} {getattr(got, f)} vs ptxas -v {want[f]}" for f in FIELDS if f not in same
                                )
                            )
                        elif which == "default" and any(getattr(got, f) != want[f] for f in FIELDS[3:5]):
                            disagree.append(
                                f"{kernel} ({got.assembler}): "
                                + ", ".join(
                                    f"{f} {getattr(got, f)} vs ptxas -v {want[f]}"
                                    for f in FIELDS[3:5]
                                    if getattr(got, f) != want[f]
                                )
                            )
            seconds = nvcc_cubin_seconds(b.unit, args.nvcc_reps, folder)
            if seconds is not None and kernels_in_unit:
                nvcc_per_kernel.append(seconds / kernels_in_unit)
                mneme_per_unit.append((seconds, unit_mneme))

    kernels = sum(p["kernels"] for p in per_project.values())
    accepted = sum(p["accepted"] for p in per_project.values())
    lines = [
        "# Third-party kernel corpus (CPU)",
        "",
        f"`python benchmarks/bench_corpus.py --reps {args.reps}` on {machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {kc.nvcc_version()}; "
        f"{ptxas_release()}; default assembler {codegen.ptxas_version()}; architecture {kc.ARCH}.",
        "",
        "Corpus: " + "; ".join(corpus_names()) + ". See tests/kernel_corpus.py for the units chosen and why.",
        f"Building the corpus with `mneme-cc nvcc -c` took {build_seconds:.0f} s in this run "
        "(objects are cached by source, flags and mneme-cc's sources).",
        "",
        "| project | units | nvcc compiles | IR embedded | kernels with IR | host backend accepts |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, p in per_project.items():
        pct = 100 * p["accepted"] / p["kernels"] if p["kernels"] else 0
        lines.append(
            f"| {name} | {p['units']} | {p['nvcc']} | {p['ir']} | {p['kernels']} | {p['accepted']} ({pct:.1f}%) |"
        )
    lines.append(
        f"| **all** | {len(built)} | {len(nvcc_ok)} | {len(with_ir)} | {kernels} | {accepted} "
        f"({100 * accepted / max(kernels, 1):.1f}%) |"
    )
    lines += [
        "",
        "Workarounds mneme-cc applied (units): " + (", ".join(f"{w} ({n})" for w, n in workarounds.items()) or "none"),
        "",
    ]
    lines += ["## Constructs the host backend refuses", "", "| construct | kernels |", "| --- | --- |"]
    lines += [f"| `{c}` | {n} |" for c, n in refused.most_common()] or ["| none | 0 |"]
    lines += [
        "",
        "## Compile to an sm_90 cubin (uncached, process start-up excluded)",
        "",
        f"{compiled} kernels compiled, {failed} failed.",
        "",
        *times.rows(),
        f"| `nvcc -cubin` of the unit / its kernels | {_ms(nvcc_per_kernel):.1f} |",
        "",
    ]
    if mneme_per_unit:
        lines.append(
            f"Per unit (median of {len(mneme_per_unit)}): `nvcc -cubin` {_ms([a for a, _ in mneme_per_unit]):.0f} ms, "
            f"Mneme's compile of all its kernels {_ms([b for _, b in mneme_per_unit]):.0f} ms."
        )
    lines += [
        "",
        "## Resources: Mneme's cubin reading vs `ptxas -v` of the same PTX",
        "",
        f"Mneme reads each field from the cubin. Column 1: the cubin `ptxas` ({ptxas_release()}, the "
        "version `ptxas -v` is) assembled; column 2: the cubin of Mneme's default assembler "
        f"({codegen.ptxas_version()}), whose register allocation may differ where its version does.",
        "",
        "| field | same assembler as `ptxas -v` | default assembler |",
        "| --- | --- | --- |",
    ]
    no_cmem = const_ptx["agree"] + const_ptx["differ"]
    lines += [
        f"| {f}{' *' if f == 'const_mem' and no_cmem else ''} | {agree['ptxas', f]} / {compiled} | "
        f"{agree['default', f]} / {compiled} |"
        for f in FIELDS
    ]
    checked80 = const80["agree"] + const80["differ"]
    if no_cmem:
        lines += [
            "",
            f"\\* CUDA 13's `ptxas -v` prints no `cmem` line for sm_90 ({no_cmem} kernels here), so there the "
            "const_mem row compares Mneme's reading (the cubin's user constant bank, `.nv.constant3`) with the "
            "size of the user constant variables the PTX declares (`.const`, laid out in order with their "
            f"alignment): equal on {const_ptx['agree']} of {no_cmem} kernels ({const_ptx['nonzero']} of them "
            "nonzero). Each kernel is also built for sm_80, where `ptxas -v` prints the bank "
            f"(`N bytes cmem[3]`), and compared there: equal on {const80['agree']} of {checked80} kernels "
            f"({const80['nonzero']} of them with a nonzero bank); {const80['not buildable for sm_80']} use "
            "sm_90-only instructions and cannot be built for sm_80. The GPU suite compares const_mem with the "
            "driver's `CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`.",
        ]
    if disagree:
        lines += ["", "Disagreements and failures:", ""] + [f"- {d}" for d in disagree[:40]]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
