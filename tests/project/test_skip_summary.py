"""The test command's last line names each missing tool and how many tests it skipped."""

from __future__ import annotations

import shutil
import subprocess
import sys

from paths import TESTS as HERE

TESTS = """
import pytest
from skips import needs, needs_all

@needs("no-such-compiler-19")
def test_a(): pass

@needs("no-such-compiler-19", "sh")
def test_b(): pass

@needs_all({"xxhash.h": False, "a C compiler": True})
def test_c(): pass

@pytest.mark.gpu
def test_d(): pass

@pytest.mark.skipif(True, reason="torch is installed here")
def test_e(): pass

def test_f():
    pytest.importorskip("no_such_module_for_the_summary")

def test_g(): pass
"""


def test_the_run_ends_with_one_line_counting_skips_per_missing_tool(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(HERE / "skips.py", tmp_path / "skips.py")
    (tmp_path / "test_tools.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    # sh is on PATH, so only the missing compiler is named for test_b; the GPU test is counted apart.
    assert last.startswith("skipped for missing tools: no-such-compiler-19 (2), ")
    assert "python:no_such_module_for_the_summary (1)" in last and "xxhash.h (1)" in last
    assert "a C compiler" not in last and "sh (" not in last
    assert ("; needs a GPU: 1" in last or "; needs a GPU: 0" in last) and "other skips: 1" in last  # 0 on a GPU machine
