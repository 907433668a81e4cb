"""Coverage-guided fuzzing (atheris) of Mneme's readers, one process per target, within a time budget.

    python tests/fuzz/run.py --seconds 20 [--report benchmarks/results/fuzz.md] [TARGET ...]

Each target (tests/fuzz_targets.py) starts from its seed corpus under tests/fuzz/corpus/<target>/;
libFuzzer's own `-max_total_time` bounds it. Exit status 1 when any target finds an input that
raises something other than a MnemeError (the crashing input is written to the report folder).
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def child(target: str, seconds: int, corpus: Path, artifacts: Path) -> None:
    """Run inside the per-target process: instrument Mneme, then fuzz one target."""
    import atheris

    sys.path.insert(0, str(HERE.parent))
    import importlib

    with atheris.instrument_imports(include=["mneme"]):  # the readers' modules, for coverage
        import fuzz_targets

        for module in (
            "mneme.capture",
            "mneme.capture_spec",
            "mneme.capture_layout",
            "mneme.core.records",
            "mneme.core.snapshot",
            "mneme.core.tuning.constraints",
            "mneme.core.tuning.space",
            "mneme.core.limits",
            "mneme.core.ir",
        ):
            importlib.import_module(module)

    from mneme.core.errors import MnemeError

    function = fuzz_targets.TARGETS[target]

    def one(data: bytes) -> None:
        try:
            function(data)
        except MnemeError:
            pass

    # a fixed seed: CI's run is a prefix of the same mutation sequence a longer local run explored
    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={seconds}",
        "-seed=1",
        "-rss_limit_mb=2048",
        "-timeout=20",
        f"-artifact_prefix={artifacts}/{target}-",
        "-print_final_stats=1",
        "-max_len=65536",
    ]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--seconds", type=int, default=20, help="Budget per target.")
    parser.add_argument("--report", type=Path, default=None, help="Write the Markdown results here.")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--artifacts", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seconds, args.corpus, args.artifacts)
        return 0
    sys.path.insert(0, str(HERE.parent))
    from fuzz_targets import TARGETS

    targets = args.targets or list(TARGETS)
    artifacts = Path(tempfile.mkdtemp(prefix="mneme-fuzz-artifacts-"))
    rows, failed = [], False
    for target in targets:
        work = Path(tempfile.mkdtemp(prefix=f"mneme-fuzz-{target}-"))  # the seeds are copied: libFuzzer adds to it
        seeds = HERE / "corpus" / target
        if seeds.is_dir():
            shutil.copytree(seeds, work, dirs_exist_ok=True)
        start = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                target,
                "--seconds",
                str(args.seconds),
                "--corpus",
                str(work),
                "--artifacts",
                str(artifacts),
            ],
            capture_output=True,
            text=True,
            timeout=args.seconds * 3 + 60,
            cwd=ROOT,
        )
        elapsed = time.monotonic() - start
        log = proc.stdout + proc.stderr
        runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log) or re.findall(r"Done (\d+) runs", log)
        coverage = re.findall(r"cov: (\d+)", log)
        crashes = sorted(p.name for p in artifacts.glob(f"{target}-*"))
        ok = proc.returncode == 0 and not crashes
        failed |= not ok
        rows.append(
            (
                target,
                int(runs[-1]) if runs else 0,
                int(coverage[-1]) if coverage else 0,
                elapsed,
                len(list(seeds.iterdir())) if seeds.is_dir() else 0,
                "none" if ok else ", ".join(crashes) or f"exit {proc.returncode}",
            )
        )
        print(f"{target}: {rows[-1][1]} executions, coverage {rows[-1][2]}, {elapsed:.0f} s, findings: {rows[-1][5]}")
        if not ok:
            print(log[-3000:], file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    if args.report:
        write_report(args.report, rows, args.seconds, artifacts)
    return 1 if failed else 0


def write_report(path: Path, rows, seconds: int, artifacts: Path) -> None:
    from importlib.metadata import version

    lines = [
        "# Fuzzing results (atheris, coverage-guided)",
        "",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Budget: {seconds} s per target. "
        f"Python {sys.version.split()[0]}, atheris {version('atheris')}. "
        "Command: `python tests/fuzz/run.py --seconds N --report benchmarks/results/fuzz.md` (run by `.ci/run`).",
        "Targets are in tests/fuzz_targets.py; seeds in tests/fuzz/corpus/<target>/ (tests/fuzz/make_corpus.py). "
        "A finding is any exception other than a MnemeError; each becomes a regression test.",
        "",
        "| target | executions | coverage (edges) | seconds | seeds | findings |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [f"| {t} | {n} | {c} | {s:.0f} | {k} | {f} |" for t, n, c, s, k, f in rows]
    lines.append("")
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
