"""How often the final comparison claims a difference that is not there, at a given family level, replayed on
measured same-code pairs (no tuning run: seconds, not hours).

`bench_significance.py` stores every null comparison's runs in the order they ran (both sides run the same code,
so any verdict is false; `benchmarks/results/cpu-significance-order.json`). Each replayed comparison takes a random
stored row from a random pair on, in the order the runs were made, gives each pair's first and second run to the
two sides by a fresh coin (as `measure.interleave` draws the order), and runs `measure.interleave` on that stream
at the candidate's confidence; the row's own length is the time cap (the runs `--measure-time` allowed). It keeps
what the machine did over consecutive runs (quiet stretches, bursts), which drawing pairs independently would
break. Rates are per comparison, with a 95% Wilson interval; ``runs of 20 without one`` is ``(1 - rate) ** 20``.

    python benchmarks/bench_significance_replay.py --comparisons 4000 --levels 0.95 0.99 0.995
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "results" / "cpu-significance-order.json"


def rows_of(data: dict, order: str = "random") -> list[list[float]]:
    """Each stored null row's runs in the order they ran (first run of pair 0, second run of pair 0, ...)."""
    rows = []
    for batch in data.values():
        if not isinstance(batch, dict) or batch.get("pair_order") != order:
            continue
        for outcome in batch.get("outcomes", ()):
            for row in outcome.get("compared", ()):
                flags = row.get("candidate_first") or ""
                stream = []
                for i, (b, c) in enumerate(zip(row["baseline_ns"], row["candidate_ns"])):
                    first_is_candidate = i < len(flags) and flags[i] == "1"
                    stream += [c, b] if first_is_candidate else [b, c]
                if len(stream) >= 40:
                    rows.append(stream)
    return rows


class Stream:
    """One stored row's runs from a random pair on, in the order they ran (wrapping round); its own length is
    the time cap."""

    def __init__(self, runs: list[float], rng: random.Random):
        self.runs = runs
        self.start = self.position = rng.randrange(len(runs) // 2) * 2

    def run(self) -> float:
        value = self.runs[self.position % len(self.runs)]
        self.position += 1
        return float(value)

    def out_of_time(self) -> bool:
        return (self.position - self.start) // 2 >= len(self.runs) // 2


def replay(rows: list[list[float]], confidence: float, comparisons: int, seed: int, max_pairs: int) -> dict:
    from mneme.core.tuning.measure import interleave

    rng = random.Random(seed)
    claimed, pairs, looks = 0, [], []
    for _ in range(comparisons):
        stream = Stream(rows[rng.randrange(len(rows))], rng)
        found = interleave(
            stream.run,
            stream.run,
            repeats=5,
            ci_target=0.02,
            confidence=confidence,
            out_of_time=stream.out_of_time,
            max_pairs=max_pairs,
            coin=lambda: rng.random() < 0.5,
        )
        claimed += bool(found.interval is not None and found.interval.significant)
        pairs.append(len(found.cand))
        looks.append(found.looks)
    rate = claimed / comparisons
    return {
        "confidence": confidence,
        "comparisons": comparisons,
        "claimed": claimed,
        "rate": rate,
        "rate_interval": wilson(claimed, comparisons),
        "runs_of_20_without_one": (1.0 - rate) ** 20,
        "pairs_median": sorted(pairs)[len(pairs) // 2],
        "past_first_look": sum(1 for n in looks if n > 1),
    }


def wilson(hits: int, n: int, z: float = 1.959964) -> list[float]:
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--comparisons", type=int, default=2000)
    parser.add_argument("--levels", type=float, nargs="+", default=[0.95, 0.99, 0.995])
    parser.add_argument("--max-pairs", type=int, default=960)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = rows_of(json.loads(args.data.read_text()))
    results = [replay(rows, level, args.comparisons, args.seed, args.max_pairs) for level in args.levels]
    report = {
        "data": str(args.data.resolve().relative_to(ROOT)),
        "rows": len(rows),
        "max_pairs": args.max_pairs,
        "results": results,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    for r in results:
        low, high = r["rate_interval"]
        print(
            f"confidence {r['confidence']}: {r['claimed']}/{r['comparisons']} claimed ({100 * r['rate']:.2f}%, "
            f"[{100 * low:.2f}, {100 * high:.2f}]); runs of 20 without one {100 * r['runs_of_20_without_one']:.0f}%; "
            f"pairs median {r['pairs_median']}; past the first look {r['past_first_look']}"
        )


if __name__ == "__main__":
    main()
