"""Bad recording databases: each is refused with an error naming the file and the field, nothing changed."""

from __future__ import annotations

import copy
import json
import os

import pytest
from test_records_fixtures import make_recording, tree

from mneme.core.errors import FormatError, SchemaVersionError
from mneme.core.records import SCHEMA_VERSION, RecordedExecution


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A real recording and its parsed JSON, shared read-only by the cases below."""
    folder = tmp_path_factory.mktemp("good")
    rec = make_recording(folder)
    return folder, json.loads(rec.path.read_text()), next(iter(rec))


def _instance(data, key):
    return data["instances"][key]


CASES = [
    # (id, mutation(data, key), field named in the error, words in the message)
    ("missing KernelName", lambda d, k: d.pop("KernelName"), "KernelName", "missing"),
    ("missing several fields", lambda d, k: [d.pop("Backend"), d.pop("Arch")], "Backend", "Arch"),
    ("missing instance Epilogue", lambda d, k: _instance(d, k).pop("Epilogue"), "instances.{k}.Epilogue", "missing"),
    ("extra top-level field", lambda d, k: d.update(Colour="red"), "$", "Colour"),
    ("extra instance field", lambda d, k: _instance(d, k).update(Stream=0), "instances.{k}", "Stream"),
    (
        "extra image field",
        lambda d, k: d.update(BinaryBlobs=[{"Path": "ir/scale_template.ll", "Kind": "ptx", "X": 1}]),
        "BinaryBlobs[0]",
        "X",
    ),
    ("VASize as a string", lambda d, k: d.update(VASize="1048576"), "VASize", "expected an integer"),
    ("VAddr as an integer", lambda d, k: d.update(VAddr=1 << 40), "VAddr", "hexadecimal"),
    ("Specializations as ints", lambda d, k: d.update(Specializations=[0, 1, 1]), "Specializations[0]", "boolean"),
    ("KernelName as a number", lambda d, k: d.update(KernelName=7), "KernelName", "expected a string"),
    ("GridDims with a zero", lambda d, k: _instance(d, k)["GridDims"].update(x=0), "instances.{k}.GridDims.x", ">= 1"),
    (
        "GridDims as a list",
        lambda d, k: _instance(d, k).update(GridDims=[2, 1, 1]),
        "instances.{k}.GridDims",
        "x, y, z",
    ),
    (
        "BlockDims with a boolean",
        lambda d, k: _instance(d, k)["BlockDims"].update(y=True),
        "instances.{k}.BlockDims.y",
        "int",
    ),
    ("negative SharedMem", lambda d, k: _instance(d, k).update(SharedMem=-4), "instances.{k}.SharedMem", ">= 0"),
    ("zero Occurrences", lambda d, k: _instance(d, k).update(Occurrences=0), "instances.{k}.Occurrences", ">= 1"),
    ("Args not hex", lambda d, k: _instance(d, k).update(Args="zz"), "instances.{k}.Args", "hexadecimal"),
    ("Args shorter than the layout", lambda d, k: _instance(d, k).update(Args="00"), "instances.{k}.Args", "16 bytes"),
    ("arrays of different lengths", lambda d, k: d.update(ArgSizes=[8, 4]), "ArgSizes", "one per kernel argument"),
    ("unknown argument kind", lambda d, k: d["ArgKinds"].__setitem__(0, "tensor"), "ArgKinds", "tensor"),
    ("no code at all", lambda d, k: d.update(Modules=[], BinaryBlobs=[]), "Modules", "no code"),
    ("StaticHash naming a folder", lambda d, k: d.update(StaticHash="a/b"), "StaticHash", "[A-Za-z0-9_.-]"),
    ("Globals size as text", lambda d, k: d.update(Globals={"bias": "4"}), "Globals.bias", "expected an integer"),
    ("module outside with ..", lambda d, k: d.update(Modules=["../other/k.ll"]), "Modules[0]", "leaves the database"),
    ("module with an absolute path", lambda d, k: d.update(Modules=["/etc/hostname"]), "Modules[0]", "absolute"),
    (
        "prologue outside with ..",
        lambda d, k: _instance(d, k).update(Prologue="snapshots/../../p.mneme"),
        "instances.{k}.Prologue",
        "leaves the database",
    ),
    ("missing module file", lambda d, k: d.update(Modules=["ir/gone.ll"]), "Modules[0]", "does not exist"),
    (
        "missing epilogue file",
        lambda d, k: _instance(d, k).update(Epilogue="snapshots/gone.mneme"),
        "instances.{k}.Epilogue",
        "does not exist",
    ),
    (
        "image naming a folder",
        lambda d, k: d.update(BinaryBlobs=[{"Path": "ir", "Kind": "cubin"}]),
        "BinaryBlobs[0].Path",
        "not a regular file",
    ),
    (
        "AppTimes negative",
        lambda d, k: d["instances"][k].update(AppTimes=[1e-5, -1.0]),
        "instances.{k}.AppTimes",
        "must be positive",
    ),
    (
        "AppTimes as text",
        lambda d, k: d["instances"][k].update(AppTimes=["fast"]),
        "instances.{k}.AppTimes[0]",
        "expected a number",
    ),
    ("SchemaVersion missing", lambda d, k: d.pop("SchemaVersion"), "SchemaVersion", "missing"),
    ("SchemaVersion as text", lambda d, k: d.update(SchemaVersion="1"), "SchemaVersion", "positive integer"),
]


@pytest.mark.parametrize("mutate,field,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_database_is_refused_naming_file_and_field(good, tmp_path, mutate, field, words):
    folder, data, key = good
    bad = copy.deepcopy(data)
    mutate(bad, key)
    path = folder / f"bad-{os.getpid()}-{abs(hash(tmp_path))}.json"
    path.write_text(json.dumps(bad))
    before = tree(folder)
    try:
        with pytest.raises(FormatError) as err:
            RecordedExecution.from_json(path)
        assert tree(folder) == before
    finally:
        path.unlink()
    message = str(err.value)
    assert message.startswith(str(path))
    assert err.value.field == field.format(k=key)
    assert words in message


def test_newer_schema_version_is_refused_with_a_clear_message(good, tmp_path):
    folder, data, _ = good
    newer = dict(data, SchemaVersion=SCHEMA_VERSION + 1)
    path = folder / "newer.json"
    path.write_text(json.dumps(newer))
    try:
        with pytest.raises(SchemaVersionError, match="upgrade Mneme") as err:
            RecordedExecution.from_json(path)
    finally:
        path.unlink()
    assert err.value.field == "SchemaVersion" and f"version {SCHEMA_VERSION + 1}" in str(err.value)


def test_symlink_leading_outside_the_folder_is_refused(tmp_path):
    rec = make_recording(tmp_path / "db")
    outside = tmp_path / "outside.ll"
    outside.write_text("; not the recording's\n")
    link = tmp_path / "db" / "ir" / "scale_template.ll"
    link.unlink()
    link.symlink_to(outside)
    with pytest.raises(FormatError, match="outside the database's folder through a symbolic link") as err:
        RecordedExecution.from_json(rec.path)
    assert err.value.field == "Modules[0]"


def test_not_json_and_not_an_object_name_the_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{ truncated")
    with pytest.raises(FormatError, match="not valid JSON"):
        RecordedExecution.from_json(path)
    path.write_text("[1, 2]")
    with pytest.raises(FormatError, match="JSON object, not array"):
        RecordedExecution.from_json(path)
    with pytest.raises(FormatError, match="no such recording database"):
        RecordedExecution.from_json(tmp_path / "absent.json")


def test_older_schema_versions_are_upgraded_when_read(good, tmp_path, monkeypatch):
    """The policy's mechanism: a reader of version N + 1 reads a version-N file through an upgrade step."""
    from mneme.core.records import model, schema

    folder, data, _ = good
    path = folder / "older.json"
    path.write_text(json.dumps(data))  # written by this version...
    # ...and read by a hypothetical next version, with its upgrade step from this one.
    monkeypatch.setattr(model, "SCHEMA_VERSION", SCHEMA_VERSION + 1)

    def upgrade(doc):
        return dict(doc, SchemaVersion=SCHEMA_VERSION + 1)

    monkeypatch.setitem(schema._UPGRADES, SCHEMA_VERSION, upgrade)
    try:
        rec = RecordedExecution.from_json(path)
    finally:
        path.unlink()
    assert rec.schema_version == SCHEMA_VERSION + 1
    assert rec.to_dict()["SchemaVersion"] == SCHEMA_VERSION + 1


def test_folder_symlink_leading_outside_is_refused(tmp_path):
    import shutil

    rec = make_recording(tmp_path / "db")
    shutil.move(tmp_path / "db" / "snapshots", tmp_path / "elsewhere")
    (tmp_path / "db" / "snapshots").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(FormatError, match="through a symbolic link") as err:
        RecordedExecution.from_json(rec.path)
    assert err.value.field.startswith("instances.") and err.value.field.endswith(".Prologue")
