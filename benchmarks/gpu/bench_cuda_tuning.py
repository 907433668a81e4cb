"""Tuning on the GPU (issue 8): pipeline throughput, and exhaustive, TPE and NGOpt on two real kernels.

    python benchmarks/gpu/bench_cuda_tuning.py [--json results.json] [--budget-s 150] [--side 4096]
    python benchmarks/gpu/bench_cuda_tuning.py --backend host --side 128 --kernels "" --throughput-experiments 6

Throughput (first): experiments per minute per GPU of one device worker with compile-ahead
(CPU processes build the next variants while the GPU runs) against compile-then-run in the
device worker (the original's design), on the same configurations of the corpus stencil2d
(side x side floats; every configuration a distinct variant, launch dimensions specialized),
one pool after the other in one run; and their ratio. The timed runs per experiment are
calibrated first so that an experiment's device time is about its compile time (the case
the target is stated for); the figures say which count was used and both measured times.
The code is `measure_throughput` of benchmarks/bench_tuning.py, shared with the host benchmark.

Kernels: examples/saxpy (1M floats, grid-stride: block and grid tuned) and the corpus
stencil2d on a side x side grid (2D block tuned, the grid derived to cover the same points).
For each, an exhaustive run enumerates the space; TPE and NGOpt get half of its budget.
Per sampler: trials, best median time (re-timed), speedup over the recorded configuration
and over the nvcc-built cubin of the same source, the wall time until the best trial
finished, and for TPE/NGOpt the fraction of the exhaustive optimum's speedup reached within
20% of the exhaustive budget. The JSON is rewritten after every run, so a run stopped by
the suite's timeout still reports what finished; `--budget-s` makes later runs stop early
(Mneme's --timeout) to fit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "benchmarks" / "gpu"),
    str(ROOT / "benchmarks"),
    str(ROOT / "tests" / "gpu"),
    str(ROOT / "tests"),
]

SAMPLERS = ("exhaustive", "optuna:tpe", "nevergrad:NGOpt")
EARLY = 0.2  # the quality figure: best found within this fraction of the exhaustive budget
SHARE = 0.5  # TPE and NGOpt budgets, as a fraction of the exhaustive one
RUN_OVERHEAD_S = 6.0  # starting the workers, the baseline and the re-timing of one run


def kernels(side: int) -> dict[str, dict]:
    """name -> how to capture it, which source nvcc builds, and its space."""
    return {
        "saxpy": {
            "source": ROOT / "examples" / "saxpy" / "saxpy.cu",
            "space": "quick",
            "options": {"grid_stride": True, "specialize": False, "min_threads": 32},
        },
        "stencil2d": {
            "source": ROOT / "tests" / "data" / "kernels" / "stencil2d.cu",
            "space": "quick",
            "side": side,
            "options": {"specialize": False, "min_threads": 32},
        },
    }


def capture(name: str, spec: dict, out: Path, backend: str) -> Path:
    from mneme import capture as cap

    if name == "saxpy":
        return cap.capture_spec(ROOT / "examples" / "saxpy" / "capture.yaml", out, backend=backend)
    from gpu_corpus import cuda_ir

    side = spec["side"]
    grid = np.random.default_rng(7).standard_normal(side * side).astype(np.float32)
    return cap.capture(
        ir=cuda_ir("stencil2d"),
        kernel="stencil2d",
        grid=(side // 16, side // 16),
        block=(16, 16),
        args=[grid, np.zeros(side * side, np.float32), np.int32(side), np.int32(side)],
        out=out,
        backend=backend,
    )


def space_size(db: Path, space: str, options: dict) -> int:
    """Feasible distinct configurations of the space (what exhaustive runs)."""
    from mneme.core.recording import load_recording
    from mneme.core.tuning.space import load_space

    rec = load_recording(db)
    found = load_space(space, rec, rec.select(None), dict(options))
    return sum(1 for _ in found.sample_exhaustive())


def nvcc_time(db: Path, source: Path, workdir: Path) -> dict:
    """The recorded launch replayed from the nvcc-built cubin of the same source (the application's binary)."""
    import bench_cuda_replay as replay_bench

    from mneme.core.recording import load_recording

    nvcc = replay_bench.nvcc_path()
    if not nvcc:
        return {"error": "no nvcc"}
    import subprocess

    from mneme_cuda.backend import CudaBackend

    cubin = workdir / f"{source.stem}.nvcc.cubin"
    done = subprocess.run(
        [nvcc, "-cubin", f"-arch={CudaBackend().arch(0)}", "-O3", "-o", str(cubin), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return {"error": f"nvcc failed: {done.stderr.strip()[:200]}"}
    copy = workdir / "with-cubin"
    shutil.copytree(load_recording(db).folder, copy)
    db_copy = copy / Path(db).name
    replay_bench.attach_cubin(db_copy, cubin)
    return replay_bench.replay(db_copy, "cubin", 20)


def fraction_early(records: list, budget: int, baseline: float) -> float | None:
    """Speedup of the best verified trial among the first `budget` counted trials (search-time medians)."""
    counted = sorted(
        (r for r in records if r.status in ("ok", "failed", "unverified", "cached")), key=lambda r: r.number
    )
    values = [r.value for r in counted[:budget] if r.status in ("ok", "cached") and r.value]
    return baseline / min(values) if values and baseline else None


def run_sampler(
    db: Path,
    spec: dict,
    sampler: str,
    trials: int,
    results: Path,
    timeout: float | None,
    backend: str | None,
    iterations: int,
) -> dict:
    """One tuning session; returns its figures (and the records, for the quality figure)."""
    from mneme.core.tuning import report
    from mneme.core.tuning.session import TuneOptions, TuningSession

    options = TuneOptions(
        record_db=str(db),
        space=spec["space"],
        space_options=dict(spec["options"]),
        sampler=sampler,
        trials=trials,
        timeout=timeout,
        results=str(results),
        seed=1,
        iterations=iterations,
        retime_top=2,
        retime_repeats=2,
        backend=backend,
    )
    started_wall = datetime.datetime.now(datetime.timezone.utc)
    started = time.perf_counter()
    summary = TuningSession(options).run()
    wall = time.perf_counter() - started
    store, _ = report.open_results(results)
    records = store.records()
    ok = [r for r in records if r.status == "ok" and r.value]
    search_baseline = (store.baseline or {}).get("value")
    best_record = min(ok, key=lambda r: r.value) if ok else None
    found_after = None
    if best_record is not None and best_record.end:
        found_after = (datetime.datetime.fromisoformat(best_record.end) - started_wall).total_seconds()
    best = summary.get("best") or {}
    counts = summary["counts"]
    return {
        "sampler": sampler,
        "trials": counts["trials"],
        "experiments": counts["experiments"],
        "cached": counts["cached"],
        "failures": counts["failures"],
        "wall_s": wall,
        "baseline_s": summary["baseline"]["time"],
        "best_s": best.get("time"),
        "best_speedup": best.get("speedup"),
        "best_changes": {k: v for k, v in (best.get("changes") or {}).items()},
        "best_is_baseline": bool(best.get("baseline")),
        "search_baseline_s": search_baseline,
        "search_best_s": best_record.value if best_record else None,
        "search_best_speedup": (search_baseline / best_record.value) if best_record and search_baseline else None,
        "best_trial": best_record.number if best_record else None,
        "time_to_best_s": found_after,
        "_records": records,
    }


def throughput(name: str, spec: dict, tmp: Path, opts) -> dict:
    """Calibrate the timed runs, then measure both modes on the same configurations (see the module doc)."""
    import bench_tuning

    db = capture(name, spec, tmp / "db", opts.backend)
    configs = bench_tuning.throughput_configs(db, tmp, opts.throughput_experiments)
    found: dict = {"kernel": name, "side": spec.get("side")}
    if opts.throughput_iterations == "auto":
        found["calibration"] = bench_tuning.calibrate_iterations(db, configs, backend=opts.backend)
        iterations = found["calibration"]["iterations"]
    else:
        iterations = int(opts.throughput_iterations)
    found.update(
        bench_tuning.measure_throughput(
            db, configs, tmp, iterations=iterations, backend=opts.backend, compile_workers=opts.compile_workers
        )
    )
    return found


def summarize_throughput(found: dict) -> list[str]:
    import bench_tuning

    if "error" in found:
        return [f"throughput: FAILED {found['error']}"]
    head = f"throughput on {found['kernel']} ({found['side']}x{found['side']})"
    calibration = found.get("calibration")
    if calibration:
        head += (
            f": calibrated {found['iterations']} timed runs per experiment (compile "
            f"{calibration['compile_s'] * 1e3:.1f} ms; device {calibration['fixed_s'] * 1e3:.1f} ms fixed + "
            f"{calibration['per_run_s'] * 1e3:.2f} ms per run)"
        )
    return [f"throughput: {line}" for line in [head, *bench_tuning.describe_throughput(found)]]


def summarize(figures: dict) -> list[str]:
    lines = []
    if "throughput" in figures:
        lines += summarize_throughput(figures["throughput"])
    ms = lambda s: "-" if not s else f"{s * 1e3:.3f} ms"
    for name, k in figures["kernels"].items():
        if "error" in k:
            lines.append(f"{name}: FAILED {k['error']}")
            continue
        nvcc = k.get("nvcc", {})
        head = (
            f"{name}: space {k['space']} {k['options']} has {k['space_size']} configurations; recorded "
            f"{k['recorded']}; nvcc cubin {ms(nvcc.get('median_s'))}"
        )
        lines.append(head)
        for run in k["runs"]:
            if "error" in run:
                lines.append(f"  {run['sampler']}: FAILED {run['error']}")
                continue
            parts = [
                f"  {run['sampler']}: {run['trials']} trials in {run['wall_s']:.1f} s, best {ms(run['best_s'])} "
                f"= {run['best_speedup']:.2f}x vs recorded"
                if run.get("best_speedup")
                else f"  {run['sampler']}: {run['trials']} trials, no verified best"
            ]
            if run.get("speedup_vs_nvcc"):
                parts.append(f"{run['speedup_vs_nvcc']:.2f}x vs nvcc")
            if run.get("time_to_best_s") is not None:
                parts.append(f"found at trial {run['best_trial']} after {run['time_to_best_s']:.1f} s")
            if run.get("fraction_of_optimum_at_20pct") is not None:
                parts.append(
                    f"{100 * run['fraction_of_optimum_at_20pct']:.0f}% of the exhaustive optimum's speedup "
                    f"within 20% of its budget ({run['early_budget']} trials)"
                )
            if run.get("best_changes"):
                parts.append("best: " + ", ".join(f"{a}={_short(v)}" for a, v in run["best_changes"].items()))
            lines.append("; ".join(parts))
    return lines


def _short(value) -> str:
    if isinstance(value, dict) and set(value) == {"x", "y", "z"}:
        return f"({value['x']},{value['y']},{value['z']})"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--budget-s", type=float, default=130.0, help="Wall-time budget of the whole benchmark.")
    parser.add_argument("--side", type=int, default=4096, help="stencil2d grid side.")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--kernels", default="saxpy,stencil2d")
    parser.add_argument("--backend", default="cuda", help="cuda (the benchmark); host runs the same flow on the CPU.")
    parser.add_argument(
        "--throughput-kernel", default="stencil2d", help="Kernel of the throughput figure; '' skips it."
    )
    parser.add_argument("--throughput-experiments", type=int, default=24, help="Configurations measured per mode.")
    parser.add_argument(
        "--throughput-iterations",
        default="auto",
        help="Timed runs per experiment of the throughput figure; auto: device time ~ compile time.",
    )
    parser.add_argument(
        "--compile-workers",
        type=int,
        default=None,
        help="CPU build processes of compile-ahead (default: the pool's, up to 4).",
    )
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    began = time.perf_counter()
    from mneme.core.backend import get_backend

    chosen = get_backend(opts.backend)
    if not chosen.availability().usable:
        print(f"skipped: {chosen.availability().reason}")
        if opts.json:
            opts.json.write_text(json.dumps({"skipped": chosen.availability().reason, "summary": []}))
        return 0
    figures: dict = {"backend": opts.backend, "samplers": list(SAMPLERS), "kernels": {}, "summary": []}

    def save() -> None:
        figures["summary"] = summarize(figures)
        figures["elapsed_s"] = time.perf_counter() - began
        if opts.json:
            opts.json.write_text(json.dumps(figures, indent=2, default=str))

    table = kernels(opts.side)
    names = [n for n in opts.kernels.split(",") if n]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if opts.throughput_kernel:
            try:
                figures["throughput"] = throughput(
                    opts.throughput_kernel, table[opts.throughput_kernel], tmp / "throughput", opts
                )
            except Exception as exc:  # the search figures below still run
                logging.exception("the throughput figure failed")
                figures["throughput"] = {"error": repr(exc)[:300]}
            save()
            print("\n".join(summarize_throughput(figures["throughput"])), flush=True)
        for index, name in enumerate(names):
            spec = table[name]
            entry: dict = {"space": spec["space"], "options": spec["options"], "runs": []}
            figures["kernels"][name] = entry
            try:
                db = capture(name, spec, tmp / name / "db", opts.backend)
                entry["space_size"] = space_size(db, spec["space"], spec["options"])
                from mneme.core.recording import load_recording

                inst = load_recording(db).select(None)
                entry["recorded"] = f"grid {inst.grid_dim} block {inst.block_dim}"
                if opts.backend == "cuda":
                    entry["nvcc"] = nvcc_time(db, spec["source"], tmp / name)
            except Exception as exc:  # one broken kernel must not hide the other
                logging.exception("preparing %s failed", name)
                entry["error"] = repr(exc)[:300]
                save()
                continue
            print(
                f"{name}: {entry['space_size']} configurations in space {spec['space']} {spec['options']}", flush=True
            )
            save()
            exhaustive_budget = entry["space_size"]
            optimum = None
            budgets = [
                exhaustive_budget if s == "exhaustive" else max(4, math.ceil(SHARE * exhaustive_budget))
                for s in SAMPLERS
            ]
            for position, sampler in enumerate(SAMPLERS):
                trials = budgets[position]
                # What is left of the time budget, shared by the runs to come in proportion to their trials
                # (later kernels counted as this one), less what starting workers and re-timing take.
                share = trials / (sum(budgets[position:]) + (len(names) - index - 1) * sum(budgets))
                left = opts.budget_s - (time.perf_counter() - began)
                timeout = max(10.0, left * share - RUN_OVERHEAD_S)
                try:
                    run = run_sampler(
                        db,
                        spec,
                        sampler,
                        trials,
                        tmp / name / sampler.replace(":", "-"),
                        timeout,
                        opts.backend,
                        opts.iterations,
                    )
                except Exception as exc:
                    logging.exception("%s with %s failed", name, sampler)
                    entry["runs"].append({"sampler": sampler, "error": repr(exc)[:300]})
                    save()
                    continue
                records = run.pop("_records")
                run["timeout_s"] = timeout
                nvcc_s = (entry.get("nvcc") or {}).get("median_s")
                if nvcc_s and run.get("best_s"):
                    run["speedup_vs_nvcc"] = nvcc_s / run["best_s"]
                if sampler == "exhaustive":
                    optimum = run.get("search_best_speedup")
                    run["complete"] = run["trials"] >= exhaustive_budget
                else:
                    run["early_budget"] = max(1, math.ceil(EARLY * exhaustive_budget))
                    early = fraction_early(records, run["early_budget"], run.get("search_baseline_s"))
                    run["early_speedup"] = early
                    if early and optimum:
                        run["fraction_of_optimum_at_20pct"] = early / optimum
                entry["runs"].append(run)
                save()
                print("\n".join(summarize({"kernels": {name: entry}})[-1:]), flush=True)
    save()
    print("\n".join(figures["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
