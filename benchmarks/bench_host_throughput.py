"""Host-backend throughput against a plain C loop doing the same work on the same cores (issue 40, item 4).

Three memory-bound kernels (saxpy, a 3-point stencil, a sum reduction), each in three launch shapes:
one element per thread (blocks of 256), a grid-stride loop over 64 blocks of 256 threads (what the
examples launch), and 2D tiles of 16x16 threads over rows of 1024. Sizes from 2^16 to 2^22 floats.
The C loop is `cc -O3 -march=native -fopenmp`, the better of one thread and one per online CPU (the
host runtime runs blocks on one worker per online CPU). Figures: best of --repeat launches, effective bandwidth (bytes the kernel must move
once), and host / C bandwidth (target: at least 0.5, whatever the shape), with the same kernel built
thread after thread (``MNEME_HOST_LANES=0 MNEME_HOST_GRID_STRIDE=0 MNEME_HOST_BLOCK_STEPS=0``) beside it. Writes benchmarks/results/host-throughput.md.
Run: python benchmarks/bench_host_throughput.py [--sizes 16,18,20,22] [--repeat 5] [--budget 1.0] [--kernels K,..]
[--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from irbuild import build_cuda_ir

from mneme.core.backend import get_backend
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import backend as host_backend
from mneme.plugins.backends.host import block_steps, grid_stride, lanes, machine, retarget

BASE = 0x2E0000000000
ROW = 1024  # the 2D shape's row length
Y_OFFSET = 1 << 28  # bytes from x to y, for the kernel and the C loop alike

KERNELS = r"""
extern "C" __global__ void saxpy_each(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void saxpy_stride(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void saxpy_tile(int n, float a, const float* x, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stencil_each(int n, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
extern "C" __global__ void stencil_stride(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
extern "C" __global__ void stencil_tile(int n, const float* x, float* y) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
// Sums: each thread adds its elements, the block adds its threads' sums in shared memory, one atomic per block.
__device__ void block_sum(float v, float* out) {
  __shared__ float s[256];
  int t = threadIdx.y * blockDim.x + threadIdx.x, size = blockDim.x * blockDim.y;
  s[t] = v;
  __syncthreads();
  for (int k = size / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}
extern "C" __global__ void sum_each(int n, const float* x, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  block_sum(i < n ? x[i] : 0.0f, out);
}
extern "C" __global__ void sum_stride(int n, const float* x, float* out) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  block_sum(v, out);
}
extern "C" __global__ void sum_tile(int n, const float* x, float* out) {
  int i = (blockIdx.y * blockDim.y + threadIdx.y) * 1024 + blockIdx.x * blockDim.x + threadIdx.x;
  block_sum(i < n ? x[i] : 0.0f, out);
}
"""

C_LOOPS = r"""
#include <omp.h>
void saxpy(int n, float a, const float* x, float* y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
void stencil(int n, const float* x, float* y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int i = 1; i < n - 1; i++) y[i] = (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
float sum(int n, const float* x, int threads) {
  float total = 0.0f;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : total)
  for (int i = 0; i < n; i++) total += x[i];
  return total;
}
"""
# Bytes each kernel must move once per element: saxpy reads x and y and writes y; the stencil reads x
# and writes y; the sum reads x.
BYTES = {"saxpy": 12, "stencil": 8, "sum": 4}


def shapes(n: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {"each": ((n // 256,), (256,)), "stride": ((64,), (256,)), "tile": ((ROW // 16, n // ROW // 16), (16, 16))}


def c_library(folder: Path) -> ctypes.CDLL:
    src, lib = folder / "loops.c", folder / "loops.so"
    src.write_text(C_LOOPS)
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    loops = ctypes.CDLL(str(lib))
    loops.sum.restype = ctypes.c_float
    return loops


def _form(module_text: str, kernel: str) -> str:
    """How the host backend runs `kernel`: in lockstep groups, as one thread loop, or as step functions."""
    import llvmlite.binding as llvm

    tm = machine.pipeline_machine(3)
    pruned, _ = host_backend.pruned_and_checked(llvm.parse_assembly(module_text), kernel, tm)
    host = retarget.retarget(pruned, kernel, llvm.get_process_triple(), str(tm.target_data))
    if not host.flags & retarget.FLAG_BLOCK_LOOP:
        if host.flags & retarget.FLAG_FIBERS and block_steps.to_block_steps(
            host.text, kernel, host.params, host.static_shared
        ):
            return "block steps, lanes" if block_steps.lanes_enabled() else "block steps"
        return "steps" if host.flags & retarget.FLAG_FIBERS else "thread"
    runs = bool(host.flags & retarget.FLAG_BLOCK_RUNS)
    if grid_stride.to_flat(host.text, kernel, host.params, runs):
        return "flat" + (", runs" if runs else "")
    form = "lockstep" if lanes.to_lanes(host.text, kernel, host.params, lanes.width(), runs) else "thread loop"
    return form + (", runs" if runs else "")


def best(fn, repeat: int, budget: float) -> float:
    """The fastest of at least `repeat` runs, more while `budget` seconds last (at most 200)."""
    fn()
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < repeat or (time.perf_counter() < end and len(times) < 200):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_launch(dev, kernel, grid, block, args: bytes, repeat: int, budget: float) -> float:
    """`best` for a loaded kernel, as its device times it."""
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < repeat or (time.perf_counter() < end and len(times) < 200):
        times += dev.time(kernel, grid, block, 0, args, repeat)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,18,20,22", help="log2 of the element counts")
    parser.add_argument("--repeat", type=int, default=5, help="runs at least, of which the fastest counts")
    parser.add_argument(
        "--budget",
        type=float,
        default=1.0,
        help="seconds of more runs per figure (a loaded machine: the fastest run is the one least "
        "interrupted; a long kernel needs as many tries as a short one)",
    )
    parser.add_argument("--kernels", default="", help="comma-separated kernels (e.g. saxpy_stride); all by default")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "host-throughput.md")
    opts = parser.parse_args()
    import llvmlite.binding as llvm

    sizes = [1 << int(s) for s in opts.sizes.split(",")]
    load_before = os.getloadavg()
    top = max(sizes)
    backend = get_backend("host")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mneme-throughput-") as scratch:
        source = Path(scratch, "throughput.cu")
        source.write_text(KERNELS)
        module_text = build_cuda_ir(source, opt="-O3").read_text()
        loops = c_library(Path(scratch))
        rng = np.random.default_rng(0)
        x, y = rng.random(top, dtype=np.float32), rng.random(top, dtype=np.float32)
        # The C loop's arrays as far apart as the kernel's (Y_OFFSET): arrays a power of two apart share
        # cache sets and 4 KiB aliases, which costs both sides alike (1.5-1.7x at 2^20); different layouts
        # would compare the layouts. Pages the loop does not touch are never mapped in.
        block = np.empty((Y_OFFSET + top * 4 + 4096) // 4, dtype=np.float32)
        start = (-block.ctypes.data % 4096) // 4  # page-aligned, as the device's buffers
        cx, cy = block[start : start + top], block[start + Y_OFFSET // 4 : start + Y_OFFSET // 4 + top]
        cx[:], cy[:] = x, y
        xp, yp = cx.ctypes.data_as(ctypes.c_void_p), cy.ctypes.data_as(ctypes.c_void_p)
        with backend.open_device() as dev:
            dev.reserve(BASE, 1 << 32)
            ax, ay, aout = BASE, BASE + Y_OFFSET, BASE + (2 << 28)
            for addr, data in ((ax, x), (ay, y), (aout, np.zeros(16, np.float32))):
                dev.map(addr, data.nbytes)
                dev.write(addr, data.tobytes())
            loaded, single, whole, folded, nested, forms = {}, {}, {}, {}, {}, {}
            for name in ("saxpy", "stencil", "sum"):
                for shape in ("each", "stride", "tile"):
                    kernel = f"{name}_{shape}"
                    if opts.kernels and kernel not in opts.kernels.split(","):
                        continue
                    config = ExperimentConfiguration(grid=64, block=256)
                    loaded[kernel] = dev.load(
                        backend.compile(llvm.parse_assembly(module_text), kernel, config, backend.arch())
                    )
                    forms[kernel] = _form(module_text, kernel)
                    # the same kernel thread after thread (the form before issue 40's lockstep groups), side by side
                    os.environ[lanes.ENV] = os.environ[grid_stride.ENV] = os.environ[block_steps.ENV] = "0"
                    try:
                        single[kernel] = dev.load(
                            backend.compile(llvm.parse_assembly(module_text), kernel, config, backend.arch())
                        )
                    finally:
                        del os.environ[lanes.ENV], os.environ[grid_stride.ENV], os.environ[block_steps.ENV]
                    if forms[kernel].startswith("block steps"):  # and the block step form before its lanes layout
                        os.environ[block_steps.LANES_ENV] = "0"
                        try:
                            whole[kernel] = dev.load(
                                backend.compile(llvm.parse_assembly(module_text), kernel, config, backend.arch())
                            )
                        finally:
                            del os.environ[block_steps.LANES_ENV]
                        os.environ[block_steps.UNIFORM_ENV] = "0"  # and without the divergence analysis
                        try:
                            folded[kernel] = dev.load(
                                backend.compile(llvm.parse_assembly(module_text), kernel, config, backend.arch())
                            )
                        finally:
                            del os.environ[block_steps.UNIFORM_ENV]
                        os.environ[block_steps.FLAT_ENV] = "0"  # and without the copies over a plane's linear index
                        try:
                            nested[kernel] = dev.load(
                                backend.compile(llvm.parse_assembly(module_text), kernel, config, backend.arch())
                            )
                        finally:
                            del os.environ[block_steps.FLAT_ENV]
            threads = sorted({1, os.cpu_count() or 1})
            for n in sizes:
                c_runs = {
                    "saxpy": lambda t, n=n: loops.saxpy(n, ctypes.c_float(2.0), xp, yp, t),
                    "stencil": lambda t, n=n: loops.stencil(n, xp, yp, t),
                    "sum": lambda t, n=n: loops.sum(n, xp, t),
                }
                for name, args in (
                    ("saxpy", struct.pack("<ifQQ", n, 2.0, ax, ay)),
                    ("stencil", struct.pack("<i4xQQ", n, ax, ay)),
                    ("sum", struct.pack("<i4xQQ", n, ax, aout)),
                ):
                    for shape, (grid, block) in shapes(n).items():
                        kernel = f"{name}_{shape}"
                        if kernel not in loaded:
                            continue
                        # interleaved: the C loop just before and just after the kernel (the better of 1 thread and
                        # one per CPU, its best on these cores), so a shared machine's load hits both alike
                        c_loop = c_runs[name]
                        c_before = min(best(functools.partial(c_loop, t), opts.repeat, opts.budget) for t in threads)
                        dev.launch(loaded[kernel], grid, block, 0, args)
                        host = best_launch(dev, loaded[kernel], grid, block, args, opts.repeat, opts.budget)
                        dev.launch(single[kernel], grid, block, 0, args)
                        old = best_launch(dev, single[kernel], grid, block, args, opts.repeat, opts.budget)
                        frames = fold = nest = None
                        if kernel in whole:
                            dev.launch(whole[kernel], grid, block, 0, args)
                            frames = best_launch(dev, whole[kernel], grid, block, args, opts.repeat, opts.budget)
                            dev.launch(folded[kernel], grid, block, 0, args)
                            fold = best_launch(dev, folded[kernel], grid, block, args, opts.repeat, opts.budget)
                            dev.launch(nested[kernel], grid, block, 0, args)
                            nest = best_launch(dev, nested[kernel], grid, block, args, opts.repeat, opts.budget)
                        c_time = min(
                            c_before, min(best(functools.partial(c_loop, t), opts.repeat, opts.budget) for t in threads)
                        )
                        gbs = BYTES[name] * n / host / 1e9
                        c_gbs = BYTES[name] * n / c_time / 1e9
                        rows.append((name, shape, n, forms[kernel], host, old, frames, fold, nest, c_time, gbs, c_gbs))
                        print(
                            f"{name:8} {shape:7} 2^{n.bit_length() - 1:<3} {forms[kernel]:11} host {host * 1e3:9.3f} ms "
                            f"(thread after thread {old * 1e3:9.3f}"
                            + (f", whole frames {frames * 1e3:9.3f}" if frames is not None else "")
                            + (f", folded {fold * 1e3:9.3f}" if fold is not None else "")
                            + (f", nested {nest * 1e3:9.3f}" if nest is not None else "")
                            + f")  C {c_time * 1e3:8.3f} ms  {gbs:7.2f} / {c_gbs:7.2f} GB/s"
                            f"  ratio {gbs / c_gbs:5.2f}",
                            flush=True,
                        )
        load_after = os.getloadavg()
    lines = [
        "# Host-backend throughput against a plain C loop",
        "",
        (
            f"Machine: {platform.node()} ({llvm.get_host_cpu_name()}), {os.cpu_count()} CPUs; C: `cc -O3 "
            "-march=native -fopenmp`, the better of 1 thread and 1 per CPU, measured just before and just after each "
            f"kernel (the better of the two). Each figure the fastest of at least {opts.repeat} runs and more for "
            f"{opts.budget:g} s (at most 200). Load average (1 min) {load_before[0]:.1f} at the start, "
            f"{load_after[0]:.1f} at the end: other sessions share the CPUs, so every figure is noisy; the ratio "
            "compares neighbours in time. The C loop's arrays lie as far apart as the kernel's (2^28 bytes: the same "
            "cache sets and 4 KiB aliases on both sides). Shapes: `each` one element per thread (blocks of 256), "
            "`stride` a grid-stride loop over 64 blocks of 256, `tile` 16x16 blocks over rows of 1024. Form: `flat` "
            "the grid-stride loop run as one loop over the index space (grid_stride.py), `lockstep` threads in "
            f"groups of {lanes.width()} (lanes.py), `thread loop` thread after thread in one vectorized loop, `block "
            "steps` barriers as passes over a block's threads in one call (block_steps.py), `steps` barriers as step "
            "functions the runtime calls thread by thread (steps.py); `runs`: one call runs the claimed blocks along "
            "x, a row of threads of each in turn (retarget.FLAG_BLOCK_RUNS). `thread after thread` is the same "
            "kernel built with `MNEME_HOST_LANES=0 MNEME_HOST_GRID_STRIDE=0 MNEME_HOST_BLOCK_STEPS=0`: thread after "
            "thread, or the runtime's step form for the sums; `whole frames` the block step form without its lanes "
            "layout (`MNEME_HOST_BLOCK_LANES=0`: the form before it); `folded` the block step form without its "
            "divergence analysis (`MNEME_HOST_BLOCK_UNIFORM=0`); `nested` the block step form without its loops over "
            "a plane's linear index (`MNEME_HOST_BLOCK_FLAT=0`: rows of 16 one loop each, the sums' form before it). "
            "`block steps, lanes`: frames one "
            "array per field, values recomputed after barriers, pauses before atomic tails, yields at loop headers, "
            "pass-start values alike in every thread read once, fields proved alike in every thread kept once per "
            "block, no fold of the resume points where thread 0's stop is every thread's, passes that address the "
            "kernel's buffers run in chunks of 16 threads of a row (docs/design/internals.md)."
        ),
        "",
        (
            "| kernel | shape | elements | form | host ms | thread after thread ms | whole frames ms | folded ms "
            "| nested ms | C ms | host GB/s | C GB/s | host / C |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {k} | {s} | 2^{n.bit_length() - 1} | {f} | {h * 1e3:.3f} | {o * 1e3:.3f} | "
            f"{'-' if w is None else f'{w * 1e3:.3f}'} | {'-' if u is None else f'{u * 1e3:.3f}'} | "
            f"{'-' if r is None else f'{r * 1e3:.3f}'} | {c * 1e3:.3f} | {g:.2f} | {cg:.2f} | {g / cg:.2f} |"
            for k, s, n, f, h, o, w, u, r, c, g, cg in rows
        ),
        "",
    ]
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
