"""Probe (issue 7 fidelity): why did a short instance the application launches once take one of two
levels in the application, about 20% apart from process to process (reduce_app's first
reduce_sum 2.8 or 3.4 us, graph_app's saxpy 3.1 or 3.7 us), while its flushed replay held the
lower one?

It runs clock_probe (the SM clock of a kernel after an idle gap and after warm-up work: not the
cause, the clock was at its maximum), then the programs below under the recorder, `--runs`
processes for each environment of `--variants` beside the default one, and prints each
launched-once instance's in-application times. What it showed (session log, section 9): the
recorder allocated its L2-flush buffer right before the timed launch; allocated before the
prologue capture instead, the upper level is gone. A probe: its findings go to
docs/design/investigations/.

    scripts/gpu-suite --run python3 benchmarks/gpu/probes/once_probe.py [--runs 11] [--no-clock] \
        [--programs reduce_app,graph_app] [--variants "eager=CUDA_MODULE_LOADING=EAGER,..."] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import bench_recorder_fidelity as bench  # noqa: E402

PROGRAMS = ("reduce_app", "graph_app", "saxpy_app", "list_app")


def launched_once_times(name: str, tmp: Path, label: str, runs: int, env: dict[str, str]) -> dict[str, list[float]]:
    """The program run `runs` times under the recorder (`env` on top): instance key -> the one
    in-application time (us) of each run, for the instances it launched once."""
    once: dict[str, list[float]] = {}
    for i in range(runs):
        for (_kernel, key), times in bench.app_times_of_run(
            name, bench.PROGRAMS[name], tmp, f"{label}-{i}", env_extra=env
        ).items():
            if len(times) == 1:
                once.setdefault(key, []).append(times[0] * 1e6)
    return once


def labelled(specs: str) -> list[tuple[str, str]]:
    """ "label=value,..." as (label, value) pairs."""
    return [spec.partition("=")[::2] for spec in filter(None, specs.split(","))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--variants", default="", help="label=VAR=value[;VAR=value],... environments to compare")
    parser.add_argument("--no-clock", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out: dict = {"clock_probe": [], "programs": {}}
    probe = bench.BIN / "clock_probe"
    if probe.exists() and not args.no_clock:
        proc = subprocess.run([str(probe)], capture_output=True, text=True, timeout=120, check=False)
        for line in proc.stdout.splitlines():
            print("clock", line, flush=True)
            out["clock_probe"].append(json.loads(line))
        if proc.returncode:
            print("clock_probe failed:", proc.stderr[-400:], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        variants: dict[str, dict[str, str]] = {"default": {}}
        for label, assignments in labelled(args.variants):
            variants[label] = dict(a.split("=", 1) for a in assignments.split(";") if a)
        for name in args.programs.split(","):
            for index, (label, env) in enumerate(variants.items()):
                once = launched_once_times(name, Path(tmp), f"v{index}", args.runs, env)
                for key, times in once.items():
                    print(
                        f"{name} {label} {key[:12]}: median {statistics.median(times):.2f} us of "
                        f"{[round(t, 2) for t in times]}",
                        flush=True,
                    )
                out["programs"].setdefault(name, {})[label] = once
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
