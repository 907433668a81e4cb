"""Valid trials with and without launch contracts (issue 39, point 1): how much of the budget runs.

    python benchmarks/gpu/bench_valid_trials.py --json results.json [--trials 60 --seeds 1,2,3]
    python benchmarks/gpu/bench_valid_trials.py --backend host --trials 8 --kernels stencil-shared-16k --samplers guided

Kernels whose code assumes its block shape (capture descriptions in benchmarks/gpu/sweeps/, sources in
tests/data/contracts/): a shared-memory stencil (a tile of BLOCK + 2 floats), a tiled transpose (TILE and
BLOCK_ROWS compiled in), a shared 256-bin histogram (one bin cleared per thread: exactly 256 threads), a
shared-memory tree reduction with one result per block (exactly its block), and, after Rodinia's hotspot
and pathfinder (our own code), a thermal step in 16 x 16 tiles with a shared halo and a minimum-cost path
four rows at a time over 256 columns a block (both index their cells by the compiled-in tile, not by
blockDim). For each sampler of ``--samplers`` (default: random, and guided, the default sampler, which also
narrows values that keep failing during the search) and each seed of ``--seeds``, `mneme tune --space
standard` with launch contracts on (the default), and for the first seed also off (``-o contracts=false``:
what the search alone learns). Per run: measured trials, how many verified (valid), the valid fraction, what failed and why, and
the best speedup found. Target: at least 80% valid with contracts on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "benchmarks" / "gpu" / "sweeps"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # benchmarks/gpu/report.py: the commit and machine of a GPU result

KERNELS = (
    "stencil-shared-16k",
    "hotspot-512",
    "pathfinder-64k",
    "transpose-tiled-128",
    "histogram-shared-16k",
    "reduce-sum-16k",
)


def run(db: Path, contracts: bool, trials: int, backend: str, results: Path, seed: int, sampler: str) -> dict:
    from mneme.core.tuning.session import TuneOptions, TuningSession

    options = TuneOptions(
        record_db=str(db),
        space="standard",
        space_options={"contracts": contracts},
        sampler=sampler,
        seed=seed,
        trials=trials,
        results=str(results),
        retime_top=0,
        backend=backend,
    )
    started = time.perf_counter()
    summary = TuningSession(options).run()
    counts = summary["counts"]
    measured = counts["ok"] + counts["failed"] + counts["unverified"]
    fastest = summary.get("fastest") or {}
    from mneme.core.tuning import report as tuning_report

    store, _ = tuning_report.open_results(results)
    errors: dict[str, int] = {}  # each failure's message, with its configuration's numbers left out
    for record in store.records():
        message = ((record.result or {}).get("error") or "") if record.status != "ok" else ""
        if message:
            key = re.sub(r"\d+", "N", message)[:200]
            errors[key] = errors.get(key, 0) + 1
    return {
        "sampler": sampler,
        "seed": seed,
        "contracts": contracts,
        "trials": counts["trials"],
        "valid": counts["ok"],
        "valid_fraction": counts["ok"] / measured if measured else None,
        "unverified": counts["unverified"],
        "failures": counts["failures"],
        "infeasible": counts["infeasible"],
        "fastest_speedup_estimate": fastest.get("speedup"),
        "wall_s": time.perf_counter() - started,
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
    }


def summarize(figures: dict) -> list[str]:
    lines = []
    for name, entry in figures["kernels"].items():
        if "error" in entry:
            lines.append(f"{name}: FAILED {entry['error']}")
            continue
        for r in entry["runs"]:
            fraction = "-" if r["valid_fraction"] is None else f"{100 * r['valid_fraction']:.0f}%"
            lines.append(
                f"{name} {r.get('sampler', 'random')} seed {r.get('seed', 1)} "
                f"contracts {'on' if r['contracts'] else 'off'}: "
                f"{r['valid']}/{r['trials']} valid "
                f"({fraction}); failures {r['failures'] or 'none'}, unverified {r['unverified']}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seeds", default="1", help="comma-separated: one run per seed")
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--samplers", default="random,guided")
    parser.add_argument("--contracts", choices=("both", "on", "off"), default="both", help="off: the first seed only")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from mneme import capture as cap
    from mneme.core.backend import get_backend

    samplers = [s for s in opts.samplers.split(",") if s]
    seeds = [int(s) for s in opts.seeds.split(",") if s]
    modes = {"both": [True, False], "on": [True], "off": [False]}[opts.contracts]
    figures: dict = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": report.commit(),
        "machine": report.machine() if opts.backend == "cuda" else {"host": platform.node()},
        "backend": opts.backend,
        "trials": opts.trials,
        "space": "standard",
        "samplers": samplers,
        "kernels": {},
        "summary": [],
    }

    def save() -> None:
        figures["summary"] = summarize(figures)
        if opts.json:
            opts.json.write_text(json.dumps(figures, indent=2, default=str))

    chosen = get_backend(opts.backend)
    if not chosen.availability().usable:
        figures["skipped"] = chosen.availability().reason
        save()
        print(f"skipped: {figures['skipped']}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in [k for k in opts.kernels.split(",") if k]:
            entry: dict = {"runs": []}
            figures["kernels"][name] = entry
            try:
                db = cap.capture_spec(SWEEPS / f"{name}.yaml", Path(tmp) / name / "db", backend=opts.backend)
                for sampler in samplers:
                    for seed in seeds:
                        for contracts in modes if seed == seeds[0] else [m for m in modes if m]:
                            entry["runs"].append(
                                run(
                                    db,
                                    contracts,
                                    opts.trials,
                                    opts.backend,
                                    Path(tmp) / name / f"{sampler}-{seed}-contracts-{contracts}",
                                    seed,
                                    sampler,
                                )
                            )
                            save()
            except Exception as exc:  # one kernel's failure must not hide the others
                logging.exception("%s failed", name)
                entry["error"] = repr(exc)[:300]
            save()
            print("\n".join(summarize({"kernels": {name: entry}})), flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
