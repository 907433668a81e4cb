"""Host-backend throughput against a plain C loop doing the same work on the same cores (issue 40, item 4).

Three memory-bound kernels (saxpy, a 3-point stencil, a sum reduction), each in three launch shapes:
one element per thread (blocks of 256), a grid-stride loop over 64 blocks of 256 threads (what the
examples launch), and 2D tiles of 16x16 threads over rows of 1024. Sizes from 2^16 to 2^22 floats.
The C loop is `cc -O3 -march=native -fopenmp` on as many threads as the host backend's workers, in two
processes of its own: one whose OpenMP threads sleep while they wait, one whose threads spin first. On a
shared machine the three are timed in alternating short batches and compared pair by pair (paired.py), with
each side's CPU time and run-queue wait beside the wall time, so a reader can tell contention from code.
Figures: host / C bandwidth (target: at least 0.5, whatever the shape) as the median over pairs with its
quartiles, against the sleeping C loop and against the faster of the two at each size, the same for CPU
time, and the same kernel's earlier forms beside it. Writes (and keeps the hand
notes of) benchmarks/results/host-throughput.md.
Run: python benchmarks/bench_host_throughput.py [--sizes 16,18,20,22] [--budget 1.0] [--pairs 7] [--batch 0.02]
[--repeat 5] [--no-variants] [--kernels K,..] [--out FILE]
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
from dataclasses import dataclass
from pathlib import Path

# NumPy's BLAS threads would wait in the C loop's process (this file, `--serve-c`), whose CPU clock is its CPU time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import paired
from irbuild import build_cuda_ir

from mneme.core.backend import get_backend
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import backend as host_backend
from mneme.plugins.backends.host import block_steps, grid_stride, lanes, machine, retarget, sandbox

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
#include <time.h>
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
static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* `runs` calls of one loop back to back, each timed here (no Python between them, as the host runtime
   times its launches inside the sandbox): kind 0 saxpy, 1 stencil, 2 sum */
void timed_runs(int kind, int n, float a, const float* x, float* y, int threads, int runs, double* out) {
  volatile float sink = 0.0f;
  for (int r = 0; r < runs; r++) {
    double start = seconds();
    if (kind == 0) saxpy(n, a, x, y, threads);
    else if (kind == 1) stencil(n, x, y, threads);
    else sink += sum(n, x, threads);
    out[r] = seconds() - start;
  }
}
"""
# Bytes each kernel must move once per element: saxpy reads x and y and writes y; the stencil reads x
# and writes y; the sum reads x.
BYTES = {"saxpy": 12, "stencil": 8, "sum": 4}
KINDS = {"saxpy": 0, "stencil": 1, "sum": 2}  # timed_runs's kind


def _worker_pid(kernel) -> int:
    """The process whose threads run `kernel`'s blocks: its sandbox, or this one with MNEME_HOST_SANDBOX=0."""
    return kernel.sandbox.pid if kernel.sandbox is not None and kernel.sandbox.pid else os.getpid()


@dataclass
class Row:
    """One kernel at one size: the host / C pairs (the C loop sleeping and spinning while it waits), the variant
    forms' best times, the load when measured."""

    name: str
    shape: str
    n: int
    form: str
    pairs: paired.Pairs  # against the C loop whose threads sleep while they wait (`C_POLICIES`)
    spin: paired.Pairs  # against the C loop whose threads spin first
    variants: list  # seconds or None: thread after thread, whole frames, folded, nested
    load: float
    compile_s: float  # CPU seconds to compile the kernel as built

    def figures(self) -> dict:
        pairs = self.pairs
        host, c = pairs.median("a", "wall"), pairs.median("b", "wall")
        ratio, q1, q3 = paired.Pairs.spread(pairs.ratios("wall"))
        cpu_ratio, cpu_q1, cpu_q3 = paired.Pairs.spread(pairs.ratios("cpu"))
        c_spin = self.spin.median("b", "wall")
        best = "spin" if c_spin < c else "passive"  # the C loop's wait policy that ran it faster, at this size
        return {
            "host": host,
            "c": c,
            "c_spin": c_spin,
            "best": best,
            "best_ratio": paired.Pairs.spread((self.spin if best == "spin" else pairs).ratios("wall")),
            "gbs": BYTES[self.name] * self.n / host / 1e9,
            "c_gbs": BYTES[self.name] * self.n / c / 1e9,
            "ratio": (ratio, q1, q3),
            "host_cpu": pairs.median("a", "cpu"),
            "c_cpu": pairs.median("b", "cpu"),
            "cpu_ratio": (cpu_ratio, cpu_q1, cpu_q3),
            "host_threads": pairs.per_thread("a"),
            "c_threads": pairs.per_thread("b"),
            "host_wait": pairs.median("a", "waited"),
            "c_wait": pairs.median("b", "waited"),
        }

    def line(self) -> str:
        f = self.figures()
        names = ("thread after thread", "whole frames", "folded", "nested")
        variants = ", ".join(f"{w} {v * 1e3:.3f}" for w, v in zip(names, self.variants) if v is not None)
        return (
            f"{self.name:8} {self.shape:7} 2^{self.n.bit_length() - 1:<3} {self.form:18} host {f['host'] * 1e3:8.3f} ms"
            f"  C {f['c'] * 1e3:8.3f} ms  host / C {f['ratio'][0]:5.2f} ({f['ratio'][1]:.2f}-{f['ratio'][2]:.2f}, "
            f"{len(self.pairs.a)} pairs)  C spin {f['c_spin'] * 1e3:8.3f} ms  host / best C {f['best_ratio'][0]:5.2f} "
            f"({f['best']})  CPU {f['cpu_ratio'][0]:5.2f}  host CPU {_threads(f['host_threads'])} ms"
            f"  C CPU {_threads(f['c_threads'])} ms  waited {f['host_wait'] * 1e3:.3f} / {f['c_wait'] * 1e3:.3f} ms"
            f"  load {self.load:.1f}" + (f"  ({variants})" if variants else "")
        )

    def cells(self) -> list[str]:
        f = self.figures()
        ms = ["-" if v is None else f"{v * 1e3:.3f}" for v in self.variants]
        return [
            self.name,
            self.shape,
            f"2^{self.n.bit_length() - 1}",
            self.form,
            f"{f['host'] * 1e3:.3f}",
            *ms,
            f"{f['c'] * 1e3:.3f}",
            f"{f['c_spin'] * 1e3:.3f}",
            f"{f['gbs']:.2f}",
            f"{f['c_gbs']:.2f}",
            f"{f['ratio'][0]:.2f}",
            f"{f['ratio'][1]:.2f}-{f['ratio'][2]:.2f}",
            f"{f['best_ratio'][0]:.2f}",
            f"{f['best_ratio'][1]:.2f}-{f['best_ratio'][2]:.2f}",
            f["best"],
            f"{f['cpu_ratio'][0]:.2f}",
            f"{f['cpu_ratio'][1]:.2f}-{f['cpu_ratio'][2]:.2f}",
            _threads(f["host_threads"]),
            _threads(f["c_threads"]),
            f"{f['host_wait'] * 1e3:.3f} / {f['c_wait'] * 1e3:.3f}",
            str(len(self.pairs.a)),
            f"{self.load:.1f}",
            f"{self.compile_s:.2f}",
        ]


def _threads(seconds: list[float]) -> str:
    """CPU milliseconds per run, thread by thread: `0.31+0.29`."""
    return "+".join(f"{s * 1e3:.3f}" for s in seconds) or "0"


def shapes(n: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {"each": ((n // 256,), (256,)), "stride": ((64,), (256,)), "tile": ((ROW // 16, n // ROW // 16), (16, 16))}


def c_library(folder: Path) -> Path:
    """The C loops built as a shared library in `folder`."""
    src, lib = folder / "loops.c", folder / "loops.so"
    src.write_text(C_LOOPS)
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


# libgomp reads its wait policy once, when it loads: each policy is a process of its own. `passive`: waiting threads
# sleep (for the next call, or at the loop's end for a thread that has no CPU yet), as the host's workers do. `spin`:
# libgomp's default, a thread spins 300000 times before it sleeps (or what OMP_WAIT_POLICY / GOMP_SPINCOUNT in the
# environment say). On a machine shared with other sessions a spinning thread holds the CPU the thread it waits for
# needs (saxpy over 2^16 floats: 0.015 ms a call sleeping, 8 ms spinning), and its spinning counts as the C loop's
# CPU time; where the C loop keeps both CPUs, spinning saves the wake-ups (the sum over 2^20 floats: 0.87 ms
# sleeping, 0.43 ms spinning). The benchmark times both and compares the host with each and with the better one.
C_POLICIES = {"passive": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None}, "spin": {}}


def inputs(top: int) -> tuple[np.ndarray, np.ndarray]:
    """x and y, the same on both sides."""
    rng = np.random.default_rng(0)
    return rng.random(top, dtype=np.float32), rng.random(top, dtype=np.float32)


def c_arrays(top: int):
    """The C loop's x and y (this benchmark's data) as far apart as the kernel's (Y_OFFSET): arrays a power of two
    apart share cache sets and 4 KiB aliases, which costs both sides alike (1.5-1.7x at 2^20); different layouts
    would compare the layouts. Pages the loop does not touch are never mapped in. Returns (the block that owns
    them, x, y)."""
    x, y = inputs(top)
    block = np.empty((Y_OFFSET + top * 4 + 4096) // 4, dtype=np.float32)
    start = (-block.ctypes.data % 4096) // 4  # page-aligned, as the device's buffers
    cx, cy = block[start : start + top], block[start + Y_OFFSET // 4 : start + Y_OFFSET // 4 + top]
    cx[:], cy[:] = x, y
    return block, cx, cy


class CLoops:
    """The C loops in a process of their own, under one wait policy (`C_POLICIES`), on this benchmark's data."""

    def __init__(self, lib: Path, top: int, policy: str):
        env = dict(os.environ)
        for key, value in C_POLICIES[policy].items():
            env.pop(key, None)
            if value is not None:
                env[key] = value
        self.policy = policy
        self.env = {key: env[key] for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if key in env}
        command = [sys.executable, str(Path(__file__).resolve()), "--serve-c", str(lib), str(top)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def pid(self) -> int:
        return self.process.pid

    def times(self, kind: int, n: int, threads: int, runs: int) -> list[float]:
        """`runs` calls of the C loop `kind` back to back; the seconds of each."""
        self.process.stdin.write(struct.pack("<4i", kind, n, threads, runs))
        self.process.stdin.flush()
        data = self.process.stdout.read(8 * runs)
        if len(data) != 8 * runs:
            raise RuntimeError(f"the C loop process ({self.policy}) ended: exit status {self.process.poll()}")
        return list(struct.unpack(f"<{runs}d", data))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def serve_c(lib: Path, top: int) -> int:
    """The C loop process (`CLoops`): reads (kind, n, threads, runs) requests on stdin, answers each run's seconds."""
    loops = ctypes.CDLL(str(lib))
    loops.timed_runs.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_float] + [ctypes.c_void_p] * 2
    loops.timed_runs.argtypes += [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    _, cx, cy = c_arrays(top)
    xp, yp = cx.ctypes.data_as(ctypes.c_void_p), cy.ctypes.data_as(ctypes.c_void_p)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while len(request := requests.read(16)) == 16:
        kind, n, threads, runs = struct.unpack("<4i", request)
        out = (ctypes.c_double * runs)()
        loops.timed_runs(kind, n, 2.0, xp, yp, threads, runs, out)
        answers.write(bytes(out))
        answers.flush()
    return 0


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


def best_launch(dev, kernel, grid, block, args: bytes, repeat: int, budget: float) -> float:
    """The fastest of at least `repeat` launches, more while `budget` seconds last (at most 200), as the device
    times them: the variant forms' figures, beside the paired ones."""
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < repeat or (time.perf_counter() < end and len(times) < 200):
        times += dev.time(kernel, grid, block, 0, args, repeat)
    return min(times)


def main() -> int:
    if sys.argv[1:2] == ["--serve-c"]:  # the C loop process (`CLoops`)
        return serve_c(Path(sys.argv[2]), int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,18,20,22", help="log2 of the element counts")
    parser.add_argument("--repeat", type=int, default=5, help="launches at least of each variant form")
    parser.add_argument(
        "--budget",
        type=float,
        default=1.0,
        help="seconds of alternating host and C batches per figure (at least --pairs pairs), and of more "
        "launches per variant form",
    )
    parser.add_argument("--pairs", type=int, default=7, help="host / C batch pairs per figure, at least")
    parser.add_argument("--batch", type=float, default=0.02, help="seconds a batch lasts, about")
    parser.add_argument(
        "--no-variants", action="store_true", help="time only the kernel as built (not its earlier forms)"
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
        lib = c_library(Path(scratch))
        x, y = inputs(top)
        # the C loop under each wait policy, each in a process of its own (started before the host's sandbox)
        c_loops = [CLoops(lib, top, policy) for policy in C_POLICIES]
        with backend.open_device() as dev:
            dev.reserve(BASE, 1 << 32)
            ax, ay, aout = BASE, BASE + Y_OFFSET, BASE + (2 << 28)
            for addr, data in ((ax, x), (ay, y), (aout, np.zeros(16, np.float32))):
                dev.map(addr, data.nbytes)
                dev.write(addr, data.tobytes())
            loaded, single, whole, folded, nested, forms, compile_s = {}, {}, {}, {}, {}, {}, {}

            def load(kernel: str, **env: str):
                """`kernel` compiled (with `env` set while it compiles) and loaded; its compile CPU seconds."""
                os.environ.update(env)
                try:
                    start = time.process_time()
                    module = llvm.parse_assembly(module_text)
                    binary = backend.compile(module, kernel, ExperimentConfiguration(grid=64, block=256), arch)
                    return dev.load(binary), time.process_time() - start
                finally:
                    for key in env:
                        del os.environ[key]

            arch = backend.arch()
            for name in ("saxpy", "stencil", "sum"):
                for shape in ("each", "stride", "tile"):
                    kernel = f"{name}_{shape}"
                    if opts.kernels and kernel not in opts.kernels.split(","):
                        continue
                    loaded[kernel], compile_s[kernel] = load(kernel)
                    forms[kernel] = _form(module_text, kernel)
                    if opts.no_variants:
                        continue
                    # the same kernel thread after thread (the form before issue 40's lockstep groups), side by side
                    off = {lanes.ENV: "0", grid_stride.ENV: "0", block_steps.ENV: "0"}
                    single[kernel] = load(kernel, **off)[0]
                    if forms[kernel].startswith("block steps"):
                        # the block step form before its lanes layout, without the divergence analysis, without
                        # the copies over a plane's linear index
                        whole[kernel] = load(kernel, **{block_steps.LANES_ENV: "0"})[0]
                        folded[kernel] = load(kernel, **{block_steps.UNIFORM_ENV: "0"})[0]
                        nested[kernel] = load(kernel, **{block_steps.FLAT_ENV: "0"})[0]
            # the C loop on as many threads as the host runs blocks on (MNEME_HOST_THREADS, else the CPUs this
            # process may use); the sandbox is forked from this process, so both sides may use the same CPUs
            threads = sandbox.worker_threads()
            for n in sizes:
                for name, args in (
                    ("saxpy", struct.pack("<ifQQ", n, 2.0, ax, ay)),
                    ("stencil", struct.pack("<i4xQQ", n, ax, ay)),
                    ("sum", struct.pack("<i4xQQ", n, ax, aout)),
                ):
                    for shape, (grid, block) in shapes(n).items():
                        kernel = f"{name}_{shape}"
                        if kernel not in loaded:
                            continue
                        run = functools.partial(dev.time, loaded[kernel], grid, block, 0, args)
                        run(1)  # the sandbox started, its helpers parked
                        references = [(functools.partial(c.times, KINDS[name], n, threads), c.pid) for c in c_loops]
                        worker = functools.partial(_worker_pid, loaded[kernel])
                        pairs = paired.paired_with(run, worker, references, opts.budget, opts.batch, opts.pairs)
                        variants = [None] * 4
                        if not opts.no_variants:
                            for i, forms_of in enumerate((single, whole, folded, nested)):
                                if kernel in forms_of:
                                    dev.launch(forms_of[kernel], grid, block, 0, args)
                                    variants[i] = best_launch(
                                        dev, forms_of[kernel], grid, block, args, opts.repeat, opts.budget
                                    )
                        row = Row(
                            name, shape, n, forms[kernel], *pairs, variants, os.getloadavg()[0], compile_s[kernel]
                        )
                        rows.append(row)
                        print(row.line(), flush=True)
        load_after = os.getloadavg()
        spin_env = " ".join(f"{k}={v}" for k, v in c_loops[1].env.items()) or "libgomp's default: 300000 spins"
        for c in c_loops:
            c.close()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    header = [
        "kernel",
        "shape",
        "elements",
        "form",
        "host ms",
        "thread after thread ms",
        "whole frames ms",
        "folded ms",
        "nested ms",
        "C ms",
        "C spin ms",
        "host GB/s",
        "C GB/s",
        "host / C",
        "host / C q1-q3",
        "host / best C",
        "host / best C q1-q3",
        "best C",
        "CPU host / C",
        "CPU host / C q1-q3",
        "host CPU ms a launch, per thread",
        "C CPU ms a run, per thread",
        "waited host / C ms",
        "pairs",
        "load",
        "compile s",
    ]
    lines = [
        "# Host-backend throughput against a plain C loop",
        "",
        (
            f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {commit.stdout.strip() or '?'}: "
            f"`{' '.join(['python benchmarks/bench_host_throughput.py', *sys.argv[1:]])}`"
        ),
        "",
        (
            f"Machine: {platform.node()} ({llvm.get_host_cpu_name()}), {os.cpu_count()} CPUs, load average (1 min) "
            f"{load_before[0]:.1f} at the start and {load_after[0]:.1f} at the end (column `load`: when the row was "
            f"measured). C: `cc -O3 -march=native -fopenmp` on {threads} OpenMP threads, as many as the host backend's "
            "workers (`MNEME_HOST_THREADS`, else the CPUs this process may use; both sides unpinned on the same "
            "CPUs), in two processes of its own: one with `OMP_WAIT_POLICY=passive` (`C ms`: waiting threads sleep, "
            f"as the host's workers do), one spinning before it sleeps (`C spin ms`: {spin_env}; a spinning thread "
            "holds the CPU the thread it waits for needs, on a shared machine, but saves the wake-ups where the C loop "
            "keeps both CPUs). Method: the host kernel and the two C loops run in alternating batches (host, "
            f"C, C spin, host, ...) of about {opts.batch * 1e3:g} ms each, for {opts.budget:g} s and at least "
            f"{opts.pairs} rounds, each batch starting once the threads of the process that ran the one before it have "
            "stopped (a spinning C loop's threads spin on for milliseconds after their last run; `paired.settle`); "
            "a batch's time is the median of its runs (the host's as its runtime times a launch "
            "in the sandbox, the C loop's timed in C around each call); `host ms` and `C ms` are the medians of the "
            "batches, `host / C` the median over pairs (a host batch and the C batch after it) of C time / host time "
            "(the host's share of the C loop's bandwidth; target at least 0.5) with its quartiles; `host / best C` the "
            "same against the policy (`best C`) whose median C time is the lower at that size. Each batch also reads "
            "the CPU clock of the sandbox process (the host) or of the C loop's process, and each of its threads' run "
            "and run-queue wait times (`/proc/PID/task/*/schedstat`, per thread an approximation): `CPU host / C` is "
            "the same median over pairs of C CPU time / host CPU time a run, against the sleeping C loop (the host's "
            "includes the sandbox's few microseconds of "
            "request handling a launch), `host CPU` and `C CPU` the CPU milliseconds a run per thread (threads "
            "with at least 2% of it), `waited` the milliseconds a run the threads were runnable but held off a CPU. "
            "Where the wall ratio is well below the CPU ratio, "
            "the host's workers waited for a CPU (contention); where the CPU ratio is low too, the code is slow. "
            "The variant columns (same kernel, earlier forms) are the fastest of at least "
            f"{opts.repeat} launches and more for {opts.budget:g} s, unpaired. `compile s`: CPU seconds to compile "
            "the kernel as built. Figures in GB/s: bytes the kernel must move once. The C loop's arrays lie as far "
            "apart as the kernel's (2^28 bytes: the same cache sets and 4 KiB aliases on both sides). Shapes: `each` "
            "one element per thread (blocks of 256), `stride` a grid-stride loop over 64 blocks of 256, `tile` "
            "16x16 blocks over rows of 1024. Form: `flat` the grid-stride loop run as one loop over the index space "
            f"(grid_stride.py), `lockstep` threads in groups of {lanes.width()} (lanes.py), `thread loop` thread "
            "after thread in one vectorized loop, `block steps` barriers as passes over a block's threads in one "
            "call (block_steps.py), `steps` barriers as step functions the runtime calls thread by thread "
            "(steps.py); `runs`: one call runs the claimed blocks along x, a row of threads of each in turn "
            "(retarget.FLAG_BLOCK_RUNS). `thread after thread` is the same kernel built with `MNEME_HOST_LANES=0 "
            "MNEME_HOST_GRID_STRIDE=0 MNEME_HOST_BLOCK_STEPS=0`: thread after thread, or the runtime's step form "
            "for the sums; `whole frames` the block step form without its lanes layout (`MNEME_HOST_BLOCK_LANES=0`); "
            "`folded` without its divergence analysis (`MNEME_HOST_BLOCK_UNIFORM=0`); `nested` without its loops "
            "over a plane's linear index (`MNEME_HOST_BLOCK_FLAT=0`). `block steps, lanes`: see "
            "docs/design/internals.md."
        ),
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
        *("| " + " | ".join(row.cells()) + " |" for row in rows),
        "",
    ]
    # the notes written by hand under the table (the file's first "## Notes" on) stay
    earlier = opts.out.read_text() if opts.out.exists() else ""
    kept = earlier[earlier.index("\n## Notes") + 1 :] if "\n## Notes" in earlier else ""
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text("\n".join(lines) + ("\n" + kept if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
