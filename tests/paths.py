"""Where the tests' files are, for tests in any folder under tests/ (docs/design/interfaces.md, "Where the tests live")."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: the shared helpers, conftest.py, data/
DATA = TESTS / "data"
ROOT = TESTS.parent  # the repository
