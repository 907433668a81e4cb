"""Routes an attacker tries next to make clean, move or copy lose data (issue 36, tried on main): a
recording's file or folder replaced by a symbolic link to something outside it, a database naming a
path that is absolute or climbs out with `..`, and a file another database shares under another
spelling of its path. Each is refused naming the file and field, or keeps what another database needs."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from test_records_fixtures import make_recording, tree

from mneme.core.cli import cli
from mneme.core.records import RecordedExecution

COMMANDS = ["clean", "move", "copy"]


def run(command, rec, dest):
    args = [command, str(rec.path)] + ([str(dest)] if command != "clean" else [])
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("command", COMMANDS)
def test_a_recording_file_that_is_a_symlink_out_of_the_folder_is_refused_and_its_target_kept(tmp_path, command):
    rec = make_recording(tmp_path / "rec")
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = sorted(rec.referenced_files())[-1]
    victim = outside / snapshot.name
    shutil.copyfile(snapshot, victim)
    snapshot.unlink()
    snapshot.symlink_to(victim)
    before = tree(outside)
    result = run(command, rec, tmp_path / "to")
    assert result.exit_code == 2, result.output
    assert (
        "leads outside the database's folder through a symbolic link" in result.output
        and "field 'instances." in result.output
    )
    assert tree(outside) == before and rec.path.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_recording_folder_that_is_a_symlink_out_of_the_folder_is_refused_and_its_files_kept(tmp_path, command):
    rec = make_recording(tmp_path / "rec")
    outside = tmp_path / "outside"
    shutil.move(str(rec.folder / "ir"), outside)
    (rec.folder / "ir").symlink_to(outside, target_is_directory=True)
    (outside / "unrelated.txt").write_text("the user's")
    before = tree(outside)
    result = run(command, rec, tmp_path / "to")
    assert result.exit_code == 2, result.output
    assert "field 'Modules[0]'" in result.output and "symbolic link" in result.output
    assert tree(outside) == before


@pytest.mark.parametrize("command", [*COMMANDS, "inspect"])
@pytest.mark.parametrize(
    "field, path",
    [
        ("Modules", "ABSOLUTE"),
        ("Modules", "../victim.ll"),
        ("Prologue", "ABSOLUTE"),
        ("Epilogue", "snapshots/../../victim.ll"),
    ],
)
def test_a_database_path_that_is_absolute_or_climbs_out_is_a_format_error_and_touches_nothing(
    tmp_path, command, field, path
):
    rec = make_recording(tmp_path / "rec")
    victim = tmp_path / "victim.ll"
    victim.write_text("the user's file")
    path = str(victim) if path == "ABSOLUTE" else path
    doc = json.loads(rec.path.read_text())
    if field == "Modules":
        doc["Modules"] = [path]
    else:
        next(iter(doc["instances"].values()))[field] = path
    rec.path.write_text(json.dumps(doc))
    before = tree(tmp_path)
    result = (
        CliRunner().invoke(cli, ["inspect", str(rec.path)])
        if command == "inspect"
        else run(command, rec, tmp_path / "to")
    )
    assert result.exit_code == 2, result.output
    assert "field '" in result.output and (
        "is absolute" in result.output or "leaves the database's folder" in result.output
    )
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["clean", "move"])
@pytest.mark.parametrize("spelling", ["./ir/scale_template.ll", "ir//scale_template.ll", "ir/./scale_template.ll"])
def test_a_file_shared_under_another_spelling_of_its_path_is_kept(tmp_path, command, spelling):
    rec = make_recording(tmp_path / "rec")
    doc = json.loads(rec.path.read_text())
    doc["StaticHash"], doc["Modules"] = "other", [spelling]
    other = rec.folder / "other.json"
    other.write_text(json.dumps(doc))
    result = run(command, rec, tmp_path / "to")
    assert result.exit_code == 0, result.output
    assert all(f.exists() for f in RecordedExecution.from_json(other).referenced_files())


@pytest.mark.parametrize("spelling", ["./ir/scale_template.ll", "ir//scale_template.ll"])
def test_a_file_a_database_in_a_subfolder_needs_is_kept_under_another_spelling(tmp_path, spelling):
    sub = make_recording(tmp_path / "rec" / "sub")
    doc = json.loads(sub.path.read_text())
    doc["StaticHash"], doc["Modules"] = "top", ["sub/" + spelling]
    doc["instances"] = {
        k: {**v, "Prologue": "sub/" + v["Prologue"], "Epilogue": "sub/" + v["Epilogue"]}
        for k, v in doc["instances"].items()
    }
    top = tmp_path / "rec" / "top.json"
    top.write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["clean", str(top)])
    assert result.exit_code == 0, result.output
    assert not top.exists()
    assert all(f.exists() for f in RecordedExecution.from_json(sub.path).referenced_files())


def test_move_onto_a_different_database_of_the_same_name_is_refused_and_keeps_both(tmp_path):
    rec = make_recording(tmp_path / "rec")
    dest = tmp_path / "dest"
    other = make_recording(dest, sizes=(64,))
    other.path.rename(dest / rec.path.name)  # another recording's database under this one's name
    before_src, before_dest = tree(rec.folder), tree(dest)
    result = run("move", rec, dest)
    assert result.exit_code == 2 and "already exists and differs" in result.output, result.output
    assert tree(rec.folder) == before_src and tree(dest) == before_dest


@pytest.mark.parametrize("command", ["move", "copy"])
@pytest.mark.parametrize("how", ["symlink", "dot"])
def test_move_or_copy_onto_the_source_folder_under_another_name_is_refused_and_keeps_it(tmp_path, command, how):
    rec = make_recording(tmp_path / "rec")
    if how == "symlink":
        dest = tmp_path / "link"
        dest.symlink_to(rec.folder, target_is_directory=True)
    else:
        dest = f"{rec.folder}/./"
    before = tree(rec.folder)
    result = run(command, rec, dest)
    assert result.exit_code == 2 and "is already in" in result.output, result.output
    assert tree(rec.folder) == before
