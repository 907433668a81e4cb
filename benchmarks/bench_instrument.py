#!/usr/bin/env python3
"""Build-time cost of `mneme-cc`: the same nvcc compile with and without the launcher.

Compiles one CUDA translation unit `--repeats` times each way (alternating, so machine load
hits both alike) and prints the median wall and CPU times, their ratio, the added seconds per
translation unit, and the size the `.mneme_ir` section adds to the object. Also times a host
C++ compile through the launcher (pass-through cost). Usage:

    python benchmarks/bench_instrument.py [--repeats 5] [--arch sm_90]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mneme.core.elf import ElfFile
from mneme.instrument.section import SECTION_NAME

KERNELS = r"""
#include <cuda_runtime.h>
template <typename T, int N>
__global__ void stencil(const T* __restrict__ in, T* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N && i < n - N) {
    T acc = 0;
#pragma unroll
    for (int k = -N; k <= N; ++k) acc += in[i + k] * T(1.0 / (2 * N + 1));
    out[i] = acc;
  }
}
template __global__ void stencil<float, 1>(const float*, float*, int);
template __global__ void stencil<float, 4>(const float*, float*, int);
template __global__ void stencil<double, 4>(const double*, double*, int);
__global__ void vecadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() { return 0; }
"""
HOST = "#include <vector>\nint sum(const std::vector<int>& v) { int s = 0; for (int x : v) s += x; return s; }\n"
LAUNCHER = [sys.executable, "-m", "mneme.instrument.launcher"]


def timed(argv, cwd) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and all its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def report(label: str, plain: list, launched: list) -> None:
    for what, i in (("wall", 0), ("CPU", 1)):
        p, m = statistics.median(t[i] for t in plain), statistics.median(t[i] for t in launched)
        print(f"{label} {what}: plain {p:.2f} s, through mneme-cc {m:.2f} s; ratio {m / p:.2f}, +{m - p:.2f} s per TU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    if not shutil.which("nvcc"):
        sys.exit("needs nvcc on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "k.cu").write_text(KERNELS)
        (d / "h.cpp").write_text(HOST)
        nvcc = ["nvcc", "-c", "k.cu", f"-arch={args.arch}", "-O3"]
        gpp = ["g++", "-O2", "-c", "h.cpp"]
        plain, launched, host_plain, host_launched = [], [], [], []
        for _ in range(args.repeats):
            plain.append(timed([*nvcc, "-o", "plain.o"], d))
            launched.append(timed([*LAUNCHER, *nvcc, "-o", "launched.o"], d))
            host_plain.append(timed([*gpp, "-o", "hp.o"], d))
            host_launched.append(timed([*LAUNCHER, *gpp, "-o", "hl.o"], d))
        elf = ElfFile.read(d / "launched.o")
        section = sum(s.size for s in elf.sections_named(SECTION_NAME))
        size_plain = (d / "plain.o").stat().st_size
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times suffer from load, CPU less)")
    report(f"nvcc -c (CUDA TU, {args.arch})", plain, launched)
    report("g++ -c (host TU, pass-through)", host_plain, host_launched)
    print(f"object size: {size_plain} bytes, + {section} bytes of {SECTION_NAME} ({section / size_plain:.2f}x)")


if __name__ == "__main__":
    main()
