"""The tests mirror the packages (docs/design/interfaces.md, "Where the tests live")."""

from __future__ import annotations

import subprocess
import sys

from paths import ROOT, TESTS


def test_no_test_module_sits_at_the_top_of_tests():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, (
        f"{loose}: put each in the folder of the package it tests (tests/core/..., "
        "tests/plugins/<family>/, tests/backends/<name>/, ...; docs/design/interfaces.md)"
    )


def test_test_file_names_are_unique_across_folders():
    # pytest's prepend import mode imports a test module by its file name.
    seen: dict[str, str] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        if "data" in path.relative_to(TESTS).parts or (path.parent / "__init__.py").exists():
            continue
        other = seen.setdefault(path.name, str(path.relative_to(TESTS)))
        assert other == str(path.relative_to(TESTS)), f"{path.name} is both {other} and {path.relative_to(TESTS)}"


def test_tests_gpu_holds_only_gpu_tests():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not gpu",
            "tests/gpu",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # exit code 5: nothing collected once the gpu-marked tests are deselected
    assert proc.returncode == 5, "tests under tests/gpu without the gpu marker:\n" + proc.stdout[-3000:]
    assert "deselected" in proc.stdout, proc.stdout[-3000:]
