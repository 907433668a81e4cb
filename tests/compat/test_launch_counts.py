"""The current original's launch counts in a database: `TotalLaunches` and `UnrecordedInstances`."""

from __future__ import annotations

import json

import pytest

from mneme.recorded_execution import RecordedExecution

from .original_files import write_original_recording

UNRECORDED = {
    "U": {
        "BlockDims": {"x": 64, "y": 1, "z": 1},
        "GridDims": {"x": 2, "y": 1, "z": 1},
        "Occurrences": 4,
        "SharedMem": 16,
    }
}


def _with_counts(saxpy_db, folder, **keys):
    db = write_original_recording(saxpy_db, folder)
    data = json.loads(db.read_text())
    data.update(keys)
    db.write_text(json.dumps(data))
    return db


def test_an_original_databases_launch_counts_are_read_and_written_back(saxpy_db, tmp_path):
    db = _with_counts(saxpy_db, tmp_path / "original", TotalLaunches=7, UnrecordedInstances=UNRECORDED)

    rec = RecordedExecution.from_json(str(db))
    assert rec.total_launches == 7
    (key,) = rec.unrecorded_instances
    u = rec.unrecorded_instances[key]
    assert (key, u.block_dim.x, u.grid_dim.x, u.shared_mem, u.occ) == ("U", 64, 2, 16, 4)
    assert len(rec) == 1  # the recorded instance is apart from the unrecorded one

    out = tmp_path / "out.json"
    rec.to_json(str(out))
    written = json.loads(out.read_text())
    assert written["TotalLaunches"] == 7 and written["UnrecordedInstances"] == UNRECORDED


def test_a_database_without_counts_has_none_and_writes_none(saxpy_db, tmp_path):
    for db in (saxpy_db, write_original_recording(saxpy_db, tmp_path / "documented")):
        rec = RecordedExecution.from_json(str(db))
        assert rec.total_launches is None and rec.unrecorded_instances == {}
        assert "TotalLaunches" not in rec.to_dict() and "UnrecordedInstances" not in rec.to_dict()


@pytest.mark.parametrize(
    "keys, named",
    [
        ({"TotalLaunches": "7"}, "TotalLaunches"),
        ({"TotalLaunches": 7, "UnrecordedInstances": {"U": {"GridDims": {"x": 1, "y": 1, "z": 1}}}}, "'U'"),
    ],
)
def test_malformed_launch_counts_are_an_error_naming_the_file_and_key(saxpy_db, tmp_path, keys, named):
    db = _with_counts(saxpy_db, tmp_path / "bad", **keys)
    with pytest.raises(RuntimeError, match=named) as caught:
        RecordedExecution.from_json(str(db))
    assert str(db) in str(caught.value)
