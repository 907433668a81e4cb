"""Compile latency of one variant, IR -> PTX -> cubin at O3, over the corpus; per-stage split.

Also: a generated 200-function kernel, the cost of a build-cache hit against a miss, and a sweep of
the ptxas knobs (the `compiler` space's ptxas dimensions) with and without the PTX shared through the
build cache (`Backend.intermediate`).
Prints medians and ratios (no timed assertions). Run: python benchmarks/bench_compile.py [--reps N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from irbuild import build_cuda_ir, corpus

from mneme.core.native import tool_version
from mneme_cuda import codegen as cuda_codegen
from mneme_cuda import parallel_codegen
from mneme_cuda import target as nvptx
from mneme_cuda.backend import CudaBackend

from mneme.core import build, envvars, ir, ircache, pipeline
from mneme.core.types import ExperimentConfiguration

CONFIG = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1), passes="default<O3>", codegen_opt=3, ptxas_opt=3)
STAGES = ("preprocess", "optimize", "codegen", "assemble")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f}"


def _cpu() -> float:
    """CPU seconds of this process and its finished children (ptxas): robust on a busy machine."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


CLOCK = time.perf_counter


def compile_once(mod, kernel: str, config: ExperimentConfiguration, assembler: str) -> dict[str, float]:
    """One uncached build, with the PTX assembled by `assembler`; seconds per stage and in total."""
    start = CLOCK()
    t = [CLOCK()]
    pre = pipeline.preprocess(mod, kernel, config, base_hash="bench")
    t.append(CLOCK())
    try:
        CudaBackend().optimize(pre.module, config, "sm_90")
        t.append(CLOCK())
        ptx = nvptx.target_machine("sm_90", config.codegen_opt).emit_assembly(pre.module)
        t.append(CLOCK())
        cuda_codegen.assemble_ptx(ptx, "sm_90", config, kernel, assembler=assembler)
        t.append(CLOCK())
    finally:
        pre.module.close()
    stages = {name: t[i + 1] - t[i] for i, name in enumerate(STAGES)}
    return {**stages, "total": CLOCK() - start}


def median_stages(mod, kernel, config, assembler, reps) -> dict[str, float]:
    compile_once(mod, kernel, config, assembler)  # warm: target machines, nvJitLink's first call
    runs = [compile_once(mod, kernel, config, assembler) for _ in range(reps)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def compare_methods(mod, kernel: str, reps: int) -> None:
    """Serial against parallel code generation (build.compile, uncached), interleaved, medians."""
    parallel_codegen.warm()  # the workers start once per process: not counted
    runs: dict[str, list[dict[str, float]]] = {"serial": [], "parallel": []}
    resources = {}
    for _ in range(reps):
        for method in runs:
            t0 = CLOCK()
            binary = build.compile(
                mod, kernel, CONFIG.replace(codegen_method=method), "sm_90", cache=False, base_hash="bench"
            )
            runs[method].append({**binary.stage_times, "total": CLOCK() - t0})
            resources[method] = binary.resources
    jobs = parallel_codegen.codegen_jobs()
    parts = len(parallel_codegen.partitions(mod, kernel, jobs))
    for method, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"  {method:8s} ("
            + (f"{parts} partitions, {jobs} jobs; " if method == "parallel" else "")
            + ", ".join(f"{k} {_ms(v).strip()} ms" for k, v in med.items())
            + f"); registers {resources[method].registers}"
        )
    ratio = statistics.median(r["total"] for r in runs["parallel"]) / statistics.median(
        r["total"] for r in runs["serial"]
    )
    same = "same" if resources["parallel"] == resources["serial"] else "DIFFERENT"
    print(f"  ratio parallel / serial (median total): {ratio:.2f}; resources {same}")


def generated_source(functions: int) -> str:
    """A kernel calling `functions` distinct device functions (noinline: they stay functions)."""
    lines = []
    for i in range(functions):
        lines.append(
            f"__device__ __noinline__ float f{i}(float x, int k) {{\n"
            f"  float y = x * {i + 1}.0f + k;\n  for (int j = 0; j < (k & 3); ++j) y = y * 0.5f + {i}.25f;\n"
            f"  return y > {i}.0f ? y - x : y + x;\n}}\n"
        )
    body = "\n".join(f"  acc += f{i}(acc, i + {i});" for i in range(functions))
    lines.append(
        'extern "C" __global__ void many_functions(const float* in, float* out, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  float acc = in[i];\n"
        f"{body}\n  out[i] = acc;\n}}\n"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="Measure CPU time (process + ptxas children) instead of wall time: for a busy machine.",
    )
    opts = parser.parse_args()
    global CLOCK
    if opts.cpu:
        CLOCK = _cpu
    assemblers = ["ptxas"] + (["nvjitlink"] if cuda_codegen.ptx_assembler() == "nvjitlink" else [])

    print(
        f"llvmlite LLVM {ir.LLVM_VERSION}; ptxas: {tool_version(cuda_codegen.ptxas_path() or 'ptxas')}; "
        f"nvJitLink: {cuda_codegen.ptxas_version() if 'nvjitlink' in assemblers else 'no'} (freed heap kept: "
        f"{envvars.get('MNEME_MALLOC_TUNING') != '0'}); median of {opts.reps} runs, "
        f"{'CPU' if opts.cpu else 'wall'} ms"
    )
    header = (
        f"{'kernel':24s}" + "".join(f"{s:>11s}" for s in STAGES) + "".join(f"{'total/' + a:>17s}" for a in assemblers)
    )
    print(header)
    totals: dict[str, list[float]] = {a: [] for a in assemblers}
    for item in corpus():
        for kernel in item.kernels:
            mod = ir.link([build_cuda_ir(item.source)], kernel)
            per = {a: median_stages(mod, kernel, CONFIG, a, opts.reps) for a in assemblers}
            best = per[assemblers[-1]]
            stages = "".join(f"{_ms(best[s]):>11s}" for s in STAGES[:3]) + "".join(
                f"{_ms(per[a]['assemble']):>11s}" for a in assemblers[-1:]
            )
            print(f"{kernel[:24]:24s}{stages}" + "".join(f"{_ms(per[a]['total']):>17s}" for a in assemblers))
            for a in assemblers:
                totals[a].append(per[a]["total"])
    for a in assemblers:
        print(f"median total per corpus kernel with {a}: {_ms(statistics.median(totals[a]))} ms")
    if len(assemblers) == 2:
        ratio = statistics.median(totals["nvjitlink"]) / statistics.median(totals["ptxas"])
        print(f"ratio nvJitLink / ptxas subprocess (median total): {ratio:.2f}")

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "many_functions.cu")
        src.write_text(generated_source(200))
        t0 = time.perf_counter()
        mod = ir.link([build_cuda_ir(src)], "many_functions")
        clang_seconds = time.perf_counter() - t0
        funcs = len(ir.defined_functions(mod))
        big = compile_once(mod, "many_functions", CONFIG, assemblers[-1])
        print(
            f"\n200-function kernel ({funcs} functions defined; clang build {clang_seconds:.2f} s, not counted): "
            + ", ".join(f"{k} {_ms(v).strip()} ms" for k, v in big.items())
        )
        if "nvjitlink" in assemblers:
            compare_methods(mod, "many_functions", max(5, opts.reps))

        mod = ir.link([build_cuda_ir("saxpy")], "saxpy")
        cache = ircache.BuildCache(Path(tmp, "cache"))
        misses, hits, disk_hits = [], [], []
        for i in range(opts.reps):
            config = CONFIG.replace(inlining_threshold=200 + i)  # a new variant for LLVM each time
            t0 = CLOCK()
            build.compile(mod, "saxpy", config, "sm_90", cache=cache, base_hash="saxpy")
            misses.append(CLOCK() - t0)
            t0 = CLOCK()
            build.compile(mod, "saxpy", config, "sm_90", cache=cache, base_hash="saxpy")
            hits.append(CLOCK() - t0)
            fresh = ircache.BuildCache(Path(tmp, "cache"))
            t0 = CLOCK()
            build.compile(mod, "saxpy", config, "sm_90", cache=fresh, base_hash="saxpy")
            disk_hits.append(CLOCK() - t0)
        miss, hit, disk = (statistics.median(x) for x in (misses, hits, disk_hits))
        print(
            f"\nbuild cache (saxpy): miss {_ms(miss).strip()} ms, process hit {hit * 1e6:.0f} us "
            f"({hit / miss:.2%} of a miss), disk hit {disk * 1e6:.0f} us ({disk / miss:.2%} of a miss)"
        )
        t0 = CLOCK()
        h = ir.module_hash(mod)
        print(f"hashing the input module when the caller passes no base_hash: {(CLOCK() - t0) * 1e6:.0f} us ({h[:8]})")
        ptxas_sweep(("saxpy", "stencil2d", "math_funcs"))


def ptxas_sweep(kernels: tuple[str, ...]) -> None:
    """Every combination of the ptxas knobs' search values (what the `compiler` space adds per LLVM
    variant), built in one step each (no cache) against two steps (the PTX from the build cache)."""
    configs = [
        CONFIG.replace(ptxas_opt=o, max_registers=r, cache_mode=c)
        for o in range(4)
        for r in (0, 32, 64, 128, 255)
        for c in ("", "ca", "cg")
    ]
    print(f"\nptxas knobs, {len(configs)} configurations of one LLVM variant (wall s for all; each the first build):")
    ratios = []
    for kernel in kernels:
        item = next(i for i in corpus() if kernel in i.kernels)
        mod = ir.link([build_cuda_ir(item.source)], kernel)
        t0 = time.perf_counter()
        one = [build.compile(mod, kernel, c, "sm_90", cache=False) for c in configs]
        one_step = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            cache = ircache.BuildCache(Path(tmp), disk=False)
            t0 = time.perf_counter()
            two = [build.compile(mod, kernel, c, "sm_90", cache=cache) for c in configs]
            two_step = time.perf_counter() - t0
        same = sum(a.data == b.data for a, b in zip(one, two))
        ratios.append(one_step / two_step)
        print(
            f"  {kernel[:22]:22s} one step {one_step:6.2f} s, PTX shared {two_step:6.2f} s: {ratios[-1]:.2f}x; "
            f"cubins identical {same}/{len(configs)}"
        )
    print(f"  median speedup of the sweep's builds: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
