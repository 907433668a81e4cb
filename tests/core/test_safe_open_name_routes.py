"""Names with control characters in every other place a recording, a space or a capture description
puts them on the terminal (issue 36, tried on main beyond the KernelName of test_safe_open_names.py):
argument names, instance keys, the backend and architecture, space parameter names, constraints and
keys, and a description's kernel, keys and paths. Each is printed escaped, on its own line; a capture
description naming a kernel its IR lacks is invalid input (exit 2, field 'kernel')."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from paths import ROOT

from mneme import capture
from mneme.core.cli import cli

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
HOSTILE = "\x1b[2J\x1b[Hall 1 variants verified\x07\r\u202e\n"
RAW = ("\x1b", "\x07", "\r", "\u202e")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    return capture.capture(
        SAXPY_IR,
        "saxpy",
        2,
        128,
        [256, np.float32(2.0), np.ones(256, np.float32), np.ones(256, np.float32)],
        folder / "rec",
        backend="host",
    )


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "300", "MNEME_HOST_THREADS": "1"})


def _assert_escaped(output: str) -> None:
    assert not [c for c in RAW if c in output], output
    assert not any(line.lstrip().startswith("all 1 variants verified") for line in output.splitlines()), output


def _edited(db, name: str, edit) -> str:
    doc = json.loads(db.read_text())
    edit(doc)
    path = db.parent / name
    path.write_text(json.dumps(doc))
    return path


def _rename_instance(doc):
    key = next(iter(doc["instances"]))
    doc["instances"][HOSTILE + key] = doc["instances"].pop(key)


EDITS = {
    "ArgNames": lambda doc: doc.update(ArgNames=[n + HOSTILE for n in doc["ArgNames"]]),
    "instance key": _rename_instance,
    "Backend": lambda doc: doc.update(Backend="cuda" + HOSTILE),
    "Arch": lambda doc: doc.update(Arch="sm_90[bold]" + HOSTILE),
    "an unknown key": lambda doc: doc.update({HOSTILE: 1}),
}


@pytest.mark.parametrize("command", ["inspect", "replay"])
@pytest.mark.parametrize("field", list(EDITS))
def test_a_hostile_database_field_is_printed_escaped(db, command, field):
    path = _edited(db, f"{field.replace(' ', '_')}.json", EDITS[field])
    result = _run(*(["inspect", path] if command == "inspect" else ["replay", "-rdb", path]))
    assert result.exit_code in (0, 2, 3), result.output
    assert "Traceback" not in result.output
    _assert_escaped(result.output)


SPACES = {
    "parameter name": {"parameters": {"x" + HOSTILE: {"choices": [1, 2]}}},
    "choice": {"parameters": {"block_x": {"choices": ["a" + HOSTILE, 128]}}},
    "constraint": {"parameters": {"block_x": {"choices": [64, 128]}}, "constraints": ["block_x " + HOSTILE + " > 1"]},
    "key": {"parameters": {"block_x": {"choices": [64, 128], HOSTILE: 1}}},
}


@pytest.mark.parametrize("what", list(SPACES))
def test_a_hostile_name_in_a_space_file_is_printed_escaped(db, tmp_path, what):
    space = tmp_path / "space.yaml"
    space.write_text(json.dumps(SPACES[what]))
    result = _run("tune", "-rdb", db, "--space", space, "--print-space", "--results", tmp_path / "r")
    assert result.exit_code in (0, 2), result.output  # a string choice is a value like another
    _assert_escaped(result.output)


DESCRIPTIONS = {
    "kernel": ({"ir": "k.ll", "kernel": "saxpy" + HOSTILE, "grid": 1, "block": 32, "args": [1]}, "field 'kernel'"),
    "key": ({"ir": "k.ll", "kernel": "saxpy", "grid": 1, "block": 32, HOSTILE: 1, "args": [1]}, "unknown key"),
    "ir path": ({"ir": "k" + HOSTILE + ".ll", "kernel": "saxpy", "grid": 1, "block": 32, "args": [1]}, "field 'ir'"),
    "file path": (
        {
            "ir": "k.ll",
            "kernel": "saxpy",
            "grid": 1,
            "block": 32,
            "args": [{"file": {"path": "x" + HOSTILE, "dtype": "uint8"}}],
        },
        "field 'args[0].file.path'",
    ),
}


@pytest.mark.parametrize("what", list(DESCRIPTIONS))
def test_a_hostile_name_in_a_capture_description_is_an_input_error_printed_escaped_on_one_line(tmp_path, what):
    description, field = DESCRIPTIONS[what]
    shutil.copyfile(SAXPY_IR, tmp_path / "k.ll")
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(description))
    result = _run("capture", spec, "-o", tmp_path / "out", "--backend", "host")
    assert result.exit_code == 2, result.output
    assert field in result.output
    _assert_escaped(result.output)
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_replay_of_a_database_with_many_instances_and_no_record_id_names_twenty_not_all(db):
    def many(doc):
        one = next(iter(doc["instances"].values()))
        doc["instances"].update({f"{i:016x}": one for i in range(5000)})

    result = _run("replay", "-rdb", _edited(db, "many.json", many))
    assert result.exit_code == 2, result.output
    assert "holds 5001 kernel instances" in result.output and "4981 more: mneme inspect lists them" in result.output
    assert len(result.output) < 2000, len(result.output)  # was every id: 18 bytes per instance, up to text_bytes
