"""Per-kernel preprocessing of a large module (one link per recording) and a small kernel's compile.

A generated CUDA source of our own with N kernels (default 216) sharing a device helper is built
by clang-19 into one module, as a `mneme-cc` translation unit or a recording of many kernels
would carry it. For every kernel: `ir.link` of the module's file (what a recording's
`link_llvm_modules` does) + `pipeline.preprocess`; the first link reads and links the file, the
others prune a copy of the linked module (`ir.link`'s process cache). Then the median uncached
compile of a small kernel (saxpy, sm_90 cubin through the default assembler), process start-up
excluded. Prints a Markdown table; `--no-link-cache` measures the uncached link for comparison.
Run: python benchmarks/bench_many_kernels.py [--kernels N] [--reps N] [--no-link-cache]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from irbuild import CLANG, STUBS_DIR, build_cuda_ir, cuda_path

from mneme.core import build, ir, pipeline
from mneme.core.types import ExperimentConfiguration

CONFIG = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))


def generate(n: int) -> str:
    """CUDA source: n kernels, each calling a shared device helper with its own constants."""
    out = [
        "__device__ float helper(float x, int k) { float s = 0; for (int j = 0; j < k; ++j) s += __sinf(x + j) * x; return s; }"
    ]
    for i in range(n):
        out.append(
            f'extern "C" __global__ void k{i}(const float* in, float* out, int n) {{\n'
            f"  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (t < n) {{ float v = in[t] * {i + 1}.0f; if (v > {i}) v = helper(v, {i % 7 + 1}); out[t] = v + {i % 13}; }}\n}}"
        )
    return "\n".join(out) + "\n"


def build_module(n: int, folder: Path) -> Path:
    src, out = folder / "many.cu", folder / "many.ll"
    src.write_text(generate(n))
    cuda = cuda_path()
    subprocess.run(
        [
            CLANG,
            "-x",
            "cuda",
            "--cuda-device-only",
            "--cuda-gpu-arch=sm_90",
            f"--cuda-path={cuda}",
            "-Wno-unknown-cuda-version",
            "-isystem",
            str(STUBS_DIR),
            "-isystem",
            str(cuda / "include" / "cccl"),
            "-O3",
            "-Xclang",
            "-disable-llvm-optzns",
            "-emit-llvm",
            "-S",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out


def per_kernel_preprocess(path: Path, n: int) -> tuple[float, list[float]]:
    """(first kernel's seconds, the other kernels' seconds): link + preprocess each kernel."""
    times = []
    for i in range(n):
        start = time.perf_counter()
        module = ir.link([str(path)], f"k{i}")
        pre = pipeline.preprocess(module, f"k{i}", CONFIG, None, None)
        times.append(time.perf_counter() - start)
        pre.module.close()
        module.close()
    return times[0], times[1:]


def small_compile(reps: int) -> tuple[list[float], dict[str, float]]:
    """Seconds of each uncached compile of saxpy, and the median seconds of each stage."""
    module = ir.load(build_cuda_ir("saxpy"))
    build.compile(module, "saxpy", CONFIG, "sm_90", cache=False)  # warm: target machines, nvJitLink loaded
    times, stages = [], {}
    for _ in range(reps):
        start = time.perf_counter()
        binary = build.compile(module, "saxpy", CONFIG, "sm_90", cache=False)
        times.append(time.perf_counter() - start)
        for stage, seconds in binary.stage_times.items():
            stages.setdefault(stage, []).append(seconds)
    return times, {stage: statistics.median(v) for stage, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=216)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--no-link-cache", action="store_true")
    args = parser.parse_args()
    if args.no_link_cache:
        os.environ["MNEME_LINK_CACHE"] = "0"
    with tempfile.TemporaryDirectory(prefix="mneme-many-") as tmp:
        path = build_module(args.kernels, Path(tmp))
        size = path.stat().st_size
        first, rest = per_kernel_preprocess(path, args.kernels)
    small, stages = small_compile(args.reps)
    from mneme_cuda import codegen

    print(f"| measure | value |\n| --- | --- |")
    print(f"| module | {args.kernels} kernels, {size} bytes of IR text |")
    print(f"| link cache | {'off' if args.no_link_cache else 'on'} |")
    print(f"| first kernel: read + link + prune + preprocess | {first * 1e3:.1f} ms |")
    print(
        f"| other kernels: link + prune + preprocess, median (p90) | {statistics.median(rest) * 1e3:.1f} ms "
        f"({sorted(rest)[int(len(rest) * 0.9)] * 1e3:.1f} ms) |"
    )
    print(
        f"| small kernel (saxpy) compile to sm_90 cubin, median of {args.reps} | {statistics.median(small) * 1e3:.1f} ms "
        f"({codegen.ptx_assembler()}) |"
    )
    split = " / ".join(f"{stage} {seconds * 1e3:.1f}" for stage, seconds in stages.items())
    print(f"| its stages, median ms | {split} |")


if __name__ == "__main__":
    main()
