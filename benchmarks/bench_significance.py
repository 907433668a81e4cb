"""Does `mneme tune` claim speedups that are not there, and are its intervals right when one is?

Two experiments on the host backend, with the shipped saxpy recording, while another process
loads the CPU (a busy-loop per core, as on a shared machine):

- *null*: N repeated `mneme tune` runs on a space whose configurations all compile to the same
  code as the recorded one (device-toolchain knobs, which the host backend ignores:
  `benchmarks/spaces/host-same-code.yaml`). Every verdict ("faster"/"slower") on any row of the
  final table is a false one, whether the row was compared by interleaved runs or known from
  the search only; the benchmark counts them in every row. Targets: no run whose best.json is
  not the recorded configuration, and false verdicts on at most 5% of the rows.
- *real*: `mneme tune` over the quick space (block sizes and specialization, which do change
  the code), then the ratio of its best to the recorded configuration measured separately
  (`--pairs` interleaved pairs on a fresh worker pool); the interval tune reported should
  contain it.

The table's level is `mneme tune`'s ``--confidence`` (99.5% by default; ``--confidence 0.95`` here measures the
level before); each run keeps its summary's ``table`` (the level and each compared row's share).

    python benchmarks/bench_significance.py --runs 20 --out benchmarks/results/cpu-significance.json
    python benchmarks/bench_significance.py --runs 20 --retime-top 0 --real-runs 0 --load 2 --measure-time 2
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "recordings" / "saxpy-4k"
NULL_SPACE = ROOT / "benchmarks" / "spaces" / "host-same-code.yaml"
MNEME = str(Path(sys.executable).with_name("mneme"))
EXTRA: list[str] = []  # tune options every run gets (--confidence)


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def tune(results: Path, *args: str) -> dict:
    command = [MNEME, "tune", "-rdb", str(RECORDING), "--results", str(results), "--json", *EXTRA, *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def pair_data(results: Path) -> list[dict]:
    """Every compared row's interleaved runs, in the order they ran (from the run's store): the data behind
    each interval, to look at the order of the runs, drifts and serial correlation afterwards."""
    from mneme.core.tuning.store import ResultStore, storage_url

    store = ResultStore.load(storage_url(None, results))
    return [
        {
            "trial": entry.get("trial"),
            "baseline": entry.get("baseline_medians"),
            "candidate": entry.get("medians"),
            "stopped": entry.get("stopped"),
            "first_pairs": entry.get("first_pairs"),
            "looks": entry.get("looks"),
            "candidate_first": entry.get("candidate_first"),
            "speedup": entry.get("speedup"),
        }
        for entry in store.retime.values()
        if not entry.get("baseline")
    ]


def null_runs(
    runs: int, work: Path, measure_time: float, retime_top: int = 3, iterations: int = 3, max_pairs: int | None = None
) -> dict:
    outcomes = []
    for i in range(runs):
        started = time.monotonic()
        load_start = os.getloadavg()[0]
        summary = tune(
            work / f"null-{i}",
            "--space",
            str(NULL_SPACE),
            "--sampler",
            "exhaustive",
            "--trials",
            "6",
            "--retime-top",
            str(retime_top),
            "--measure-time",
            str(measure_time),
            "--seed",
            str(i),
            "--iterations",
            str(iterations),
            *(["--max-pairs", str(max_pairs)] if max_pairs is not None else []),
        )
        compared = [c for c in summary["ranking"] if c["retimed"] and not c["baseline"]]
        significant = [c for c in compared if c["significant"] and c["speedup"] > 1.0]
        # Every row of the table: each configuration runs the recorded code, so any verdict is false.
        rows = [c for c in summary["ranking"] if not c["baseline"]]
        false_rows = [c for c in rows if c["significant"] or c.get("verdict") in ("faster", "slower")]
        outcomes.append(
            {
                "run": i,
                "seconds": time.monotonic() - started,
                "best_is_recorded": summary["best"]["baseline"],
                "decision": summary["decision"],
                "significant_faster": len(significant),
                "intervals": [[c["speedup"], *c["speedup_ci"]] for c in compared],
                "pairs": [c.get("method") for c in compared],
                "rows": [
                    {
                        "method": c["method"],
                        "speedup": c["speedup"],
                        "interval": c.get("speedup_ci"),
                        "search_interval": c.get("search_ci"),
                        "verdict": c.get("verdict"),
                    }
                    for c in rows
                ],
                "false_verdict_rows": len(false_rows),
                "table": summary.get("table"),  # the level the table's verdicts hold at together
                "notes": (summary.get("measurement") or {}).get("notes", []),
                "measurement": summary.get("measurement"),
                "loadavg_1min": [load_start, os.getloadavg()[0]],
                "compared": pair_data(work / f"null-{i}") if compared else [],
            }
        )
        print(
            f"null run {i}: best is recorded: {summary['best']['baseline']}; rows "
            f"{[(r['method'], round(r['speedup'] or 0, 3), r['verdict']) for r in outcomes[-1]['rows']]}",
            flush=True,
        )
    claimed = sum(1 for o in outcomes if not o["best_is_recorded"])
    total_rows = sum(len(o["rows"]) for o in outcomes)
    false_rows = sum(o["false_verdict_rows"] for o in outcomes)
    return {
        "runs": runs,
        "runs_claiming_a_speedup": claimed,
        "false_significant_rate": claimed / max(1, runs),
        "rows": total_rows,
        "false_verdict_rows": false_rows,
        "false_verdict_row_rate": false_rows / max(1, total_rows),
        "search_only_rows": sum(1 for o in outcomes for r in o["rows"] if r["method"] == "search"),
        "pair_checks": pair_checks([c for o in outcomes for c in o["compared"]]),
        "outcomes": outcomes,
    }


def pair_checks(compared: list[dict]) -> dict:
    """Whether the null comparisons' pairs behave as the intervals assume (independent coin tosses for their
    signs): the share of pairs whose first run was the slower one (an order effect: 0.5 without), the mean lag-1
    autocorrelation of a row's log ratios, and the variance of the sum of signs over blocks of m consecutive pairs
    divided by the pairs that are not ties (1.0 for independent signs, above 1 when consecutive pairs agree: a
    too narrow interval), and the variance over rows of the row's standardized sign sum (1.0 when every row's
    pairs are exchangeable; above 1 when a row's two sides differ for the whole comparison)."""
    first_slower = second_slower = 0
    lag1, z = [], []
    blocks = {2: [0.0, 0], 10: [0.0, 0], 40: [0.0, 0]}
    for row in compared:
        logs = [math.log(b / c) for b, c in zip(row["baseline"], row["candidate"])]
        order = row.get("candidate_first") or [i % 2 for i in range(len(logs))]  # absent: alternating
        for value, flipped in zip(logs, order):
            slower_first = value > 0 if not flipped else value < 0
            first_slower += value != 0 and slower_first
            second_slower += value != 0 and not slower_first
        mean = statistics.fmean(logs)
        centred = [v - mean for v in logs]
        total = sum(v * v for v in centred)
        if len(logs) > 2 and total > 0:
            lag1.append(sum(a * b for a, b in itertools.pairwise(centred)) / total)
        signs = [(v > 0) - (v < 0) for v in logs]
        if any(signs):
            z.append(sum(signs) / math.sqrt(sum(map(abs, signs))))
        for m, acc in blocks.items():
            for start in range(0, len(signs) - m + 1, m):
                acc[0] += sum(signs[start : start + m]) ** 2
                acc[1] += sum(map(abs, signs[start : start + m]))
    return {
        "pairs": sum(len(row["baseline"]) for row in compared),
        "candidate_first": sum(sum(row.get("candidate_first") or []) for row in compared),
        "first_run_slower": first_slower / max(1, first_slower + second_slower),
        "lag1_autocorrelation": statistics.fmean(lag1) if lag1 else None,
        "sign_variance_ratio": {str(m): acc[0] / acc[1] if acc[1] else None for m, acc in blocks.items()},
        "row_sign_z_variance": statistics.pvariance(z) if len(z) > 1 else None,
    }


def separate_ratio(best: dict, baseline: dict, pairs: int, work: Path) -> dict:
    """The best's speedup over the baseline from `pairs` interleaved pairs on a fresh pool (no tuning code), each
    pair's order drawn at random as `mneme tune`'s comparison draws it (the same design, so both estimate the same
    ratio: with different code, whether a run follows a run of the same code changes its time)."""
    from mneme.core.tuning.stats import outliers, paired_ratio
    from mneme.core.types import ExperimentConfiguration
    from mneme.core.workers import AsyncReplayExecutor

    a = ExperimentConfiguration.from_dict(baseline)
    b = ExperimentConfiguration.from_dict(best)
    base, cand, candidate_first = [], [], []
    coin = random.Random()
    with AsyncReplayExecutor(str(RECORDING), None, 3, work / "separate", 1) as pool:
        for _ in range(pairs):
            candidate_first.append(coin.random() < 0.5)
            order = [(b, cand), (a, base)] if candidate_first[-1] else [(a, base), (b, cand)]
            for config, series in order:
                result = pool.evaluate(config)
                series.append(result.median_time)
    interval = paired_ratio(base, cand)
    return {
        "pairs": pairs,
        "ratio": interval.ratio,
        "interval": [interval.low, interval.high],
        "baseline_median": statistics.median(base),
        "best_median": statistics.median(cand),
        "ratio_of_medians": statistics.median(base) / statistics.median(cand),
        "outlying_pairs": len(outliers([b / c for b, c in zip(base, cand)])),
        "runs": {"baseline": base, "candidate": cand, "candidate_first": [int(f) for f in candidate_first]},
    }


def real_run(work: Path, pairs: int, measure_time: float, space: str = "quick") -> dict:
    load = {"tune_start": os.getloadavg()[0]}
    space_args = ["--space", "quick", "-o", "axes=x"] if space == "quick" else ["--space", space]
    summary = tune(
        work / "tune",
        *space_args,
        "--sampler",
        "exhaustive",
        "--trials",
        "44",
        "--retime-top",
        "1",
        "--measure-time",
        str(measure_time),
    )
    compared = [c for c in summary["ranking"] if c["retimed"] and not c["baseline"]]
    if not compared:
        return {"error": "no candidate was compared", "summary_best": summary["best"]}
    top = compared[0]
    load["tune_end"] = os.getloadavg()[0]
    separate = separate_ratio(top["config"], summary["baseline"]["config"], pairs, work)
    load["separate_end"] = os.getloadavg()[0]
    low, high = top["speedup_ci"]
    return {
        "candidate_changes": top["changes"],
        "tune_speedup": top["speedup"],
        "tune_interval": [low, high],
        "tune_method": top["method"],
        "tune_significant": top["significant"],
        "separate": separate,
        "interval_contains_separate_ratio": low <= separate["ratio"] <= high,
        "decision": summary["decision"],
        "table": summary.get("table"),
        "loadavg_1min": load,
        "notes": (summary.get("measurement") or {}).get("notes", []),
        "compared": pair_data(work / "tune"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="null-case tune runs")
    parser.add_argument("--pairs", type=int, default=200, help="pairs of the separate measurement")
    parser.add_argument("--measure-time", type=float, default=10.0, help="--measure-time of each tune run")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy-loop processes (0: none)")
    parser.add_argument(
        "--retime-top",
        type=int,
        default=3,
        help="--retime-top of the null runs (0: every row is known from the search only)",
    )
    parser.add_argument("--iterations", type=int, default=3, help="--iterations (timed runs) of the null runs")
    parser.add_argument(
        "--max-pairs", type=int, default=None, help="--max-pairs of the null runs (default: tune's; 60: no later looks)"
    )
    parser.add_argument("--real-runs", type=int, default=1, help="real-difference runs (0 skips them)")
    parser.add_argument("--skip-real", action="store_true", help="the same as --real-runs 0")
    parser.add_argument(
        "--real-space",
        default="quick",
        help="space of the real case: quick (-o axes=x) or a space file, e.g. "
        "benchmarks/spaces/host-slower-code.yaml (a difference that does not depend on load)",
    )
    parser.add_argument(
        "--confidence", type=float, default=None, help="tune's --confidence (the table's level; default: tune's)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.confidence is not None:
        EXTRA.extend(["--confidence", str(args.confidence)])
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.load)]
    for p in burners:
        p.start()
    work = Path(tempfile.mkdtemp(prefix="mneme-significance-"))
    started = time.monotonic()
    try:
        report = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {
                "node": platform.node(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_processes": args.load,
                "loadavg_start": os.getloadavg(),
                "MNEME_HOST_THREADS": os.environ.get("MNEME_HOST_THREADS", ""),
            },
            "tune_options": EXTRA,
            "commit": subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "null": null_runs(args.runs, work, args.measure_time, args.retime_top, args.iterations, args.max_pairs)
            if args.runs
            else None,
        }
        real_runs = 0 if args.skip_real else args.real_runs
        if real_runs:
            runs = [
                real_run(work / f"real-{i}", args.pairs, args.measure_time, args.real_space) for i in range(real_runs)
            ]
            judged = [r for r in runs if "error" not in r]
            report["real"] = {
                "space": args.real_space,
                "runs": runs,
                "significant": sum(bool(r["tune_significant"]) for r in judged),
                "interval_contains_separate_ratio": sum(bool(r["interval_contains_separate_ratio"]) for r in judged),
                "compared": len(judged),
            }
        report["machine"]["loadavg_end"] = os.getloadavg()
        report["seconds"] = time.monotonic() - started
    finally:
        stop.set()
        for p in burners:
            p.join(5)
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("null", "real")}, indent=2, sort_keys=True))
    if report["null"]:
        null = report["null"]
        print(
            f"null: {null['runs_claiming_a_speedup']}/{args.runs} runs claimed a significant speedup; "
            f"{null['false_verdict_rows']}/{null['rows']} rows carried a (false) verdict "
            f"({null['search_only_rows']} rows known from the search only)"
        )
        checks = null["pair_checks"]
        ratios = "/".join(f"{v:.2f}" if v is not None else "-" for v in checks["sign_variance_ratio"].values())
        print(
            f"pairs: {checks['pairs']} ({checks['candidate_first']} candidate first); first run slower in "
            f"{100 * checks['first_run_slower']:.1f}%; lag-1 autocorrelation {checks['lag1_autocorrelation'] or 0:+.3f}; "
            f"sign variance ratio in blocks of 2/10/40 pairs {ratios} (1: independent); "
            f"rows' sign z variance {checks['row_sign_z_variance'] or 0:.2f}"
        )
    if report.get("real"):
        real = report["real"]
        print(
            f"real: significant in {real['significant']}/{real['compared']} runs; the interval contains the "
            f"separately measured ratio in {real['interval_contains_separate_ratio']}/{real['compared']}"
        )


if __name__ == "__main__":
    main()
