"""Tuning benchmark on the host backend: search quality and pipeline throughput, as ratios.

Quality: a space small enough to enumerate (block size x optimization level x argument
specialization of a captured stencil2d) is searched exhaustively; then TPE and NGOpt get 20%
of its size as their budget. For each we report the speedup of the configuration they found,
as a fraction of the exhaustive optimum's speedup, both with the times the samplers measured
and with the exhaustive run's time of the same configuration (which removes timing noise).

Throughput: experiments per minute with compile-ahead (a CPU process builds the next
variants while the device worker runs) against compile-then-run in the device worker (the
original design), on the same configurations. On the host backend the CPU is also the
device, so this ratio says little about a GPU; run it on the GPU machine for that.

Usage: python benchmarks/bench_tuning.py [--seeds 3] [--n 512] [--skip-throughput]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SPACE_YAML = """
name: bench
parameters:
  block_x: {ordinal: [4, 8, 16, 32, 64, 128]}
  block_y: {ordinal: [1, 2, 4, 8]}
  passes: {choices: ['default<O1>', 'default<O3>']}
  specialize: bool
"""


class SharedPool:
    def __init__(self, pool):
        self.pool = pool

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def shutdown(self, wait=True):
        pass


def capture_stencil(out: Path, n: int) -> Path:
    from irbuild import build_cuda_ir

    from mneme import capture

    grid_in = np.random.default_rng(0).random((n, n), dtype=np.float32)
    grid_out = np.zeros((n, n), dtype=np.float32)
    return capture.capture(ir=build_cuda_ir("stencil2d"), kernel="stencil2d", grid=(n // 16, n // 16), block=(16, 16),
                           args=[grid_in, grid_out, np.int32(n), np.int32(n)], out=out, backend="host")


def tune(db, pool, results, sampler, trials, space, seed=None):
    from mneme.core.tuning.session import TuneOptions, TuningSession

    session = TuningSession(TuneOptions(record_db=str(db), results=str(results), sampler=sampler, trials=trials,
                                        space=str(space), seed=seed, retime_top=0),
                            pool_factory=lambda **kwargs: pool)
    start = time.perf_counter()
    summary = session.run()
    return session, summary, time.perf_counter() - start


def quality(db, work: Path, seeds: int, rounds: int = 5) -> None:
    from mneme.core.workers import AsyncReplayExecutor

    space = work / "space.yaml"
    space.write_text(SPACE_YAML)
    pool = AsyncReplayExecutor(db, None, 3, work / "pool", 1)
    shared = SharedPool(pool)
    try:
        session, summary, seconds = tune(db, shared, work / "exhaustive", "exhaustive", 10_000, space)
        table = {r.hash: r.value for r in session.store.records() if r.ok}
        size = len(table)
        base = summary["baseline"]["time"]
        optimum = min(table.values())
        print(f"space: {size} feasible configurations, exhaustive in {seconds:.1f} s; "
              f"baseline {base * 1e3:.3f} ms, optimum {optimum * 1e3:.3f} ms, speedup {base / optimum:.2f}x")
        budget = max(1, round(0.2 * size))
        found: dict[str, list[dict]] = {}
        for sampler in ("optuna:tpe", "nevergrad:NGOpt", "random"):
            for seed in range(seeds):
                _, s, _ = tune(db, shared, work / f"{sampler.replace(':', '-')}-{seed}", sampler, budget, space, seed)
                found.setdefault(sampler, []).append(s["best"])
        # Re-time the optimum and every found configuration in interleaved rounds: one noise for all.
        from mneme.core.types import ExperimentConfiguration

        optimum_hash = min(table, key=table.get)
        configs = {optimum_hash: next(ExperimentConfiguration.from_dict(r.config) for r in session.store.records()
                                      if r.ok and r.hash == optimum_hash)}
        for bests in found.values():
            for best in bests:
                configs[best["hash"]] = ExperimentConfiguration.from_dict(best["config"])
        samples: dict[str, list[float]] = {h: [] for h in configs}
        for _ in range(rounds):
            for digest, result in zip(configs, pool.map(list(configs.values()))):
                if result.ok:
                    samples[digest].append(result.median_time)
        retimed = {h: statistics.median(v) for h, v in samples.items() if v}
        t_opt = retimed[optimum_hash]
        for sampler, bests in found.items():
            fractions = [t_opt / retimed[b["hash"]] for b in bests]
            exact = sum(b["hash"] == optimum_hash for b in bests)
            print(f"{sampler:16s} budget {budget:3d} (20% of {size}): found speedup / optimum speedup = "
                  f"{statistics.mean(fractions):.2f} (mean of {seeds} seeds, min {min(fractions):.2f}; "
                  f"found the exhaustive optimum {exact}/{seeds}; re-timed {rounds}x interleaved)")
    finally:
        pool.shutdown()


def throughput(db, work: Path, count: int) -> None:
    from mneme.core.executor import load_recording
    from mneme.core.tuning.space import load_space
    from mneme.core.workers import AsyncReplayExecutor

    rec = load_recording(db)
    space = load_space(str(work / "space.yaml"), rec, rec.select())
    configs = [space.derived(space.decode(e)) for e in space.sample_exhaustive()][:count]
    rates = {}
    for label, compile_workers in (("compile-then-run", 0), ("compile-ahead", 1)):
        with AsyncReplayExecutor(db, None, 3, work / f"tp-{label}", 1, compile_workers=compile_workers) as pool:
            pool.evaluate(configs[0])  # warm
            start = time.perf_counter()
            results = pool.map(configs)
            seconds = time.perf_counter() - start
        ok = sum(r.ok for r in results)
        rates[label] = len(configs) / seconds * 60
        print(f"{label:17s}: {len(configs)} experiments ({ok} verified) in {seconds:.2f} s = "
              f"{rates[label]:.0f} experiments/min")
    print(f"compile-ahead / compile-then-run throughput: {rates['compile-ahead'] / rates['compile-then-run']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1024, help="stencil grid edge (n x n floats)")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="mneme-bench-tuning-") as tmp:
        work = Path(tmp)
        db = capture_stencil(work / "rec", args.n)
        quality(db, work, args.seeds)
        if not args.skip_throughput:
            throughput(db, work, 24)


if __name__ == "__main__":
    main()
