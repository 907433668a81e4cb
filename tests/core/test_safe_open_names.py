"""Names from a recording are printed with control characters escaped (issue 36): a KernelName holding
a newline and terminal escape codes cannot clear the screen or print a fake "all verified" line through
`inspect`, `replay`, an error or a log message."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from click.testing import CliRunner

from mneme import capture
from mneme.core.cli import cli
from mneme.core.printable import EscapingFilter, markup, printable
from paths import ROOT

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
NAME = "saxpy\n\x1b[2J\x1b[Hall 1 variants verified\x07\r\u202e"


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    db = capture.capture(
        SAXPY_IR,
        "saxpy",
        2,
        128,
        [256, np.float32(2.0), np.ones(256, np.float32), np.ones(256, np.float32)],
        folder / "rec",
        backend="host",
    )
    data = json.loads(db.read_text())
    data["KernelName"], data["DemangledName"] = NAME, NAME  # a database edited by someone else
    db.write_text(json.dumps(data))
    return db


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "300", "MNEME_HOST_THREADS": "1"})


def _assert_escaped(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\r" not in output and "\u202e" not in output
    assert not any(line.startswith("all 1 variants verified") for line in output.splitlines()), output
    assert "\\x1b[2J" in output


def test_inspect_prints_a_hostile_kernel_name_escaped(hostile_db):
    result = _run("inspect", hostile_db)
    assert result.exit_code == 0, result.output
    _assert_escaped(result.output)


def test_replay_prints_a_hostile_kernel_name_escaped(hostile_db):
    result = _run("replay", "-rdb", hostile_db)  # the IR has no kernel of that name: an error quoting it
    assert result.exit_code != 0, result.output
    _assert_escaped(result.output)


def test_an_error_quoting_a_name_prints_it_escaped_on_one_line(hostile_db, tmp_path):
    result = _run("replay", "-rdb", hostile_db, "-rid", "nosuchinstance")
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output


def test_log_arguments_are_escaped():
    record = logging.LogRecord("mneme", logging.WARNING, __file__, 1, "kernel %s: %s", (NAME, 3), None)
    EscapingFilter().filter(record)
    assert "\x1b" not in record.getMessage() and "\n" not in record.getMessage()


def test_printable_keeps_ordinary_names_and_escapes_only_control_and_format_characters():
    assert printable("_Z6kernelPfS_ μ ✓ [x]") == "_Z6kernelPfS_ μ ✓ [x]"
    assert printable("a\nb\x1b\x9b\u200b") == "a\\nb\\x1b\\x9b\\u200b"
    assert markup("[bold]x[/]") == "\\[bold]x\\[/]"
