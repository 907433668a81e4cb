"""Which sampler gives the best configuration within 20% of the budget, on the committed H100 sweeps?

Runs `mneme samplers compare` (`simulate.compare`, through the command's `compare_each`) on every
``tests/data/sweeps/h100-*.json`` with and without noise, every sampler at 20% of each sweep, 20 seeds,
plus ``exhaustive`` at 100% (what measuring every point would give), and writes the figures as JSON and
the Markdown tables of ``benchmarks/results/cpu-default-sampler.md``. Each simulated run follows
`mneme tune`'s defaults, its final interleaved comparison included (`simulate.Protocol`).

A last table compares each sweep's optimum directly with its recorded configuration, as the final
comparison does (the same pairs, the same stopping rule): how often the optimum comes out significantly
faster. Where it seldom does, no sampler's pick can be the optimum at the median.

    python benchmarks/bench_default_sampler.py --out benchmarks/results/cpu-default-sampler.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "tests" / "data" / "sweeps"
SAMPLERS = "guided,optuna:tpe,optuna:qmc,nevergrad:PortfolioDiscreteOnePlusOne,nevergrad:NGOpt,random"


def direct(sweep, seeds: int, top: int) -> dict:
    """The optimum against the recorded configuration, compared as `mneme tune` compares its `top` leaders."""
    from mneme.core.tuning.measure import row_confidence
    from mneme.core.tuning.simulate import Protocol, compare_points

    protocol = Protocol()
    optimum = min((p.value, h) for h, p in sweep.points.items() if p.ok)[1]
    if sweep.baseline.value is not None and sweep.baseline.value <= sweep.points[optimum].value:
        return {"optimum_is_recorded": True}
    confidence = row_confidence(protocol.confidence, top)
    faster, pairs, extra = 0, [], []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        found = compare_points(sweep, optimum, rng, protocol, confidence)
        faster += bool(found.interval and found.interval.significant and found.interval.ratio > 1.0)
        pairs.append(len(found.cand))
        extra.append(found.extra)
    return {
        "optimum_ns": sweep.points[optimum].value * 1e9,
        "recorded_ns": sweep.baseline.value * 1e9,
        "significantly_faster": faster / seeds,
        "pairs_median": statistics.median(pairs),
        "extra_pairs_median": statistics.median(extra),
        "max_pairs": protocol.max_pairs,
        "confidence": confidence,
    }


def _name(path: Path) -> str:
    stem = path.stem.removeprefix("h100-")
    return stem.rsplit("-", 1)[0].removesuffix("-16k").removesuffix("-128")


def table(results: dict, noise: bool, key: str) -> list[str]:
    sweeps = list(results["sweeps"])
    head = "| sampler | " + " | ".join(f"{s} ({results['sweeps'][s]['points']})" for s in sweeps) + " | worst median |"
    lines = [head, "| --- " * (len(sweeps) + 2) + "|"]
    mode = "noise" if noise else "no_noise"
    names = [r["sampler"] for r in results["sweeps"][sweeps[0]][mode]]
    for name in names:
        cells, medians = [], []
        for s in sweeps:
            row = next(r for r in results["sweeps"][s][mode] if r["sampler"] == name)
            if row.get("error"):
                cells.append("-")
                continue
            medians.append(row[f"{key}_median"])
            cells.append(f"{row[f'{key}_median']:.3f} / {row[key]:.3f}")
        label = f"**{name} (the default)**" if name == "guided" else name
        worst = f"{min(medians):.3f}" if medians else "-"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {worst} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", default=SAMPLERS)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import attrs

    from mneme.core.tuning.simulate import Protocol
    from mneme.core.tuning.sweep import Sweep
    from mneme.plugins.sampler_commands import compare_each

    names = [s for s in args.samplers.split(",") if s]
    results = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "protocol": attrs.asdict(Protocol()),
        "repeats": args.repeats,
        "sweeps": {},
    }
    for path in sorted(SWEEPS.glob("h100-*.json")):
        sweep = Sweep.load(path)
        entry = {"file": str(path.relative_to(ROOT)), "points": sum(1 for p in sweep.points.values() if p.status)}
        for noise in (True, False):
            rows = compare_each(sweep, names, ["20%"], args.repeats, noise)
            rows += compare_each(sweep, ["exhaustive"], ["100%"], args.repeats, noise)
            rows[-1]["sampler"] = "exhaustive at 100%"
            entry["noise" if noise else "no_noise"] = rows
        entry["direct"] = direct(sweep, 100, Protocol().retime_top)
        results["sweeps"][_name(path)] = entry
        print(f"{path.name}: done", file=sys.stderr, flush=True)
    for noise in (True, False):
        for key in ("fraction", "search_fraction"):
            print(f"\n{'noise' if noise else 'no noise'}, {key}:")
            print("\n".join(table(results, noise, key)))
    print("\nguided's final comparison, noise on: pairs (median, max over seeds) and pairs after the first look:")
    for name, entry in results["sweeps"].items():
        row = next(r for r in entry["noise"] if r["sampler"] == "guided")
        print(name, row["pairs"], row["pairs_max"], row["extra_pairs"], round(row["extra_pairs_mean"], 1))
    print("\noptimum vs recorded configuration, compared directly (100 seeds):")
    for name, entry in results["sweeps"].items():
        print(name, json.dumps(entry["direct"]))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
