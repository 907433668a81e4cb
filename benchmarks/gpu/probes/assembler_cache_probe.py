"""Probe (issue 28, compile time): does the PTX assembler keep results of its own on a GPU machine?

On the GPU machine, `bench_corpus.py --compile-only` measured a median assemble stage of 0.5 ms,
against 11-12 ms on the CPU machine, where nvJitLink 13.0 and 13.5 both take the same time for a
second build of the same PTX as for the first. This probe assembles the PTX of --kernels small
corpus kernels (the IR `bench_corpus.py --export-bitcode` wrote) twice each, through Mneme's
`assemble_ptx`, in a fresh process per setting:
- as the machine is;
- with CUDA_CACHE_DISABLE=1 (the driver's JIT cache off);
and prints, per setting, the median first and second assembly, the assembler's version and the
file its library was loaded from. A probe: its findings go to docs/design/investigations/.

    scripts/gpu-suite --run python3 benchmarks/gpu/probes/assembler_cache_probe.py .gpu/corpus-ir
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_CHILD = "--child"


def _loaded(fragment: str) -> str:
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return "?"
    return next((line.split()[-1] for line in maps if fragment in line), "not loaded")


def child(folder: Path, count: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench_corpus import CONFIG, SMALL, _instructions

    from mneme.core import build, ir
    from mneme_cuda import codegen

    index = json.loads((folder / "index.json").read_text())
    ptxs = []
    for item in index["modules"]:
        for kernel in item["kernels"]:
            module = ir.link([folder / item["file"]], kernel)
            if _instructions(module) <= SMALL:
                ptxs.append(build.compile(module, kernel, CONFIG, "sm_90", emit="ptx", cache=False).data.decode())
            if len(ptxs) >= count:
                break
        if len(ptxs) >= count:
            break
    first, second = [], []
    for ptx in ptxs:
        for times in (first, second):
            start = time.perf_counter()
            codegen.assemble_ptx(ptx, "sm_90", CONFIG)
            times.append(time.perf_counter() - start)
    print(f"  {len(ptxs)} kernels; assembler {codegen.ptxas_version()} from {_loaded('nvJitLink')}; "
          f"libcuda {_loaded('libcuda')}")  # fmt: skip
    print(f"  first assembly median {statistics.median(first) * 1e3:.2f} ms, "
          f"second {statistics.median(second) * 1e3:.2f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an exported corpus (bench_corpus.py --export-bitcode)")
    parser.add_argument("--kernels", type=int, default=30)
    parser.add_argument(_CHILD, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.folder, args.kernels)
        return
    for label, extra in (("as the machine is", {}), ("CUDA_CACHE_DISABLE=1", {"CUDA_CACHE_DISABLE": "1"})):
        print(label)
        sys.stdout.flush()
        subprocess.run([sys.executable, __file__, str(args.folder), "--kernels", str(args.kernels), _CHILD],
                       env={**os.environ, **extra}, check=False, stderr=subprocess.DEVNULL)  # fmt: skip


if __name__ == "__main__":
    main()
