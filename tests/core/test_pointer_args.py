"""Which kernel arguments point into device memory, also where the recorder saw only sizes (a binary
without IR: every argument's kind "unknown")."""

from __future__ import annotations

import json
import shutil

from mneme.core.executor import pointer_args, region_names
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import Snapshot
from paths import ROOT

SAXPY = ROOT / "examples" / "recordings" / "saxpy-4k"


def _recording(tmp_path, kinds):
    folder = tmp_path / "rec"
    shutil.copytree(SAXPY, folder)
    (db,) = folder.glob("*.json")
    data = json.loads(db.read_text())
    data["ArgKinds"] = kinds
    db.write_text(json.dumps(data))
    rec = RecordedExecution.from_json(db)
    (instance,) = rec.kernel_instances.values()
    with Snapshot.open(folder / instance.prologue_file) as prologue:
        regions = list(prologue.regions)
    return rec, instance, regions


def test_arguments_of_unknown_kind_that_point_into_a_region_are_pointers(tmp_path):
    rec, instance, regions = _recording(tmp_path, ["unknown"] * 4)
    args = bytes(instance.args)
    assert pointer_args(rec, args) == {}  # without the regions nothing says which are pointers
    found = pointer_args(rec, args, regions)
    assert sorted(found) == [2, 3]  # x and y; n (4 bytes) and a (a float) are not
    assert set(region_names(rec, args, regions).values()) == {"arg 2 (x)", "arg 3 (y)"}


def test_declared_pointers_need_no_regions(tmp_path):
    rec, instance, regions = _recording(tmp_path, ["int", "float", "pointer", "pointer"])
    args = bytes(instance.args)
    assert sorted(pointer_args(rec, args)) == [2, 3]
    assert pointer_args(rec, args) == pointer_args(rec, args, regions)
