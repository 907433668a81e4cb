"""The GPU results file (benchmarks/gpu/report.py) carries each check's one line, such as `mneme record`
from the installed wheels (scripts/gpu/installed-record), written on the GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paths import ROOT

JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1">
<testcase classname="tests.gpu.test_x" name="test_y" time="0.5"/></testsuite></testsuites>"""


def _report(tmp_path, *checks: Path) -> subprocess.CompletedProcess:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    args = [a for check in checks for a in ("--check", str(check))]
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu" / "report.py"),
            "--junit",
            str(junit),
            *args,
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )


def test_a_check_is_one_line_of_the_results_and_an_entry_of_their_json(tmp_path):
    check = tmp_path / "installed-record.json"
    check.write_text(
        json.dumps(
            {
                "check": "installed-record",
                "outcome": "passed",
                "detail": "1 database(s), 3 instance(s) replayed verified",
            }
        )
    )
    proc = _report(tmp_path, check)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "out" / "gpu-results.md").read_text()
    assert "- mneme record from the installed wheels: passed (1 database(s), 3 instance(s) replayed verified)" in text
    data = json.loads((tmp_path / "out" / "gpu-results.json").read_text())
    assert data["checks"] == [json.loads(check.read_text())]


def test_a_failed_or_unreadable_check_fails_the_report_but_it_is_written(tmp_path):
    failed = tmp_path / "installed-record.json"
    failed.write_text(json.dumps({"check": "installed-record", "outcome": "failed", "detail": "mneme record exited 1"}))
    broken = tmp_path / "other.json"
    broken.write_text("{")
    proc = _report(tmp_path, failed, broken)
    assert proc.returncode == 1
    text = (tmp_path / "out" / "gpu-results.md").read_text()
    assert "- mneme record from the installed wheels: failed (mneme record exited 1)" in text
    assert "- other: failed (unreadable result other.json" in text
    assert "FAILED installed-record" in proc.stdout
