#!/usr/bin/env python3
"""Per-experiment overhead: everything an experiment costs besides compiling and running the kernel.

Captures a small saxpy launch on a backend (default: host), then runs the same configuration
repeatedly (its build is cached after the first run) directly in a `BaseExecutor` and through
the worker pool (`AsyncReplayExecutor`, one warm worker). For each experiment:

    kernel   = warm-up + timed runs + the verification run (estimated as one median run)
    compile  = preprocess + optimize + codegen (only preprocess on a cached build)
    overhead = wall time - kernel - compile   (restore, verify read-back and compare, IPC, bookkeeping)

Prints medians in milliseconds and overhead as a fraction of the wall time. Usage:

    python benchmarks/bench_experiment.py [--n 4096] [--repeats 30] [--iterations 3] [--backend host]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def split(result, wall: float) -> tuple[float, float, float]:
    runs = sum(result.exec_time) + sum(result.warmup_time) + (result.median_time or 0.0)
    compile_ = result.preprocess_ir_time + result.opt_time + result.codegen_time
    return runs, compile_, wall - runs - compile_


def report(name: str, rows: list[tuple[float, float, float, float]]) -> None:
    wall = statistics.median(r[0] for r in rows)
    runs = statistics.median(r[1] for r in rows)
    compile_ = statistics.median(r[2] for r in rows)
    overhead = statistics.median(r[3] for r in rows)
    print(
        f"{name:<24} wall {wall * 1e3:8.3f} ms  kernel {runs * 1e3:8.3f} ms  compile {compile_ * 1e3:8.3f} ms  "
        f"overhead {overhead * 1e3:8.3f} ms  overhead/wall {overhead / wall:6.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="saxpy elements")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--backend", default="host")
    opts = parser.parse_args()

    from mneme import capture
    from mneme.core.executor import BaseExecutor
    from mneme.core.workers import AsyncReplayExecutor

    with tempfile.TemporaryDirectory(prefix="mneme-bench-") as tmp:
        rng = np.random.default_rng(0)
        x = rng.uniform(0, 1, opts.n).astype(np.float32)
        y = rng.uniform(0, 1, opts.n).astype(np.float32)
        db = capture.capture(
            ROOT / "examples" / "saxpy" / "saxpy.ll",
            "saxpy",
            max(1, opts.n // 1024),
            256,
            [opts.n, np.float32(2.0), x, y],
            Path(tmp) / "rec",
            backend=opts.backend,
        )
        print(
            f"saxpy n={opts.n}, backend {opts.backend}, {opts.iterations} timed runs + 1 warm-up per experiment, "
            f"{opts.repeats} experiments, same configuration (cached build)"
        )

        with BaseExecutor(db, iterations=opts.iterations, backend=opts.backend) as ex:
            config = ex.default_config()
            first = ex.execute(config)
            assert first.ok, first.error
            rows = []
            for _ in range(opts.repeats):
                start = time.perf_counter()
                result = ex.execute(config)
                wall = time.perf_counter() - start
                assert result.ok, result.error
                rows.append((wall, *split(result, wall)))
            report("BaseExecutor.execute", rows)

        with AsyncReplayExecutor(
            db, iterations=opts.iterations, backend=opts.backend, results_db_dir=Path(tmp) / "pool"
        ) as pool:
            pool.evaluate(config)
            rows = []
            for _ in range(opts.repeats):
                start = time.perf_counter()
                result = pool.evaluate(config)
                wall = time.perf_counter() - start
                assert result.ok, result.error
                rows.append((wall, *split(result, wall)))
            report("AsyncReplayExecutor", rows)


if __name__ == "__main__":
    main()
