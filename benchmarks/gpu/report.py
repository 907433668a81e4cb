"""Write the GPU results file (markdown + JSON) from pytest's JUnit XML and the benchmarks' JSON.

    python benchmarks/gpu/report.py --junit gpu-junit.xml --bench bench.json --out DIR

The file is the evidence for what CI cannot run: date, device, driver, commit, each GPU
test's outcome, each figure. Prints a short summary last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    stamped = ROOT / ".gpu" / "COMMIT"
    if stamped.exists():
        return stamped.read_text().strip()
    return _run("git", "-C", str(ROOT), "rev-parse", "HEAD") or "unknown"


def machine() -> dict:
    smi = _run("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
    info = {"gpu": smi, "host": platform.node(), "python": platform.python_version()}
    try:
        from mneme_cuda.backend import CudaBackend

        info.update(CudaBackend().fingerprint())
    except Exception as exc:  # the report must be written even when the plugin is broken
        info["plugin_error"] = repr(exc)
    return info


def tests(junit: Path) -> list[dict]:
    if not junit.exists():
        return []
    outcomes = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcomes.append({"test": name, "outcome": outcome, "seconds": float(case.get("time", 0)), "detail": detail})
    return outcomes


CHECK_TITLES = {"installed-record": "mneme record from the installed wheels"}


def checks(paths: list[Path]) -> list[dict]:
    """One entry per check file; an unreadable one is a failed check (the report is written regardless)."""
    found = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            found.append(
                {"check": str(data["check"]), "outcome": str(data["outcome"]), "detail": str(data.get("detail", ""))}
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            found.append({"check": path.stem, "outcome": "failed", "detail": f"unreadable result {path.name}: {exc}"})
    return found


def _us(seconds) -> str:
    return f"{seconds * 1e6:.1f}" if isinstance(seconds, (int, float)) and seconds else "-"


def _x(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}x" if isinstance(value, (int, float)) else "-"


def replay_table(figures: dict) -> list[str]:
    """Per kernel: the IR variant against the nvcc-built binary, and the replayed time against a direct launch."""
    kernels = figures.get("kernels") or {}
    if not kernels:
        return []
    lines = [
        "",
        "## Replay: IR variant vs the application's binary, and fidelity",
        "",
        f"Recorded configuration, median of {figures.get('iterations', '?')} runs with an L2 flush before "
        "each; `nvcc` is `nvcc -cubin -O3` of the same source replayed with `--mode cubin`; `direct` is that "
        "cubin launched with plain driver calls on ordinary buffers (target: replay/direct within 5%).",
        "",
        "| kernel | IR us | nvcc us | IR speed vs nvcc | direct us | replay / direct | verified (IR, nvcc) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for source, k in kernels.items():
        if "error" in k:
            lines.append(f"| {source} | failed: {str(k['error'])[:80].replace('|', '/')} | | | | | |")
            continue
        ratio = k.get("replay_vs_direct")
        lines.append(
            f"| {source} | {_us(k.get('ir_median_s'))} | {_us(k.get('nvcc_median_s'))} | "
            f"{_x(k.get('ir_speedup_vs_nvcc'))} | {_us(k.get('direct_median_s'))} | "
            f"{_x(ratio, 3)} | {k.get('ir_verified', '-')}, {k.get('nvcc_verified', '-')} |"
        )
    return lines


def tuning_table(figures: dict) -> list[str]:
    """Per kernel and sampler: trials, best time, speedups, time to the best, quality at 20% of the budget."""
    kernels = figures.get("kernels") or {}
    if not kernels:
        return []
    lines = [
        "",
        "## Tuning on the GPU",
        "",
        "Best: re-timed median of the best configuration. Speedups over the recorded configuration and "
        "over the nvcc-built cubin at the recorded configuration. At 20%: the best speedup found within "
        "20% of the exhaustive budget, as a fraction of the exhaustive optimum's (search-time medians).",
        "",
        "| kernel | space (size) | sampler | trials | best ms | vs recorded | vs nvcc | time to best s | at 20% |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, k in kernels.items():
        if "error" in k:
            lines.append(f"| {name} | failed: {str(k['error'])[:80].replace('|', '/')} | | | | | | | |")
            continue
        space = f"{k.get('space')} ({k.get('space_size', '?')})"
        for run in k.get("runs", []):
            if "error" in run:
                lines.append(
                    f"| {name} | {space} | {run['sampler']} | failed: "
                    f"{str(run['error'])[:80].replace('|', '/')} | | | | | |"
                )
                continue
            best = run.get("best_s")
            fraction = run.get("fraction_of_optimum_at_20pct")
            found = run.get("time_to_best_s")
            lines.append(
                f"| {name} | {space} | {run['sampler']} | {run.get('trials')} | "
                f"{f'{best * 1e3:.4f}' if best else '-'} | {_x(run.get('best_speedup'))} | "
                f"{_x(run.get('speedup_vs_nvcc'))} | {f'{found:.1f}' if found is not None else '-'} | "
                f"{f'{100 * fraction:.0f}%' if fraction is not None else '-'} |"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--bench", type=Path, action="append", default=[])
    parser.add_argument(
        "--check",
        type=Path,
        action="append",
        default=[],
        help="a check's outcome as JSON {check, outcome, detail} (scripts/gpu/installed-record)",
    )
    parser.add_argument("--out", type=Path, required=True)
    opts = parser.parse_args()
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine(),
        "tests": tests(opts.junit),
        "benchmarks": {p.stem: json.loads(p.read_text()) for p in opts.bench if p.exists()},
        "checks": checks(opts.check),
    }
    counts: dict[str, int] = {}
    for t in results["tests"]:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    results["counts"] = counts
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "gpu-results.json").write_text(json.dumps(results, indent=2))
    lines = [
        f"# GPU results ({results['date']})",
        "",
        f"- commit: `{results['commit']}`",
        f"- device: {results['machine'].get('gpu', '')}",
        f"- CUDA driver: {results['machine'].get('cuda-driver', '')}, "
        f"cuda-bindings {results['machine'].get('cuda-bindings', '')}",
        "- tests: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
        *(
            f"- {CHECK_TITLES.get(c['check'], c['check'])}: {c['outcome']}"
            + (f" ({c['detail']})" if c["detail"] else "")
            for c in results["checks"]
        ),
        "",
        "## Figures",
        "",
    ]
    for name, figures in results["benchmarks"].items():
        for line in figures.get("summary", []):
            lines.append(f"- {name}: {line.strip()}")
    benches = results["benchmarks"]
    lines += replay_table(benches.get("bench_cuda_replay", {}))
    lines += tuning_table(benches.get("bench_cuda_tuning", {}))
    lines += ["", "## Tests", "", "| test | outcome | s | detail |", "| --- | --- | --- | --- |"]
    for t in results["tests"]:
        lines.append(f"| {t['test']} | {t['outcome']} | {t['seconds']:.2f} | {t['detail'].replace('|', '/')} |")
    (opts.out / "gpu-results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index("## Tests")]))
    failed = [t["test"] for t in results["tests"] if t["outcome"] in ("failed", "error")]
    failed += [c["check"] for c in results["checks"] if c["outcome"] == "failed"]
    for name in failed:
        print(f"FAILED {name}")
    return 1 if failed or not results["tests"] else 0


if __name__ == "__main__":
    sys.exit(main())
