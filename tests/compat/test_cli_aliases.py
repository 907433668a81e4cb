"""The original Mneme's command-line spellings are accepted as aliases."""

from __future__ import annotations

import json
from pathlib import Path
import sys

import pytest

from mneme.compat.cli_aliases import rewrite
from mneme.core.errors import UsageError
from .conftest import run_mneme


def test_record_options_map_and_the_application_arguments_stay():
    argv = [
        "-v",
        "record",
        "--record-db-dir",
        "out",
        "--per-kernel-max-recordings=3",
        "-vass",
        "8",
        "--per-kernel-skip-recordings",
        "2",
        "--",
        "./app",
        "--record-db-dir",
        "-vass",
    ]
    assert rewrite(argv) == [
        "-v",
        "record",
        "--rdb",
        "out",
        "--max-recordings=3",
        "--skip",
        "2",
        "--",
        "./app",
        "--record-db-dir",
        "-vass",
    ]


def test_tune_options_both_tuners_share_map_to_mnemes_spellings():
    argv = ["tune", "-rdb", "db.json", "--space-preset", "quick", "--results-dir", "r"]
    assert rewrite(argv) == ["tune", "-rdb", "db.json", "--space", "quick", "--results", "r"]


def test_an_option_only_the_original_has_runs_the_original_tuner_on_the_same_words():
    argv = ["tune", "-rdb", "db.json", "--space-preset", "quick", "--results-dir", "r", "--no-proteus-output"]
    assert rewrite(argv) == ["tune-original", *argv[1:]]
    assert rewrite(["tune", "--layout", "original", "-rdb", "d.json"]) == ["tune-original", "-rdb", "d.json"]
    assert rewrite(["tune", "--layout=both", "-rdb", "d.json"]) == ["tune", "--layout=both", "-rdb", "d.json"]


def test_other_commands_and_our_own_spellings_are_untouched():
    assert rewrite(["inspect", "--record-db-dir", "x"]) == ["inspect", "--record-db-dir", "x"]
    assert rewrite(["replay", "-rdb", "x", "--iterations", "2"]) == ["replay", "-rdb", "x", "--iterations", "2"]
    assert rewrite([]) == []


def test_replay_runs_with_the_original_spellings(saxpy_db):
    done = run_mneme("replay", "--record-database", str(saxpy_db), "-cm", "serial", "--json", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["verified"] is True


def test_the_original_short_spellings_of_record_and_replay():
    assert rewrite(["record", "-mr", "2", "-sr", "1", "-rr", "all", "--", "./app", "-mr"]) == [
        "record",
        "--max-recordings",
        "2",
        "--skip",
        "1",
        "--record-ranks",
        "all",
        "--",
        "./app",
        "-mr",
    ]
    assert rewrite(
        [
            "replay",
            "-record-id",
            "ab",
            "-gidx",
            "8",
            "-bidz",
            "2",
            "-shem",
            "0",
            "-slb",
            "-sdims",
            "--min-threads-per-block",
            "2",
            "-co",
            "1",
            "-it",
            "4",
            "-ol",
            "x.ll",
        ]
    ) == [
        "replay",
        "--record-id",
        "ab",
        "--grid-dim-x",
        "8",
        "--block-dim-z",
        "2",
        "--shared-mem",
        "0",
        "--set-launch-bounds",
        "--specialize-dims",
        "--min-blocks-per-sm",
        "2",
        "--codegen-opt",
        "1",
        "--iterations",
        "4",
        "--output-ll",
        "x.ll",
    ]


def test_tune_values_translate_for_mnemes_tuner():
    argv = [
        "tune",
        "--study-name",
        "s",
        "--optuna-storage",
        "sqlite:///t.db",
        "--sampler",
        "tpe",
        "--workers",
        "2",
        "--sampler=grid",
    ]
    assert rewrite(argv) == [
        "tune",
        "--study",
        "s",
        "--storage",
        "sqlite:///t.db",
        "--sampler",
        "optuna:tpe",
        "--devices",
        "0,1",
        "--sampler=exhaustive",
    ]


def test_an_original_tune_option_with_mnemes_layout_is_refused_with_the_way():
    with pytest.raises(UsageError, match="--metric belong to the original Mneme's tuner; use --layout original"):
        rewrite(["tune", "--metric", "median", "--layout", "mneme"])
    done = run_mneme("tune", "--record-database", "x.json", "--max-threads-range", "64:256", "--layout", "both")
    assert done.returncode == 2 and "--max-threads-range" in done.stderr


def test_replay_runs_with_the_original_short_spellings_and_positional_pipeline(saxpy_db, tmp_path):
    out = tmp_path / "variant.ll"
    done = run_mneme(
        "replay",
        "-rdb",
        str(saxpy_db),
        "-it",
        "1",
        "-gidx",
        "64",
        "-bidx",
        "256",
        "-co",
        "2",
        "-slb",
        "--min-threads-per-block",
        "1",
        "-ol",
        str(out),
        "--json",
        "default<O2>",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["result"]["verified"] is True and result["config"]["set_launch_bounds"] is True
    assert result["config"]["passes"] == "default<O2>" and "define" in out.read_text()


def test_tune_dry_run_shows_the_space_and_runs_nothing(saxpy_db, tmp_path):
    done = run_mneme(
        "tune",
        "--record-database",
        str(saxpy_db),
        "--space-preset",
        "quick",
        "--dry-run",
        "--results-dir",
        str(tmp_path / "r"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and not (tmp_path / "r").exists()


def test_config_prints_the_original_keys_for_build_systems():
    cc = run_mneme("config", "cc")
    (path,) = cc.stdout.split()  # one executable, for CC=$(mneme config cc)
    assert cc.returncode == 0 and "mneme.instrument.launcher" in open(path).read() and "clang" in open(path).read()
    assert run_mneme("config", "cflags").stdout == "\n"  # mneme-cc adds what recording needs
    assert run_mneme("config", "prefix").stdout.strip() == sys.prefix
    assert run_mneme("config", "version").stdout.strip()  # and Mneme's own keys
    cmakedir = run_mneme("config", "cmakedir")
    assert cmakedir.returncode == 0 and (Path(cmakedir.stdout.strip()) / "mnemeConfig.cmake").is_file()
