"""Start-up cost of the `mneme` command over a bare interpreter (issue 27, point 3; issue 37, point 6).

Runs `python -c pass` and each command interleaved (one of each per round, so a change in
machine load hits both alike), N rounds, and reports per command the median wall time, the
median of the per-round differences and the ratio of medians; also the CPU time (user + system)
the same way, which a loaded machine inflates less than the wall time, and the load average seen.
Target: difference <= 0.12 s for `mneme --help` and `mneme plugins`.

    python benchmarks/bench_startup.py [--rounds 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _run(args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(rounds: int) -> dict:
    for args in [BARE, *COMMANDS.values()]:  # warm the file cache and any plugin index first
        _run(args)
    bare: dict[str, list[float]] = {"wall": [], "cpu": []}
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in COMMANDS}
    diffs: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in COMMANDS}
    loads = [os.getloadavg()[0]]
    for _ in range(rounds):
        for name, args in COMMANDS.items():
            b = _run(BARE)
            t = _run(args)
            for i, clock in enumerate(("wall", "cpu")):
                bare[clock].append(b[i])
                times[name][clock].append(t[i])
                diffs[name][clock].append(t[i] - b[i])
        loads.append(os.getloadavg()[0])
    bare_median = statistics.median(bare["wall"])
    return {
        "rounds": rounds,
        "python": sys.version.split()[0],
        "load_average_1min": {"min": min(loads), "max": max(loads)},
        "bare_median_s": bare_median,
        "bare_cpu_median_s": statistics.median(bare["cpu"]),
        "commands": {
            name: {
                "median_s": statistics.median(times[name]["wall"]),
                "median_difference_s": statistics.median(diffs[name]["wall"]),
                "ratio": statistics.median(times[name]["wall"]) / bare_median,
                "cpu_median_s": statistics.median(times[name]["cpu"]),
                "cpu_median_difference_s": statistics.median(diffs[name]["cpu"]),
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
    print(
        f"python -c pass: median {result['bare_median_s'] * 1000:.0f} ms wall, "
        f"{result['bare_cpu_median_s'] * 1000:.0f} ms CPU ({args.rounds} rounds, interleaved; load average "
        f"{result['load_average_1min']['min']:.1f}..{result['load_average_1min']['max']:.1f})"
    )
    print("| command | median | over `python -c pass` (median of differences) | ratio | CPU over `python -c pass` |")
    print("| --- | --- | --- | --- | --- |")
    for name, row in result["commands"].items():
        print(
            f"| `{name}` | {row['median_s'] * 1000:.0f} ms | {row['median_difference_s'] * 1000:+.0f} ms "
            f"| {row['ratio']:.2f}x | {row['cpu_median_difference_s'] * 1000:+.0f} ms |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
