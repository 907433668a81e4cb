"""Probe (issue 28, compile time): does the PTX assembler keep results of its own on a GPU machine?

On the GPU machine, `bench_corpus.py --compile-only` measured a median assemble stage of 0.5 ms,
against 11-12 ms on the CPU machine, where nvJitLink 13.0 and 13.5 both take the same time for a
second build of the same PTX as for the first. This probe assembles the PTX of --kernels small
corpus kernels (the IR `bench_corpus.py --export-bitcode` wrote) twice each, through Mneme's
nvJitLink options less the -no-cache it now passes (this probe is why it does), in a fresh process
per setting:
- with an empty driver JIT cache (CUDA_CACHE_PATH, a new folder);
- the same again, in a new process on that now filled cache;
- with CUDA_CACHE_DISABLE=1 (the driver's JIT cache off);
- with nvJitLink's option -no-cache added, on a new empty cache folder;
- in one process on a new empty cache folder, each kernel assembled without -no-cache (a miss), then
  with it, then without it again (a hit), with each report's length;
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
import tempfile
import time
from pathlib import Path

_CHILD = "--child"


def _loaded(fragment: str) -> str:
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return "?"
    return next((line.split()[-1] for line in maps if fragment in line), "not loaded")


def child(folder: Path, count: int, extra: list[str], interleave: bool = False) -> None:
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
    nvjitlink = codegen._nvjitlink()
    # Mneme's options less its -no-cache (the question is what nvJitLink does without it), then `extra`
    opts = [o for o in codegen.nvjitlink_options("sm_90", CONFIG) if o != "-no-cache"] + extra

    def assemble(ptx: str, options: list[str] = opts) -> int:  # as codegen.assemble_ptx does; the report's length
        handle = nvjitlink.create(len(options), options)
        try:
            data = ptx.encode()
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
            nvjitlink.complete(handle)
            nvjitlink.get_linked_cubin(handle, bytearray(nvjitlink.get_linked_cubin_size(handle)))
            return nvjitlink.get_info_log_size(handle)
        finally:
            nvjitlink.destroy(handle)

    if interleave:
        rows: dict[str, list[float]] = {"miss": [], "-no-cache": [], "hit": []}
        sizes: dict[str, list[int]] = {name: [] for name in rows}
        for ptx in ptxs:
            for name, options in (("miss", opts), ("-no-cache", opts + ["-no-cache"]), ("hit", opts)):
                start = time.perf_counter()
                sizes[name].append(assemble(ptx, options))
                rows[name].append(time.perf_counter() - start)
        for name, times in rows.items():
            print(
                f"  {name}: median {statistics.median(times) * 1e3:.2f} ms, report {min(sizes[name])}-{max(sizes[name])} bytes"
            )
        print(f"  libcuda {_loaded('libcuda')}")
        return

    first, second = [], []
    for ptx in ptxs:
        for times in (first, second):
            start = time.perf_counter()
            assemble(ptx)
            times.append(time.perf_counter() - start)
    print(
        f"  {len(ptxs)} kernels; assembler {codegen.ptxas_version()} from {_loaded('nvJitLink')}; "
        f"libcuda {_loaded('libcuda')}"
    )
    print(
        f"  first assembly median {statistics.median(first) * 1e3:.2f} ms, "
        f"second {statistics.median(second) * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an exported corpus (bench_corpus.py --export-bitcode)")
    parser.add_argument("--kernels", type=int, default=30)
    parser.add_argument(_CHILD, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--option", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.folder, args.kernels, [o for o in args.option if o != "interleave"], "interleave" in args.option)
        return
    with tempfile.TemporaryDirectory() as tmp:
        filled, fresh = str(Path(tmp, "filled")), str(Path(tmp, "fresh"))
        settings = (
            ("without -no-cache, an empty driver cache", {"CUDA_CACHE_PATH": filled}, []),
            ("the same, a new process on the cache the first filled", {"CUDA_CACHE_PATH": filled}, []),
            ("CUDA_CACHE_DISABLE=1", {"CUDA_CACHE_DISABLE": "1"}, []),
            ("nvJitLink -no-cache, an empty driver cache", {"CUDA_CACHE_PATH": fresh}, ["--option=-no-cache"]),
            (
                "one process: miss, -no-cache, hit",
                {"CUDA_CACHE_PATH": str(Path(tmp, "third"))},
                ["--option=interleave"],
            ),
        )
        for label, env, extra in settings:
            print(label)
            sys.stdout.flush()
            subprocess.run(
                [sys.executable, __file__, str(args.folder), "--kernels", str(args.kernels), _CHILD, *extra],
                env={**os.environ, **env},
                check=False,
                stderr=subprocess.DEVNULL,
            )


if __name__ == "__main__":
    main()
