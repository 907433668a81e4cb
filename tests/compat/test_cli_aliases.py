"""The original Mneme's command-line spellings are accepted as aliases."""

from __future__ import annotations

import json

from mneme.compat.cli_aliases import rewrite
from .conftest import run_mneme


def test_record_options_map_and_the_application_arguments_stay():
    argv = ["-v", "record", "--record-db-dir", "out", "--per-kernel-max-recordings=3", "-vass", "8",
            "--per-kernel-skip-recordings", "2", "--", "./app", "--record-db-dir", "-vass"]  # fmt: skip
    assert rewrite(argv) == ["-v", "record", "--rdb", "out", "--max-recordings=3", "--skip", "2", "--", "./app",
                             "--record-db-dir", "-vass"]  # fmt: skip


def test_tune_options_map_and_flags_without_meaning_here_drop():
    argv = ["tune", "-rdb", "db.json", "--space-preset", "quick", "--results-dir", "r", "--no-proteus-output"]
    assert rewrite(argv) == ["tune", "-rdb", "db.json", "--space", "quick", "--results", "r"]


def test_other_commands_and_our_own_spellings_are_untouched():
    assert rewrite(["inspect", "--record-db-dir", "x"]) == ["inspect", "--record-db-dir", "x"]
    assert rewrite(["replay", "-rdb", "x", "--iterations", "2"]) == ["replay", "-rdb", "x", "--iterations", "2"]
    assert rewrite([]) == []


def test_replay_runs_with_the_original_spellings(saxpy_db):
    done = run_mneme("replay", "--record-database", str(saxpy_db), "-cm", "serial", "--json", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["verified"] is True
