"""What the final comparison's later looks change, per committed H100 sweep: the default sampler (`guided`) at 20%
of each sweep, 20 seeds, noise on, with the fixed comparison (``--max-pairs 60``: one look, the comparison before
the looks) and with the default (``--max-pairs`` from `TuneOptions`): the median fraction of the optimum that
best.json reaches, the seeds whose pick is within 5% of the optimum, how often best.json stays the recorded
configuration, and the pairs the comparisons took (all candidates of a run together; and past the first look).

    python benchmarks/bench_final_comparison.py --out benchmarks/results/cpu-final-comparison.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "tests" / "data" / "sweeps"


def figures(sweep, space, protocol, seeds: int) -> dict:
    from mneme.core.tuning.simulate import NEAR, budget_of, simulate

    budget = budget_of("20%", sum(1 for p in sweep.points.values() if p.status))
    runs = [simulate(sweep, "guided", budget, seed, space=space, protocol=protocol) for seed in range(seeds)]
    return {
        "trials": budget,
        "fraction_median": float(np.median([r.fraction for r in runs])),
        "seeds_within_5pct": sum(r.fraction >= NEAR for r in runs),
        "recorded_kept": sum(r.pick == sweep.baseline_hash for r in runs),
        "pairs_median": float(np.median([r.pairs for r in runs])),
        "pairs_max": max(r.pairs for r in runs),
        "extra_pairs_median": float(np.median([r.extra_pairs for r in runs])),
        "extra_pairs_mean": float(np.mean([r.extra_pairs for r in runs])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--confidence", type=float, default=None, help="the final table's level (default: mneme tune's --confidence)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from mneme.core.tuning.simulate import Protocol
    from mneme.core.tuning.sweep import Sweep

    results = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "seeds": args.seeds,
        "confidence": args.confidence if args.confidence is not None else Protocol().confidence,
        "sweeps": {},
    }
    print(
        "| sweep (trials) | fixed: median / seeds >= 0.95 / recorded kept / pairs | looks: median / seeds >= 0.95 / "
        "recorded kept / pairs (max) / past the first look (median, mean) |"
    )
    print("| --- | --- | --- |")
    for path in sorted(SWEEPS.glob("h100-*.json")):
        sweep = Sweep.load(path)
        space = sweep.load_space()
        level = {"confidence": args.confidence} if args.confidence is not None else {}
        fixed = figures(sweep, space, Protocol(max_pairs=60, **level), args.seeds)
        looks = figures(sweep, space, Protocol(**level), args.seeds)
        results["sweeps"][path.stem] = {"fixed": fixed, "looks": looks, "max_pairs": Protocol().max_pairs}
        print(
            f"| {path.stem} ({fixed['trials']}) | {fixed['fraction_median']:.3f} / {fixed['seeds_within_5pct']} / "
            f"{fixed['recorded_kept']} / {fixed['pairs_median']:g} | {looks['fraction_median']:.3f} / "
            f"{looks['seeds_within_5pct']} / {looks['recorded_kept']} / {looks['pairs_median']:g} "
            f"({looks['pairs_max']}) / {looks['extra_pairs_median']:g}, {looks['extra_pairs_mean']:.0f} |",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
