"""The original's recordings import, replay verified, and export back readable by the original's logic."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mneme.compat import original_format as fmt
from mneme.core.errors import FormatError
from mneme.core.executor import BaseExecutor
from mneme.core.records import RecordedExecution as CoreRecord
from mneme.recorded_execution import RecordedExecution
from .original_files import (
    parse_snapshot,
    read_database,
    snapshot_bytes,
    write_original_recording,
)


@pytest.fixture(scope="module")
def original_db(saxpy_db, tmp_path_factory):
    return write_original_recording(saxpy_db, tmp_path_factory.mktemp("original"))


def test_the_snapshot_reader_follows_the_documented_layout(tmp_path):
    path = tmp_path / "snap.mneme"
    path.write_bytes(snapshot_bytes([("g", 0x1000, b"\x01\x02")], [(0x2000, b"abcd")], [b"\x07" * 4, b"\x08" * 8]))
    snap = fmt.read_snapshot(path)
    assert snap.globals == [("g", 0x1000, b"\x01\x02")]
    assert [(b.addr, b.actual, b.data, b.metadata) for b in snap.blobs] == [(0x2000, 4, b"abcd", None)]
    assert snap.args == [b"\x07" * 4, b"\x08" * 8]


def test_a_truncated_original_snapshot_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "cut.mneme"
    path.write_bytes(snapshot_bytes([], [(0x2000, b"abcdefgh")], [b"\x01"])[:-3])
    with pytest.raises(FormatError, match="argument") as info:
        fmt.read_snapshot(path)
    assert str(path) in str(info.value)


def test_an_original_database_imports_and_replays_verified(original_db, tmp_path):
    db = fmt.import_original(original_db, tmp_path / "imported", backend="host")
    rec = CoreRecord.from_json(db)
    assert rec.schema_version >= 3 and rec.backend == "host"
    assert [a.kind for a in rec.args] == ["int", "float", "pointer", "pointer"]
    assert [a.offset for a in rec.args] == [0, 4, 8, 16]
    (key,) = rec.keys()
    assert key == "9876543210"
    with BaseExecutor(db, key) as ex:
        result = ex.execute(ex.default_config())
    assert result.verified, result.mismatches


def test_from_json_reads_an_original_database_directly(original_db, saxpy_db):
    rec = RecordedExecution.from_json(str(original_db))
    ours = RecordedExecution.from_json(str(saxpy_db))
    assert rec.kernel_name == ours.kernel_name == "saxpy"
    assert rec.arg_names == ["n", "a", "x", "y"] and rec.va_addr == ours.va_addr
    inst = rec["9876543210"]
    (mine,) = ours.values()
    assert inst.grid_dim == mine.grid_dim and inst.available_specializations == [0, 1]
    with inst.prologue as a, mine.prologue as b:
        assert a.num_args == 4 and a.arg_values == b.arg_values
        assert a == b


def test_export_reads_back_with_the_original_reader_logic(saxpy_db, tmp_path):
    db = fmt.export_original(saxpy_db, tmp_path / "exported", layout="documented")
    got = read_database(db)
    rec = CoreRecord.from_json(saxpy_db)
    ((key, inst),) = rec.items()
    assert (
        got["KernelName"] == "saxpy"
        and got["VAddr"] == hex(rec.va_addr)
        and got["StaticHash"] == int(rec.static_hash, 16)
    )
    exported = got["instances"][key]
    assert exported["grid"] == (64, 1, 1) and exported["block"] == (256, 1, 1)
    assert [len(a) for a in exported["prologue"]["args"]] == [4, 4, 8, 8]
    from mneme.core.snapshot import Snapshot

    with Snapshot.open(inst.prologue_path) as pro:
        assert {a: d for a, d in exported["prologue"]["blobs"]} == {
            r.addr: bytes(pro.read_region(r.addr)) for r in pro.regions
        }


def test_export_then_import_is_the_same_recording(saxpy_db, tmp_path):
    exported = fmt.export_original(saxpy_db, tmp_path / "exported", layout="documented")
    back = CoreRecord.from_json(fmt.import_original(exported, tmp_path / "back"))
    rec = CoreRecord.from_json(saxpy_db)
    assert (back.backend, back.arch, back.args, back.specializations) == (
        rec.backend,
        rec.arch,
        rec.args,
        rec.specializations,
    )
    ((key, inst),) = back.items()
    assert inst.args == rec[key].args
    with BaseExecutor(back.path, key) as ex:
        assert ex.execute(ex.default_config()).verified
    policies = json.loads(exported.read_text())["Mneme"]["Policies"]
    assert policies  # saxpy's y carries a float tolerance; the documented layout has no metadata to carry it


def test_the_cli_imports_a_folder_and_exports(original_db, saxpy_db, tmp_path):
    run = [sys.executable, "-m", "mneme"]
    done = subprocess.run(
        [*run, "import-original", str(original_db.parent), "-o", str(tmp_path / "in"), "--backend", "host"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "in" / original_db.name).is_file()
    done = subprocess.run(
        [*run, "export-original", "-rdb", str(saxpy_db), "-o", str(tmp_path / "out"), "--layout", "documented"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    parse_snapshot(next((tmp_path / "out").glob("DeviceState.prologue.*")).read_bytes())
    done = subprocess.run(
        [*run, "export-original", "-rdb", str(saxpy_db), "-o", str(tmp_path / "current")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (db,) = (tmp_path / "current").glob("*.json")
    assert isinstance(json.loads(db.read_text())["StaticHash"], int)  # the current layout by default
    assert next((tmp_path / "current").glob("DeviceState.epilogue.*")).read_bytes().startswith(b"MNEME_DIFF_V1")
    done = subprocess.run([*run, "import-original", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "no recording database of the original" in done.stderr + done.stdout
