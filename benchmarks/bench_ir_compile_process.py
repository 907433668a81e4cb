"""`mneme ir compile` of one small kernel as a whole process, against `nvcc -cubin` of the same kernel (issue 37).

What a user waits for at the command line: the interpreter starting, Mneme's imports and setup,
then IR -> PTX -> cubin. The IR is the corpus kernel's device IR that clang writes before LLVM's
optimizations (`tests/irbuild.py`, not timed), so both sides run an O3 pipeline and assemble for
the same architecture; neither needs a GPU. Each round runs `python -c pass`, then the two
commands in alternating order (a change in machine load hits both alike); the report gives medians
of wall time and of CPU time (user + system of the process and its children: a loaded machine
inflates it less) and the ratio mneme / nvcc of the per-round pairs. Target: ratio <= 1. Mneme
runs twice: as installed (nvJitLink assembles in process when it loads) and with
MNEME_PTX_ASSEMBLER=ptxas (the ptxas subprocess, as nvcc does).

    python benchmarks/bench_ir_compile_process.py [--rounds 15] [--kernel saxpy] [--arch sm_90] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    return found or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _run(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system, children included) seconds of one run; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(rounds: int, kernel: str, arch: str) -> dict:
    from irbuild import KERNELS_DIR, build_cuda_ir

    nvcc = _nvcc()
    if nvcc is None:
        raise SystemExit("skipped: needs nvcc (the CUDA toolkit)")
    work = Path(tempfile.mkdtemp(prefix="bench-ir-compile-"))
    source = work / f"{kernel}.cu"
    shutil.copy(KERNELS_DIR / f"{kernel}.cu", source)
    ir = work / f"{kernel}.ll"
    shutil.copy(build_cuda_ir(kernel, arch=arch), ir)
    mneme = [sys.executable, "-m", "mneme", "ir", "compile", str(ir), "--arch", arch, "-o", str(work / "mneme.cubin")]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mneme ir compile": mneme,
        # the same, assembling with the ptxas subprocess instead of nvJitLink (which loads in process)
        "mneme ir compile (ptxas)": ["env", "MNEME_PTX_ASSEMBLER=ptxas", *mneme],
        "nvcc -cubin": [nvcc, "-cubin", f"-arch={arch}", str(source), "-o", str(work / "nvcc.cubin")],
    }
    for argv in commands.values():  # warm the file cache, the command index, the bytecode caches
        _run(argv, work)
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in commands}
    pairs = {"mneme ir compile": {"wall": [], "cpu": []}, "mneme ir compile (ptxas)": {"wall": [], "cpu": []}}
    loads = [os.getloadavg()[0]]
    for i in range(rounds):
        order = ["mneme ir compile", "nvcc -cubin", "mneme ir compile (ptxas)"]
        for name in ["python -c pass", *(order if i % 2 == 0 else order[::-1])]:
            wall, cpu = _run(commands[name], work)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
        for name, ratios in pairs.items():
            for clock in ("wall", "cpu"):
                ratios[clock].append(times[name][clock][-1] / times["nvcc -cubin"][clock][-1])
        loads.append(os.getloadavg()[0])
    shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "kernel": kernel,
        "arch": arch,
        "python": sys.version.split()[0],
        "load_average_1min": {"min": min(loads), "max": max(loads)},
        "commands": {
            name: {clock: statistics.median(values) for clock, values in row.items()} for name, row in times.items()
        },
        "ratio_over_nvcc": {
            name: {clock: statistics.median(values) for clock, values in ratios.items()}
            for name, ratios in pairs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--kernel", default="saxpy", help="a kernel of tests/data/kernels (default: saxpy)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    result = measure(args.rounds, args.kernel, args.arch)
    load = result["load_average_1min"]
    print(
        f"{args.kernel} for {args.arch}, {args.rounds} rounds interleaved; load average (1 min) "
        f"{load['min']:.1f}..{load['max']:.1f}"
    )
    print("| command | median wall | median CPU (user + system) |")
    print("| --- | --- | --- |")
    for name, row in result["commands"].items():
        print(f"| `{name}` | {row['wall'] * 1e3:.0f} ms | {row['cpu'] * 1e3:.0f} ms |")
    for name, ratio in result["ratio_over_nvcc"].items():
        print(
            f"ratio `{name}` / `nvcc -cubin`, median of per-round pairs: wall {ratio['wall']:.2f}, "
            f"CPU {ratio['cpu']:.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
