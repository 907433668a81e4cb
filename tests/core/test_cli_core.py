"""Specification of the core commands: inspect, clean, copy, move, config."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from click.testing import CliRunner
from test_records_fixtures import KERNEL, make_recording, tree

from mneme.core.cli import cli
from mneme.core.errors import FormatError
from mneme.core.records import RecordedExecution


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    if ok:
        assert result.exit_code == 0, result.output
    return result


def escape_outside(rec: RecordedExecution, tmp_path) -> None:
    """Make the database name a module outside its folder (a real file, so only the path is wrong)."""
    stray = tmp_path / "stray.ll"
    stray.write_text("; outside the recording\n")
    data = json.loads(rec.path.read_text())
    data["Modules"] = ["../stray.ll"]
    rec.path.write_text(json.dumps(data))


def test_inspect_summarizes_kernel_code_arguments_instances_and_snapshots(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000))
    out = run("inspect", str(rec.path)).output
    for text in (
        KERNEL,
        "void scale<float>(float*, float, int)",
        "cuda / sm_90",
        "LLVM IR, 1 module(s)",
        "ir/scale_template.ll",
        "0x7f0000000000 .. 0x7f0000100000",
        "instances (2)",
        "(2, 1, 1)",
        "(8, 1, 1)",
        "(128, 1, 1)",
        "pointer",
        "float",
    ):
        assert text in out, text
    for key in rec:
        assert key in out
    prologue_size = rec.select(next(iter(rec))).prologue_path.stat().st_size
    assert f"{prologue_size / 1024:.1f} KiB" in out
    assert "1.0 KiB, 1 region, raw" in out and "3.9 KiB, 1 region, diff" in out  # 256 and 1000 floats
    assert "f32 rel 1e-06 norm Linf" in out  # the epilogue's verification policy
    assert "arg0=0x7f0000000000 arg1=2 arg2=256" in out and "arg2=1000" in out  # recorded argument values


def test_inspect_says_which_instances_were_launched_cooperatively_or_with_clusters(tmp_path):
    rec = make_recording(tmp_path, sizes=(256, 1000))
    coop, clustered = list(rec)
    rec[coop].cooperative = True
    rec[clustered].cluster_dim = (2, 1, 1)
    rec.save()
    out = run("inspect", str(rec.path)).output
    assert "(2, 1, 1), cooperative" in out and "(8, 1, 1), clusters (2, 1, 1)" in out
    data = json.loads(run("inspect", "--json", str(rec.path)).output)
    assert data[0]["database"]["instances"][coop]["Cooperative"] is True
    assert data[0]["database"]["instances"][clustered]["ClusterDims"] == {"x": 2, "y": 1, "z": 1}


def test_inspect_json_holds_the_database_and_snapshot_summaries(tmp_path):
    rec = make_recording(tmp_path, sizes=(64, 128))
    data = json.loads(run("inspect", "--json", str(tmp_path)).output)  # a folder stands for its databases
    assert len(data) == 1 and data[0]["path"] == str(rec.path)
    assert data[0]["database"] == json.loads(rec.path.read_text())
    for key, inst in rec.items():
        sides = data[0]["snapshots"][key]
        assert sides["prologue"]["file_size"] == inst.prologue_path.stat().st_size
        assert sides["epilogue"]["file"] == inst.epilogue_path.name
        assert sides["prologue"]["regions"] == 1 and sides["prologue"]["args_size"] == 16
        assert sides["prologue"]["bytes"] == 4 * struct.unpack("<i", inst.arg_values[2])[0]
        assert sides["epilogue"]["encodings"] == ["diff"]
        assert sides["epilogue"]["policies"] == ["f32 rel 1e-06 norm Linf"]


def test_inspect_of_a_folder_without_databases_says_so(tmp_path):
    (tmp_path / "notes.json").write_text("{}")
    result = run("inspect", str(tmp_path), ok=False)
    assert result.exit_code != 0 and "holds no recording database" in result.output


def test_clean_deletes_only_what_the_database_references(tmp_path):
    keep = make_recording(tmp_path / "db", sizes=(64,))
    gone = RecordedExecution.from_json(keep.path)
    # A second kernel's database in the same folder shares the IR file and has its own snapshots.
    gone.static_hash = "second"
    inst = gone.select()
    gone.path = tmp_path / "db" / "second.json"
    (tmp_path / "db" / "other").mkdir()
    for name in ("p.mneme", "e.mneme"):
        (tmp_path / "db" / "other" / name).write_bytes(b"snapshot bytes")
    inst.prologue_file, inst.epilogue_file = "other/p.mneme", "other/e.mneme"
    gone.save()
    (tmp_path / "db" / "notes.txt").write_text("mine")
    before = tree(tmp_path / "db")

    dry = run("clean", "--dry-run", str(gone.path)).output
    assert "1 database(s), 2 file(s) to remove" in dry and "other/p.mneme" in dry
    assert tree(tmp_path / "db") == before

    out = run("clean", str(gone.path)).output
    assert "1 database(s), 2 file(s) removed, 1 shared file(s) kept" in out
    after = tree(tmp_path / "db")
    assert set(before) - set(after) == {"second.json", "other/p.mneme", "other/e.mneme"}
    assert not (tmp_path / "db" / "other").exists()  # emptied sub-folders go too
    assert RecordedExecution.from_json(keep.path) == keep  # the other database is intact

    run("clean", str(keep.path))
    assert tree(tmp_path / "db") == {"notes.txt": b"mine"}


def test_copy_copies_every_database_with_its_files_and_keeps_the_layout(tmp_path):
    a = make_recording(tmp_path / "a", sizes=(64, 128))
    b = make_recording(tmp_path / "b", sizes=(32,), snapshot_dir="snaps")
    b_path = b.path.rename(tmp_path / "b" / "other.json")  # two databases, two names
    before_a, before_b = tree(tmp_path / "a"), tree(tmp_path / "b")
    run("copy", str(a.path), str(b_path), str(tmp_path / "dest" / "nested"))
    dest = tmp_path / "dest" / "nested"
    copied_a = RecordedExecution.from_json(dest / a.path.name)
    copied_b = RecordedExecution.from_json(dest / "other.json")
    assert copied_a.to_dict() == a.to_dict() and len(copied_b) == 1
    assert copied_b.select().prologue_path.parent == dest / "snaps"
    assert tree(tmp_path / "a") == before_a and tree(tmp_path / "b") == before_b
    for rec, copy in ((a, copied_a), (b, copied_b)):
        for inst, inst_copy in zip(rec.values(), copy.values()):
            assert inst_copy.prologue_path.read_bytes() == inst.prologue_path.read_bytes()
    # Copying again onto identical files is fine; nothing is duplicated.
    run("copy", str(a.path), str(dest))
    assert tree(dest)[a.path.name] == (dest / a.path.name).read_bytes()


def test_move_moves_the_files_and_leaves_the_source_folder_empty(tmp_path):
    rec = make_recording(tmp_path / "src", sizes=(64, 128))
    files = {p.relative_to(tmp_path / "src"): p.read_bytes() for p in rec.referenced_files()}
    run("move", str(rec.path), str(tmp_path / "dst"))
    assert tree(tmp_path / "src") == {}
    moved = RecordedExecution.from_json(tmp_path / "dst" / rec.path.name)
    assert {p.relative_to(tmp_path / "dst"): p.read_bytes() for p in moved.referenced_files()} == files


@pytest.mark.parametrize("command", ["clean", "copy", "move"])
def test_database_pointing_outside_its_folder_is_refused_and_nothing_changes(tmp_path, command):
    rec = make_recording(tmp_path / "db")
    escape_outside(rec, tmp_path)
    before = tree(tmp_path)
    args = [command, str(rec.path)] + ([str(tmp_path / "dest")] if command != "clean" else [])
    result = run(*args, ok=False)
    assert result.exit_code == 2  # a malformed database is invalid input (issue 27)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert "Modules[0]" in lines[0] and "leaves the database's folder" in lines[0]
    assert tree(tmp_path) == before and not (tmp_path / "dest").exists()


@pytest.mark.parametrize("command", ["copy", "move"])
def test_destination_that_is_a_file_is_refused_and_nothing_changes(tmp_path, command):
    rec = make_recording(tmp_path / "db")
    target = tmp_path / "target"
    target.write_text("a file")
    before = tree(tmp_path)
    result = run(command, str(rec.path), str(target), ok=False)
    assert result.exit_code == 2 and "is a file" in result.output
    assert tree(tmp_path) == before


def test_copy_refuses_to_overwrite_a_different_file_and_changes_nothing(tmp_path):
    rec = make_recording(tmp_path / "db")
    dest = tmp_path / "dest"
    (dest / "ir").mkdir(parents=True)
    (dest / "ir" / "scale_template.ll").write_text("; someone else's IR\n")
    before = tree(tmp_path)
    result = run("move", str(rec.path), str(dest), ok=False)
    assert "already exists and differs" in result.output
    assert tree(tmp_path) == before


def test_debug_shows_the_traceback_instead_of_one_line(tmp_path):
    rec = make_recording(tmp_path / "db")
    escape_outside(rec, tmp_path)
    result = CliRunner().invoke(cli, ["--debug", "clean", str(rec.path)])
    assert isinstance(result.exception, FormatError)


def test_config_shows_cache_folder_environment_and_tools(tmp_path):
    result = CliRunner().invoke(cli, ["config", "--json"], env={"MNEME_CACHE_DIR": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    config = json.loads(result.output)
    assert config["cache_dir"] == str(tmp_path / "cache") and config["cache_usage"] == "not created yet"
    assert config["environment"]["MNEME_CACHE_DIR"]["value"] == str(tmp_path / "cache")
    assert config["tools"]["clang-19"].endswith("clang-19")
    assert isinstance(config["backends"], dict)
    text = run("config").output
    assert "cache dir" in text and "MNEME_CACHE_DIR" in text


def test_inspect_reports_an_unreadable_snapshot_and_fails(tmp_path):
    rec = make_recording(tmp_path)
    epilogue = rec.select().epilogue_path
    epilogue.write_bytes(epilogue.read_bytes()[:-40])  # truncated
    result = run("inspect", str(rec.path), ok=False)
    assert result.exit_code == 1
    assert "unreadable" in result.output and epilogue.name in result.output


def test_copy_refuses_two_different_files_for_one_destination_and_changes_nothing(tmp_path):
    a = make_recording(tmp_path / "a")
    b = make_recording(tmp_path / "b", sizes=(32,))
    b.path.rename(tmp_path / "b" / "other.json")
    (tmp_path / "b" / "ir" / "scale_template.ll").write_text(
        (tmp_path / "b" / "ir" / "scale_template.ll").read_text() + "; edited\n"
    )
    before = tree(tmp_path)
    result = run("copy", str(a.path), str(tmp_path / "b" / "other.json"), str(tmp_path / "dest"), ok=False)
    assert result.exit_code == 2 and "with different contents" in result.output
    assert tree(tmp_path) == before and not (tmp_path / "dest").exists()


def test_python_dash_m_mneme_runs_the_same_command(tmp_path):
    rec = make_recording(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "inspect", str(rec.path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert KERNEL in proc.stdout
