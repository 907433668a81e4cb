"""Execution speed of the host backend on corpus kernels, against NumPy doing the same work.

Run: python benchmarks/host_backend.py [--n 1048576] [--repeat 5]
Prints, per kernel, the best wall time of one launch, GPU threads per second, and the ratio
to NumPy's time for the same result (numpy / host: above 1 means the host backend is faster).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from irbuild import build_cuda_ir

from mneme.core.backend import get_backend
from mneme.core.types import ExperimentConfiguration

BASE = 0x2E0000000000


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 20)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    import llvmlite.binding as llvm

    n, block = opts.n, opts.block
    backend = get_backend("host")
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    with backend.open_device() as dev:
        dev.reserve(BASE, 1 << 32)
        addr = [BASE + i * (1 << 28) for i in range(4)]
        for p, arr in zip(addr, (a, b, np.zeros(n, np.float32), np.zeros(n, np.float32))):
            dev.map(p, arr.nbytes)
            dev.write(p, arr.tobytes())
        blocks = (n + block - 1) // block
        cases = [
            ("vector_add", struct.pack("<QQQi", addr[0], addr[1], addr[2], n), lambda: a + b),
            ("saxpy", struct.pack("<ifQQ", n, 2.0, addr[0], addr[3]), lambda: np.float32(2.0) * a + b),
            ("reduce_sum", struct.pack("<QQi", addr[0], addr[2], n), lambda: a.reshape(-1, block).sum(axis=1)),
            ("warp_reduce", struct.pack("<QQi", addr[0], addr[2], n), lambda: a.sum()),
            (
                "math_funcs",
                struct.pack("<QQi", addr[0], addr[2], n),
                lambda: np.sin(a) + np.exp(-a * a) + np.sqrt(np.abs(a)) + np.log1p(a * a) + np.abs(a) ** 1.5,
            ),
        ]
        print(f"host backend, n = {n}, block = {block}, {os.cpu_count()} CPUs, {llvm.get_host_cpu_name()}")
        print(f"{'kernel':<12} {'launch ms':>10} {'Mthreads/s':>11} {'numpy ms':>9} {'numpy/host':>11}")
        for name, args, reference in cases:
            module = llvm.parse_assembly(build_cuda_ir(name).read_text())
            binary = backend.compile(module, name, ExperimentConfiguration(grid=blocks, block=block), backend.arch())
            kernel = dev.load(binary)
            dev.launch(kernel, (blocks,), (block,), 0, args)
            host = min(dev.time(kernel, (blocks,), (block,), 0, args, opts.repeat))
            ref = best(reference, opts.repeat)
            print(f"{name:<12} {host * 1e3:>10.2f} {n / host / 1e6:>11.1f} {ref * 1e3:>9.2f} {ref / host:>11.2f}")


if __name__ == "__main__":
    main()
