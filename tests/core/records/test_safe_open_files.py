"""A recording from someone else never makes clean, copy or move lose data, hang or show a traceback (issue 24)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from test_records_fixtures import make_recording, tree

from mneme.core.cli import cli
from mneme.core.records import RecordedExecution


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "200"})


def _no_traceback(result):
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


def test_move_onto_symlinks_to_the_source_files_is_refused_and_keeps_the_data(tmp_path):
    rec = make_recording(tmp_path / "db")
    dest = tmp_path / "dest"
    for f in rec.referenced_files():
        target = dest / f.relative_to(rec.folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(f)
    before = {f: f.read_bytes() for f in rec.referenced_files()}
    result = run("move", rec.path, dest)
    _no_traceback(result)
    assert result.exit_code == 2, result.output
    assert "symbolic link" in result.output
    assert {f: f.read_bytes() for f in before} == before
    assert RecordedExecution.from_json(rec.path).select()


def test_clean_refuses_a_database_listing_another_kernels_database_under_modules(tmp_path):
    victim = make_recording(tmp_path / "db", sizes=(64,))
    other = make_recording(tmp_path / "other", sizes=(32,))
    # a second kernel's database in the same folder, under its own static hash
    attacker_path = victim.folder / "attacker.json"
    doc = json.loads(other.path.read_text())
    doc["StaticHash"] = "attacker"
    doc["Modules"] = doc["Modules"] + [victim.path.name]
    for inst in doc["instances"].values():
        for key in ("Prologue", "Epilogue"):
            src = other.folder / inst[key]
            dst = victim.folder / ("attacker-" + src.name)
            dst.write_bytes(src.read_bytes())
            inst[key] = dst.name
    (victim.folder / "ir" / "scale_template.ll").exists()
    attacker_path.write_text(json.dumps(doc))
    result = run("clean", attacker_path)
    _no_traceback(result)
    assert result.exit_code != 0
    assert victim.path.exists() and RecordedExecution.from_json(victim.path)


@pytest.mark.parametrize("field", ["Modules", "Epilogue"])
def test_a_database_naming_itself_as_one_of_its_files_is_a_format_error(tmp_path, field):
    rec = make_recording(tmp_path / "db")
    doc = json.loads(rec.path.read_text())
    if field == "Modules":
        doc["Modules"].append(rec.path.name)
    else:
        next(iter(doc["instances"].values()))["Epilogue"] = rec.path.name
    rec.path.write_text(json.dumps(doc))
    for command in (["inspect", rec.path], ["clean", rec.path], ["move", rec.path, tmp_path / "to"]):
        result = run(*command)
        _no_traceback(result)
        assert result.exit_code == 2 and "the database itself" in result.output, (command, result.output)
    assert rec.path.exists()


@pytest.mark.parametrize("command", ["clean", "move", "inspect"])
def test_a_fifo_named_like_a_database_next_to_a_good_one_neither_hangs_nor_breaks_the_command(tmp_path, command):
    rec = make_recording(tmp_path / "db")
    os.mkfifo(rec.folder / "zz.json")
    args = (
        [command, rec.path]
        + ([tmp_path / "to"] if command == "move" else [])
        + (["--json"] if command == "inspect" else [])
    )
    result = run(*args)
    _no_traceback(result)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("bad", ["[" * 100000, '{"SchemaVersion": 3, "KernelName": ' + "9" * 5000 + "}", "\xff\xfe"])
@pytest.mark.parametrize("command", ["clean", "move", "inspect"])
def test_a_bad_sibling_json_does_not_break_commands_on_a_good_database(tmp_path, command, bad):
    rec = make_recording(tmp_path / "db")
    (rec.folder / "zz.json").write_text(bad, encoding="latin-1")
    args = (
        [command, rec.path]
        + ([tmp_path / "to"] if command == "move" else [])
        + (["--json"] if command == "inspect" else [])
    )
    result = run(*args)
    _no_traceback(result)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"SchemaVersion": ' + "9" * 5000 + "}"])
def test_a_deeply_nested_or_huge_number_database_is_a_format_error(tmp_path, text):
    path = tmp_path / "x.json"
    path.write_text(text)
    result = run("inspect", path)
    _no_traceback(result)
    assert result.exit_code == 2 and "x.json" in result.output


def test_a_nul_byte_in_a_database_path_is_an_error_not_a_traceback(tmp_path):
    result = run("inspect", str(tmp_path / "a\0b.json"))
    _no_traceback(result)
    assert result.exit_code != 0


def test_an_unexpected_error_is_one_line_pointing_at_debug_and_exit_1(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "inspect", str(tmp_path / "a\udcff.json")],
        capture_output=True,
        text=True,
        timeout=120,
        errors="surrogateescape",
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr and len(lines) <= 2, proc.stderr
    result = CliRunner().invoke(cli, ["--debug", "inspect", str(tmp_path / "a\0b.json")])
    assert result.exit_code == 1 and isinstance(result.exception, ValueError)  # --debug: the real exception
    result = run("inspect", str(tmp_path / "a\0b.json"))
    assert result.exit_code == 1 and "run with --debug for the traceback" in result.output, result.output


@pytest.mark.parametrize("where", ["KernelName", "instance key"])
def test_a_lone_surrogate_in_the_database_is_a_format_error(tmp_path, where):
    rec = make_recording(tmp_path / "db")
    doc = json.loads(rec.path.read_text())
    if where == "KernelName":
        doc["KernelName"] = "k\ud800"
    else:
        doc["instances"] = {k + "\ud800": v for k, v in doc["instances"].items()}
    rec.path.write_text(json.dumps(doc))
    for args in (["inspect", rec.path], ["inspect", "--json", rec.path], ["replay", "-rdb", rec.path, "--json"]):
        result = run(*args)
        _no_traceback(result)
        assert result.exit_code == 2 and ("surrogate" in result.output or "instance key" in result.output), (
            result.output
        )


def test_copy_to_a_dangling_symlink_destination_is_refused(tmp_path):
    rec = make_recording(tmp_path / "db")
    dest = tmp_path / "dest"
    dest.symlink_to(tmp_path / "nowhere")
    result = run("copy", rec.path, dest)
    _no_traceback(result)
    assert result.exit_code == 2 and "dangling" in result.output
    before = tree(tmp_path / "db")
    assert before == tree(tmp_path / "db")


def test_huge_app_times_are_refused_when_the_database_is_read(tmp_path):
    rec = make_recording(tmp_path / "db")
    doc = json.loads(rec.path.read_text())
    next(iter(doc["instances"].values()))["AppTimes"] = [1e308] * 3
    rec.path.write_text(json.dumps(doc))
    result = run("replay", "-rdb", rec.path, "--json")
    _no_traceback(result)
    assert result.exit_code == 2 and "AppTimes" in result.output


def test_replay_refuses_a_database_whose_args_disagree_with_the_prologue(tmp_path):
    rec = make_recording(tmp_path / "db")
    doc = json.loads(rec.path.read_text())
    inst = next(iter(doc["instances"].values()))
    args = bytearray.fromhex(inst["Args"])
    args[-1] ^= 0x01  # the element count n
    inst["Args"] = args.hex()
    rec.path.write_text(json.dumps(doc))
    result = run("replay", "-rdb", rec.path, "--backend", "host", "--json")
    _no_traceback(result)
    assert result.exit_code != 0 and "disagree" in result.output, result.output


def test_replay_refuses_a_static_hash_that_matches_neither_the_file_nor_the_snapshots(tmp_path):
    rec = make_recording(tmp_path / "db")
    doc = json.loads(rec.path.read_text())
    doc["StaticHash"] = "0123456789abcdef"
    rec.path.write_text(json.dumps(doc))
    result = run("replay", "-rdb", rec.path, "--backend", "host", "--json")
    _no_traceback(result)
    assert result.exit_code != 0 and "0123456789abcdef" in result.output and "recorded for" in result.output, (
        result.output
    )
