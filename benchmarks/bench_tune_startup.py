"""How long a short `mneme tune` call takes from a fresh results folder, and where the time goes (issue 39, point 5).

The call Kernel Tuner is compared with (benchmarks/gpu/bench_kernel_tuner.py), on the host backend:
the shipped saxpy recording, a space of the same 12 block sizes, ``--sampler exhaustive --trials 12
--iterations 7 --retime-top 0``, a new results folder each round. Per round and per source tree
(``--tree``, default this one; give another checkout, e.g. main, for the before/after comparison:
rounds alternate between the trees so both see the same machine load):

- ``cli``: wall seconds of the whole ``python -m mneme tune ...`` process (interpreter start-up included);
- ``phases``: the same session run in a fresh interpreter with each step of `TuningSession.run` timed
  (when it started, how long it took), which shows the critical path;
- ``importtime``: once per tree, the cumulative import time (``python -X importtime``) of the main
  process's heaviest top-level packages.

Modules are compiled once into a private .pyc cache (a warm-up round per tree, not counted), as an
installed Mneme has them, unless ``--source-each-time``.

    python benchmarks/bench_tune_startup.py --rounds 10 --tree /work/main --tree . --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "recordings" / "saxpy-4k"
BLOCK_SIZES = (32, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024)
SPACE = "name: kt-12\nparameters:\n  block_x: {ordinal: [" + ", ".join(map(str, BLOCK_SIZES)) + "]}\n"
STEPS = (
    "prepare",
    "_check_timer",
    "_check_results_dir",
    "_open_pool",
    "_open_storage",
    "_open_store",
    "_run_baseline",
    "_start_loop",
)

# Run in a fresh interpreter: the session with each step timed, printed as JSON.
PHASES = """
import functools, json, sys, time
T0 = time.perf_counter()
from mneme.core.tuning import loop, report
from mneme.core.tuning.session import TuneOptions, TuningSession
imported = time.perf_counter() - T0
marks = []
def timed(owner, name):
    function = getattr(owner, name)
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            marks.append([name, start - T0, time.perf_counter() - start])
    setattr(owner, name, wrapper)
for step in STEPS:
    timed(TuningSession, step)
timed(loop.TrialLoop, "run")
timed(report, "write_outputs")
options = TuneOptions(record_db=sys.argv[1], space=sys.argv[2], sampler="exhaustive", trials=12, results=sys.argv[3],
                      iterations=7, retime_top=0, backend="host")
start = time.perf_counter()
summary = TuningSession(options).run()
print(json.dumps({"imports": imported, "run": time.perf_counter() - start, "total": time.perf_counter() - T0,
                  "trials": summary["counts"]["trials"], "steps": marks}))
""".replace("STEPS", repr(STEPS))


PYCACHE: Path | None = None  # where compiled modules go (set in main): an installed Mneme has its .pyc files


def _env(tree: Path) -> dict[str, str]:
    paths = [str(tree), str(tree / "backends" / "cuda"), str(tree / "backends" / "hip")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "MNEME_NO_COLOR": "1"}
    if PYCACHE is not None:  # never compile every module from source in each round (PYTHONDONTWRITEBYTECODE)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE / tree.name)
    return env


def _tune_args(space: Path, results: Path) -> list[str]:
    return [
        "tune",
        "-rdb",
        str(RECORDING),
        "--space",
        str(space),
        "--sampler",
        "exhaustive",
        "--trials",
        "12",
        "--iterations",
        "7",
        "--retime-top",
        "0",
        "--backend",
        "host",
        "--results",
        str(results),
        "--json",
    ]


def cli_round(tree: Path, space: Path, work: Path) -> float:
    results = Path(tempfile.mkdtemp(dir=work))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mneme", *_tune_args(space, results / "r")],
        env=_env(tree),
        cwd=tree,  # `-m`/`-c` put the working directory first on sys.path
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"mneme tune failed ({tree}): {done.stderr[-2000:]}")
    return wall


def phases_round(tree: Path, space: Path, work: Path) -> dict:
    results = Path(tempfile.mkdtemp(dir=work))
    done = subprocess.run(
        [sys.executable, "-c", PHASES, str(RECORDING), str(space), str(results / "r")],
        env=_env(tree),
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the timed session failed ({tree}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def importtime(tree: Path, space: Path, work: Path, top: int = 8) -> dict[str, float]:
    """Cumulative import seconds of the main process's top-level packages (the workers' are in their logs)."""
    results = Path(tempfile.mkdtemp(dir=work))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mneme", *_tune_args(space, results / "r")],
        env=_env(tree),
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    packages: dict[str, float] = {}
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if found and not found.group(2).startswith(" "):  # a top-level import (no indentation)
            name = found.group(2).strip().split(".")[0]
            packages[name] = packages.get(name, 0.0) + int(found.group(1)) / 1e6
    return dict(sorted(packages.items(), key=lambda kv: -kv[1])[:top])


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tree", action="append", type=Path, help="source tree to time (repeatable; default: this)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--source-each-time",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE (compile every module from source in each round) instead of a .pyc cache",
    )
    args = parser.parse_args()
    global PYCACHE
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    figures: dict = {"rounds": args.rounds, "cpus": os.cpu_count(), "load": os.getloadavg(), "trees": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        space = work / "space.yaml"
        space.write_text(SPACE)
        if not args.source_each_time:
            PYCACHE = work / "pycache"
            for tree in trees:  # a warm-up round fills each tree's .pyc cache (not counted)
                cli_round(tree, space, work)
        figures["pyc_cache"] = not args.source_each_time
        runs = {str(t): {"cli": [], "phases": []} for t in trees}
        for _ in range(args.rounds):
            for tree in trees:
                runs[str(tree)]["cli"].append(cli_round(tree, space, work))
                runs[str(tree)]["phases"].append(phases_round(tree, space, work))
        for tree in trees:
            got = runs[str(tree)]
            steps: dict[str, list] = {}
            for run in got["phases"]:
                for name, at, took in run["steps"]:
                    steps.setdefault(name, []).append((at, took))
            figures["trees"][str(tree)] = {
                "commit": subprocess.run(
                    ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
                ).stdout.strip(),
                "cli_s": _stats(got["cli"]),
                "session_run_s": _stats([r["run"] for r in got["phases"]]),
                "session_imports_s": _stats([r["imports"] for r in got["phases"]]),
                "steps": {
                    name: {
                        "starts_at_s": statistics.median(a for a, _ in v),
                        "takes_s": statistics.median(t for _, t in v),
                    }
                    for name, v in steps.items()
                },
                "importtime_s": importtime(tree, space, work),
                "cli_each_s": got["cli"],
            }
    figures["load_after"] = os.getloadavg()
    text = json.dumps(figures, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
