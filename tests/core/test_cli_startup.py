"""`mneme --help` lists every command without loading plugins (issue 27, start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("llvmlite", "numpy", "optuna", "mneme.core.build", "mneme.core.ir")

_PROBE = """
import json, sys
from mneme.core.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("llvmlite", "numpy", "optuna")
                        or m in ("mneme.core.build", "mneme.core.ir"))), file=sys.stderr)
"""


def _help(cache_dir) -> tuple[str, list[str]]:
    env = dict(os.environ, MNEME_CACHE_DIR=str(cache_dir), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return proc.stdout, json.loads(proc.stderr.strip().splitlines()[-1])


def test_help_after_the_first_imports_no_heavy_module(tmp_path):
    first, _ = _help(tmp_path)
    second, heavy = _help(tmp_path)
    assert heavy == []
    assert second == first
    for name in ("capture", "replay", "tune", "plugins", "ir", "results"):
        assert f"\n  {name} " in second


def test_index_follows_a_changed_command_source(tmp_path):
    _help(tmp_path)
    index_path = tmp_path / "command-index.json"
    data = json.loads(index_path.read_text())
    data["commands"]["tune"] = "a stale line"
    path = next(p for p in data["files"] if p.endswith("tune_commands.py"))
    data["files"][path] -= 1  # as if the file changed after the index was written
    index_path.write_text(json.dumps(data))
    text, _ = _help(tmp_path)
    assert "a stale line" not in text
    assert "Autotune one recorded kernel launch" in text


def test_index_is_used_when_valid(tmp_path):
    _help(tmp_path)
    index_path = tmp_path / "command-index.json"
    data = json.loads(index_path.read_text())
    data["commands"]["tune"] = "from the index"
    index_path.write_text(json.dumps(data))
    text, _ = _help(tmp_path)
    assert "from the index" in text
