"""Start-up cost of the `mneme` command over a bare interpreter (issue 27, point 3).

Runs `python -c pass` and each command interleaved (one of each per round, so a change in
machine load hits both alike), N rounds, and reports per command the median wall time, the
median of the per-round differences and the ratio of medians. Target: difference <= 0.15 s
for `mneme --help` and `mneme plugins`.

    python benchmarks/bench_startup.py [--rounds 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "mneme --help": ["-m", "mneme", "--help"],
    "mneme plugins": ["-m", "mneme", "plugins"],
    "mneme ir passes": ["-m", "mneme", "ir", "passes"],
}
BARE = ["-c", "pass"]


def _wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure(rounds: int) -> dict:
    for args in [BARE, *COMMANDS.values()]:  # warm the file cache and any plugin index first
        _wall(args)
    bare: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    diffs: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, args in COMMANDS.items():
            b = _wall(BARE)
            t = _wall(args)
            bare.append(b)
            times[name].append(t)
            diffs[name].append(t - b)
    bare_median = statistics.median(bare)
    return {
        "rounds": rounds,
        "python": sys.version.split()[0],
        "bare_median_s": bare_median,
        "commands": {
            name: {
                "median_s": statistics.median(times[name]),
                "median_difference_s": statistics.median(diffs[name]),
                "ratio": statistics.median(times[name]) / bare_median,
            }
            for name in COMMANDS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    result = measure(args.rounds)
    print(f"python -c pass: median {result['bare_median_s'] * 1000:.0f} ms ({args.rounds} rounds, interleaved)")
    print("| command | median | over `python -c pass` (median of differences) | ratio |")
    print("| --- | --- | --- | --- |")
    for name, row in result["commands"].items():
        print(f"| `{name}` | {row['median_s'] * 1000:.0f} ms | {row['median_difference_s'] * 1000:+.0f} ms "
              f"| {row['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
