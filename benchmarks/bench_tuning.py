"""Tuning benchmark on the host backend: search quality and pipeline throughput, as ratios.

Quality: a space small enough to enumerate (block size x optimization level x argument
specialization of a captured stencil2d) is searched exhaustively; then TPE and NGOpt get 20%
of its size as their budget. For each we report the speedup of the configuration they found,
as a fraction of the exhaustive optimum's speedup, both with the times the samplers measured
and with the exhaustive run's time of the same configuration (which removes timing noise).

Throughput: experiments per minute with compile-ahead (CPU processes build the next
variants while the device worker runs) against compile-then-run in the device worker (the
original design), on the same configurations, one pool after the other in one run. Every
configuration is a distinct variant (the launch dimensions are specialized into the code),
so each one really compiles. On the host backend the CPU is also the device, so this ratio
says little about a GPU; benchmarks/gpu/bench_cuda_tuning.py measures it on CUDA with
`measure_throughput` below.

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
    return capture.capture(
        ir=build_cuda_ir("stencil2d"),
        kernel="stencil2d",
        grid=(n // 16, n // 16),
        block=(16, 16),
        args=[grid_in, grid_out, np.int32(n), np.int32(n)],
        out=out,
        backend="host",
    )


def tune(db, pool, results, sampler, trials, space, seed=None):
    from mneme.core.tuning.session import TuneOptions, TuningSession

    session = TuningSession(
        TuneOptions(
            record_db=str(db),
            results=str(results),
            sampler=sampler,
            trials=trials,
            space=str(space),
            seed=seed,
            retime_top=0,
        ),
        pool_factory=lambda **kwargs: pool,
    )
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
        print(
            f"space: {size} feasible configurations, exhaustive in {seconds:.1f} s; "
            f"baseline {base * 1e3:.3f} ms, optimum {optimum * 1e3:.3f} ms, speedup {base / optimum:.2f}x"
        )
        budget = max(1, round(0.2 * size))
        found: dict[str, list[dict]] = {}
        for sampler in ("optuna:tpe", "nevergrad:NGOpt", "random"):
            for seed in range(seeds):
                _, s, _ = tune(db, shared, work / f"{sampler.replace(':', '-')}-{seed}", sampler, budget, space, seed)
                found.setdefault(sampler, []).append(s["best"])
        # Re-time the optimum and every found configuration in interleaved rounds: one noise for all.
        from mneme.core.types import ExperimentConfiguration

        optimum_hash = min(table, key=table.get)
        configs = {
            optimum_hash: next(
                ExperimentConfiguration.from_dict(r.config)
                for r in session.store.records()
                if r.ok and r.hash == optimum_hash
            )
        }
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
            print(
                f"{sampler:16s} budget {budget:3d} (20% of {size}): found speedup / optimum speedup = "
                f"{statistics.mean(fractions):.2f} (mean of {seeds} seeds, min {min(fractions):.2f}; "
                f"found the exhaustive optimum {exact}/{seeds}; re-timed {rounds}x interleaved)"
            )
    finally:
        pool.shutdown()


# Every point is a distinct variant: the block (and the grid derived from it) is specialized into the code.
THROUGHPUT_SPACE_YAML = """
name: throughput
parameters:
  block_x: {ordinal: [8, 16, 32, 64, 128, 256]}
  block_y: {ordinal: [1, 2, 4, 8, 16]}
  specialize_dims: {fixed: true}
  specialize: bool
constraints: ["block_x * block_y >= 32"]
"""
MODES = (("compile-then-run", 0), ("compile-ahead", None))  # compile workers; None: the given count
MAX_CALIBRATED_RUNS = 5000  # a kernel far faster than its compile still gets a bounded experiment


def throughput_configs(db, work: Path, count: int) -> list:
    """`count` + 1 configurations of the throughput space (the first warms the pools), each a distinct variant."""
    from mneme.core.recording import load_recording
    from mneme.core.tuning.space import load_space

    path = work / "throughput-space.yaml"
    path.write_text(THROUGHPUT_SPACE_YAML)
    rec = load_recording(db)
    space = load_space(str(path), rec, rec.select())
    configs = [space.derived(space.decode(e)) for e in space.sample_exhaustive()]
    if len(configs) < count + 1:
        raise SystemExit(f"the throughput space has {len(configs)} points; ask for at most {len(configs) - 1}")
    # Spread the picks over the space, so both modes see small and large blocks alike.
    step = len(configs) / (count + 1)
    return [configs[int(i * step)] for i in range(count + 1)]


def calibrate_iterations(db, configs: list, *, backend: str | None, warmup: int = 1) -> dict:
    """Timed runs per experiment that make its device time about its compile time, measured in this process.

    Compile time: the median build of two fresh variants. Device time of an experiment with
    n timed runs: fixed (load, restore, verify) + (warmup + n) x per-run cost, from two
    executions of one built variant with 1 and 1 + `extra` timed runs.
    """
    from mneme.core.executor import BaseExecutor

    extra = 20
    with BaseExecutor(db, None, iterations=1, backend=backend, warmup=warmup) as ex:
        builds = []
        for config in configs[:3]:
            start = time.perf_counter()
            ex.build(config)
            builds.append(time.perf_counter() - start)
        compile_s = statistics.median(builds[1:])  # the first build also starts LLVM up
        binary = ex.build(configs[0])
        ex.execute(configs[0], binary)  # loads the module
        walls = {}
        for n in (1, 1 + extra, 1):
            ex.iterations = n
            start = time.perf_counter()
            result = ex.execute(configs[0], binary)
            walls.setdefault(n, []).append(time.perf_counter() - start)
            if not result.ok:
                raise SystemExit(f"calibration: the experiment failed: {result.error}")
    one = min(walls[1])
    per_run = max(1e-6, (walls[1 + extra][0] - one) / extra)
    fixed = max(0.0, one - (warmup + 1) * per_run)
    iterations = min(MAX_CALIBRATED_RUNS, max(1, round((compile_s - fixed) / per_run) - warmup))
    return {
        "compile_s": compile_s,
        "per_run_s": per_run,
        "fixed_s": fixed,
        "iterations": iterations,
        "device_s": fixed + (warmup + iterations) * per_run,
    }


def _seconds_between(start: str, end: str) -> float:
    import datetime

    return (datetime.datetime.fromisoformat(end) - datetime.datetime.fromisoformat(start)).total_seconds()


def measure_throughput(
    db, configs: list, work: Path, *, iterations: int, backend: str | None = None, compile_workers: int | None = None
) -> dict:
    """Experiments per minute of one device worker in both modes on the same configurations, one pool each.

    `configs[0]` warms each pool (spawned, IR linked, module code paths touched) and is not
    counted. Per experiment of compile-then-run, its compile time (preprocess + optimize +
    codegen) and its device time (the rest of its wall time) are reported too, to show how
    they compare. `compile_workers`: CPU build processes of compile-ahead (None: the pool's
    default, up to 4 on a GPU).
    """
    from mneme.core.workers import AsyncReplayExecutor

    warm, measured = configs[0], configs[1:]
    figures: dict = {
        "experiments": len(measured),
        "iterations": iterations,
        "backend": backend or "recorded",
        "modes": {},
    }
    for label, workers in MODES:
        count = compile_workers if workers is None else workers
        if workers is None and count is None and (backend or "") == "host":
            count = 1  # the pool builds in the device worker on the host unless asked
        with AsyncReplayExecutor(
            db, None, iterations, work / f"tp-{label}", 1, backend=backend, compile_workers=count
        ) as pool:
            pool.wait_ready(600)
            pool.evaluate(warm)
            start = time.perf_counter()
            results = pool.map(measured)
            seconds = time.perf_counter() - start
            used = len(pool.compile_workers)
        builds = [r.preprocess_ir_time + r.opt_time + r.codegen_time for r in results]
        walls = [_seconds_between(r.start_time, r.end_time) for r in results if r.start_time and r.end_time]
        figures["modes"][label] = {
            "compile_workers": used,
            "seconds": seconds,
            "per_minute": len(measured) / seconds * 60,
            "verified": sum(r.ok for r in results),
            "variants": len({r.variant_hash for r in results}),
            "compile_s": statistics.median(builds),
            "device_s": statistics.median(w - b for w, b in zip(walls, builds))
            if label == "compile-then-run"
            else None,
            "errors": sorted({(r.error or "")[:160] for r in results if not r.ok}),
        }
    modes = figures["modes"]
    figures["ratio"] = modes["compile-ahead"]["per_minute"] / modes["compile-then-run"]["per_minute"]
    return figures


def describe_throughput(figures: dict) -> list[str]:
    lines = []
    for label, m in figures["modes"].items():
        extra = (
            f"; per experiment: compile {m['compile_s'] * 1e3:.1f} ms, device {m['device_s'] * 1e3:.1f} ms"
            if m.get("device_s") is not None
            else ""
        )
        lines.append(
            f"{label} ({m['compile_workers']} compile workers): {figures['experiments']} experiments "
            f"({m['verified']} verified, {m['variants']} distinct variants) in {m['seconds']:.2f} s = "
            f"{m['per_minute']:.0f} experiments/min{extra}"
        )
    lines.append(
        f"compile-ahead / compile-then-run throughput: {figures['ratio']:.2f}x "
        f"({figures['iterations']} timed runs per experiment, one device worker)"
    )
    return lines


def throughput(db, work: Path, count: int) -> None:
    configs = throughput_configs(db, work, count)
    for line in describe_throughput(
        measure_throughput(db, configs, work, iterations=3, backend="host", compile_workers=1)
    ):
        print(line)


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
