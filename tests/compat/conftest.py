"""A host-backend recording of examples/saxpy, captured once for the compatibility tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_mneme(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mneme", *args], capture_output=True, text=True, cwd=cwd, timeout=600, check=False
    )


@pytest.fixture(scope="session")
def saxpy_db(tmp_path_factory) -> Path:
    """The database of one recorded saxpy launch (grid 64, block 256), captured on the host backend."""
    out = tmp_path_factory.mktemp("saxpy")
    done = run_mneme("capture", str(ROOT / "examples" / "saxpy" / "capture.yaml"), "-o", str(out), "--backend", "host")
    assert done.returncode == 0, done.stderr
    (db,) = out.glob("*.json")
    return db
