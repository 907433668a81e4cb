"""clean, copy and move never lose a recording: nested recordings, rollbacks, other file systems (issue 36)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_records_fixtures import make_recording, tree

from mneme.core.cli import cli
from mneme.core.records import RecordedExecution, files, journal


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    if ok:
        assert result.exit_code == 0, result.output
    return result


def nested(root: Path) -> tuple[RecordedExecution, RecordedExecution]:
    """`root/sub/<hash>.json`, a recording, and `root/top.json`, which names the same files as `sub/...`."""
    sub = make_recording(root / "sub", sizes=(64,))
    data = json.loads(sub.path.read_text())
    data["Modules"] = ["sub/" + m for m in data["Modules"]]
    for inst in data["instances"].values():
        inst["Prologue"], inst["Epilogue"] = "sub/" + inst["Prologue"], "sub/" + inst["Epilogue"]
    (root / "top.json").write_text(json.dumps(data))
    return RecordedExecution.from_json(root / "top.json"), sub


def test_clean_of_a_database_keeps_the_files_a_recording_in_a_subfolder_needs(tmp_path):
    top, sub = nested(tmp_path / "rec")
    out = run("clean", str(top.path)).output
    assert "1 database(s), 0 file(s) removed, 3 shared file(s) kept" in out
    assert not top.path.exists()
    assert RecordedExecution.from_json(sub.path) == sub  # every file still there


def test_clean_of_a_recording_in_a_subfolder_keeps_the_files_a_parent_folders_database_needs(tmp_path):
    top, sub = nested(tmp_path / "rec")
    run("clean", str(sub.path))
    assert not sub.path.exists()
    assert RecordedExecution.from_json(top.path) == top


def test_move_of_a_database_copies_the_files_a_recording_in_a_subfolder_needs_and_keeps_them(tmp_path):
    top, sub = nested(tmp_path / "rec")
    before = tree(tmp_path / "rec" / "sub")
    run("move", str(top.path), str(tmp_path / "dest"))
    assert tree(tmp_path / "rec" / "sub") == before
    moved = RecordedExecution.from_json(tmp_path / "dest" / "top.json")
    assert {f.relative_to(tmp_path / "dest").as_posix(): f.read_bytes() for f in moved.referenced_files()} == {
        "sub/" + k: v for k, v in before.items() if k != sub.path.name
    }


def test_clean_of_both_nested_databases_at_once_removes_every_file(tmp_path):
    top, sub = nested(tmp_path / "rec")
    run("clean", str(top.path), str(sub.path))
    assert tree(tmp_path / "rec") == {}


def test_a_database_naming_a_database_in_a_subfolder_as_a_file_is_refused(tmp_path):
    top, sub = nested(tmp_path / "rec")
    data = json.loads(top.path.read_text())
    data["Modules"].append("sub/" + sub.path.name)
    top.path.write_text(json.dumps(data))
    before = tree(tmp_path / "rec")
    result = run("clean", str(top.path), ok=False)
    assert result.exit_code == 2 and "never references a database" in result.output
    assert tree(tmp_path / "rec") == before


def _failing_final_check(monkeypatch):
    """The copied bytes differ from the source's (a disk that lost a write): only a fake reaches it."""
    real = files._same_content
    monkeypatch.setattr(files, "_same_content", lambda a, b: False if a.suffix == ".mneme" else real(a, b))


def test_a_move_that_fails_its_final_check_keeps_a_database_that_was_already_in_the_destination(tmp_path, monkeypatch):
    rec = make_recording(tmp_path / "src", sizes=(64,))
    run("copy", str(rec.path), str(tmp_path / "dest"))
    # the destination already holds the database; the snapshot files it names are removed there
    dest_db = tmp_path / "dest" / rec.path.name
    for f in RecordedExecution.from_json(dest_db).referenced_files():
        if f.suffix == ".mneme":
            f.unlink()
    before_src, before_dest = tree(tmp_path / "src"), tree(tmp_path / "dest")
    monkeypatch.setattr(os, "link", _no_link)  # copies, so the final check compares bytes
    _failing_final_check(monkeypatch)
    result = run("move", str(rec.path), str(tmp_path / "dest"), ok=False)
    assert "does not hold the bytes" in result.output
    assert tree(tmp_path / "src") == before_src
    assert tree(tmp_path / "dest") == before_dest  # the database that was there is still there


def test_a_copy_that_fails_midway_removes_only_the_files_and_folders_it_created(tmp_path, monkeypatch):
    rec = make_recording(tmp_path / "src", sizes=(64, 128))
    (tmp_path / "dest" / "snapshots").mkdir(parents=True)
    mine = tmp_path / "dest" / "snapshots" / "notes.txt"
    mine.write_text("mine")
    first = rec.referenced_files()[1]
    shutil.copy2(first, tmp_path / "dest" / "snapshots" / first.name)  # identical: already there, kept
    before = tree(tmp_path / "dest")
    copies = []

    def full_disk(src, out):  # the second file's copy finds the disk full, half-written
        if copies:
            out.write(b"half")
            raise OSError(errno.ENOSPC, "No space left on device", out.name)
        copies.append(out.name)
        return real_copy(src, out)

    real_copy = journal._copy_bytes
    monkeypatch.setattr(journal, "_copy_bytes", full_disk)
    result = run("copy", str(rec.path), str(tmp_path / "dest"), ok=False)
    assert "No space left on device" in result.output and copies
    assert tree(tmp_path / "dest") == before
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == ["snapshots"]  # ir/ was made, and removed


def test_a_file_that_appears_in_the_destination_while_copying_is_neither_replaced_nor_removed(tmp_path, monkeypatch):
    rec = make_recording(tmp_path / "src", sizes=(64,))
    snapshot = rec.referenced_files()[-1]
    theirs = tmp_path / "dest" / snapshot.relative_to(rec.folder)
    real = journal.Journal.make_folders

    def another_writer(self, folder):  # another process writes there between the plan and the copy
        real(self, folder)
        if folder == theirs.parent and not theirs.exists():
            theirs.write_bytes(b"another process's file")

    monkeypatch.setattr(journal.Journal, "make_folders", another_writer)
    result = run("copy", str(rec.path), str(tmp_path / "dest"), ok=False)
    assert result.exit_code == 2 and "appeared while copying" in result.output
    assert tree(tmp_path / "dest") == {theirs.relative_to(tmp_path / "dest").as_posix(): b"another process's file"}


def _no_link(src, dst, **kw):
    raise OSError(errno.EPERM, "Operation not permitted", str(src))


def test_a_move_onto_another_file_system_falls_back_to_copy_then_delete_when_linking_fails(tmp_path, monkeypatch):
    rec = make_recording(tmp_path / "src", sizes=(64,))
    before = tree(tmp_path / "src")

    def cross_device(src, dst, **kw):
        raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))

    monkeypatch.setattr(os, "link", cross_device)
    run("move", str(rec.path), str(tmp_path / "dest"))
    assert tree(tmp_path / "dest") == before
    assert tree(tmp_path / "src") == {}


def _move_and_check(src_root: Path, dest: Path) -> None:
    rec = make_recording(src_root, sizes=(64,))
    before = tree(src_root)
    run("move", str(rec.path), str(dest))
    assert tree(dest) == before and tree(src_root) == {}
    assert RecordedExecution.from_json(dest / rec.path.name).referenced_files()


def test_a_move_to_dev_shm_a_real_other_file_system_moves_every_file(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's temporary folder")
    dest = Path(os.path.realpath(shm)) / f"mneme-move-{os.getpid()}-{tmp_path.name}"
    try:
        _move_and_check(tmp_path / "src", dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


PRELUDE = """
import json, os, shutil, subprocess, sys
from pathlib import Path
sys.path[:0] = sys.argv[3].split(os.pathsep)
src, mnt = Path(sys.argv[1]), Path(sys.argv[2])
from click.testing import CliRunner
from mneme.core.cli import cli
db = next(src.glob("*.json"))
"""


def in_mount_namespace(script: str, src: Path, mnt: Path) -> subprocess.CompletedProcess:
    """Run `script` (after PRELUDE) in a private mount namespace: mounts it makes vanish with it."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(
            ["unshare", "-rm", "true"] if os.geteuid() else ["unshare", "-m", "true"], capture_output=True
        ).returncode
    ):
        pytest.skip("needs unshare and a private mount namespace (root, or user namespaces) to mount")
    mnt.mkdir()
    cmd = ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 else ["unshare", "-rm"]
    paths = os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(Path(__file__).parent), *sys.path])
    done = subprocess.run(
        [*cmd, sys.executable, "-c", PRELUDE + script, str(src), str(mnt), paths],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode and "mount" in done.stderr and "permission" in done.stderr.lower():
        pytest.skip(f"cannot mount here: {done.stderr.strip()[-200:]}")
    return done


def test_a_move_through_a_bind_mount_of_the_same_file_system_falls_back_to_copy_then_delete(tmp_path):
    """A bind mount shares the device number but refuses rename and link across it (EXDEV)."""
    rec = make_recording(tmp_path / "src", sizes=(64,))
    before = tree(tmp_path / "src")
    (tmp_path / "target").mkdir()
    done = in_mount_namespace(
        """
subprocess.run(["mount", "--bind", str(src.parent / "target"), str(mnt)], check=True)
r = CliRunner().invoke(cli, ["move", str(db), str(mnt / "moved")])
print(r.output)
sys.exit(r.exit_code)
""",
        tmp_path / "src",
        tmp_path / "mnt",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert tree(tmp_path / "target" / "moved") == before  # reached through the bind mount
    assert not rec.path.exists() and tree(tmp_path / "src") == {}


def test_a_move_onto_a_full_file_system_keeps_the_sources_and_the_database_already_there(tmp_path):
    """A real full disk (a 128 KiB tmpfs) fails the copy midway: the rollback removes only what the move made."""
    rec = make_recording(tmp_path / "src", sizes=(100_000,))  # a 400 KB prologue
    before = tree(tmp_path / "src")
    done = in_mount_namespace(
        """
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "none", str(mnt)], check=True)
(mnt / "dest").mkdir()
shutil.copyfile(db, mnt / "dest" / db.name)  # the same database is there already (its files are not)
r = CliRunner().invoke(cli, ["move", str(db), str(mnt / "dest")])
left = sorted(p.relative_to(mnt).as_posix() for p in mnt.rglob("*"))
print(json.dumps({"exit": r.exit_code, "output": r.output, "left": left,
                  "same": (mnt / "dest" / db.name).read_bytes() == db.read_bytes()}))
""",
        tmp_path / "src",
        tmp_path / "mnt",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit"] != 0 and "No space left on device" in result["output"]
    assert result["left"] == ["dest", f"dest/{rec.path.name}"] and result["same"]
    assert tree(tmp_path / "src") == before


def test_a_move_onto_a_file_system_with_room_for_the_files_only_keeps_the_database_already_there(tmp_path):
    """A tmpfs that holds the recording's files and the database already there, and not one page more: the
    database is not rewritten (it is the same), so the move succeeds instead of losing it."""
    rec = make_recording(tmp_path / "src", sizes=(64,))
    before = tree(tmp_path / "src")
    done = in_mount_namespace(
        """
pages = sum(-(-p.stat().st_size // 4096) for p in src.rglob("*") if p.is_file())
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={4 * pages}k", "none", str(mnt)], check=True)
(mnt / "dest").mkdir()
shutil.copyfile(db, mnt / "dest" / db.name)  # the same database is there already (its files are not)
r = CliRunner().invoke(cli, ["move", str(db), str(mnt / "dest")])
files = {p.relative_to(mnt / "dest").as_posix(): p.read_bytes().hex() for p in (mnt / "dest").rglob("*") if p.is_file()}
print(json.dumps({"exit": r.exit_code, "output": r.output, "files": files}))
""",
        tmp_path / "src",
        tmp_path / "mnt",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit"] == 0, result["output"]
    assert {k: bytes.fromhex(v) for k, v in result["files"].items()} == before
    assert tree(tmp_path / "src") == {}
