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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--bench", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    opts = parser.parse_args()
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine(),
        "tests": tests(opts.junit),
        "benchmarks": {p.stem: json.loads(p.read_text()) for p in opts.bench if p.exists()},
    }
    counts: dict[str, int] = {}
    for t in results["tests"]:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    results["counts"] = counts
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "gpu-results.json").write_text(json.dumps(results, indent=2))
    lines = [f"# GPU results ({results['date']})", "",
             f"- commit: `{results['commit']}`", f"- device: {results['machine'].get('gpu', '')}",
             f"- CUDA driver: {results['machine'].get('cuda-driver', '')}, "
             f"cuda-bindings {results['machine'].get('cuda-bindings', '')}",
             "- tests: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "",
             "## Figures", ""]  # fmt: skip
    for name, figures in results["benchmarks"].items():
        for line in figures.get("summary", []):
            lines.append(f"- {name}: {line}")
    lines += ["", "## Tests", "", "| test | outcome | s | detail |", "| --- | --- | --- | --- |"]
    for t in results["tests"]:
        lines.append(f"| {t['test']} | {t['outcome']} | {t['seconds']:.2f} | {t['detail'].replace('|', '/')} |")
    (opts.out / "gpu-results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index("## Tests")]))
    failed = [t["test"] for t in results["tests"] if t["outcome"] in ("failed", "error")]
    for name in failed:
        print(f"FAILED {name}")
    return 1 if failed or not results["tests"] else 0


if __name__ == "__main__":
    sys.exit(main())
