"""A database or capture description that says one thing twice, or a size that is not a finite number,
is refused naming the file (issue 36): JSON's duplicate keys, NaN, Infinity and 1e400, YAML's
duplicate keys, .nan and .inf, and YAML documents with too many nodes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_records_fixtures import make_recording

from mneme.capture_spec import load_spec
from mneme.core import limits
from mneme.core.cli import cli
from mneme.core.errors import FormatError, LimitError
from mneme.core.records import RecordedExecution


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda t: t.replace('"VASize": ', '"VASize": 5, "VASize": ', 1), "appears twice"),
        (lambda t: t.replace('"KernelName": ', '"KernelName": "other", "KernelName": ', 1), "appears twice"),
        (lambda t: t.replace('"VASize": 1048576', '"VASize": NaN'), "NaN"),
        (lambda t: t.replace('"VASize": 1048576', '"VASize": 1e400'), "not finite"),
        (lambda t: t.replace('"VASize": 1048576', '"VASize": -Infinity'), "Infinity"),
    ],
)
def test_a_database_with_a_duplicate_key_or_a_non_finite_number_exits_2_naming_it(tmp_path, edit, words):
    rec = make_recording(tmp_path / "db")
    text = rec.path.read_text()
    assert '"VASize": 1048576' in text
    rec.path.write_text(edit(text))
    with pytest.raises(FormatError, match=words):
        RecordedExecution.from_json(rec.path)
    result = run("inspect", rec.path)
    assert result.exit_code == 2, result.output
    assert words in result.output and str(rec.path.name) in result.output


@pytest.mark.parametrize(
    "text, words",
    [
        ("ir: a.ll\nkernel: k\nkernel: other\n", "appears twice"),
        ("ir: a.ll\nkernel: k\ngrid: .nan\n", "not finite"),
        ("ir: a.ll\nkernel: k\nshared_mem: -.inf\n", "not finite"),
        ("args:\n  - {zeros: {shape: [4], shape: [400000000]}}\n", "appears twice"),
    ],
)
def test_a_capture_description_with_a_duplicate_key_or_a_non_finite_number_is_refused(tmp_path, text, words):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    with pytest.raises(FormatError, match=words):
        load_spec(spec)


def test_a_yaml_document_with_more_nodes_than_the_limit_is_refused_while_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_JSON_NODES", "1000")
    with pytest.raises(LimitError, match="MNEME_LIMIT_JSON_NODES"):
        limits.load_yaml("values: [" + ", ".join(["1"] * 2000) + "]\n", "x.yaml")
    assert len(limits.load_yaml("values: [" + ", ".join(["1"] * 900) + "]\n", "x.yaml")["values"]) == 900


def test_yaml_nesting_is_bounded_while_it_is_composed_not_after(monkeypatch):
    # 100 000 levels would exhaust the stack of a composer that recursed without a bound
    with pytest.raises(FormatError, match="json_depth"):
        limits.load_yaml("[" * 100_000 + "]" * 100_000, "deep.yaml")


def test_json_floats_that_are_finite_still_read():
    assert limits.load_json(json.dumps({"a": [1.5, -2e300, 0.0]}), "x.json") == {"a": [1.5, -2e300, 0.0]}


def test_a_json_document_with_more_values_than_the_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    rec = make_recording(tmp_path / "db")
    data = json.loads(rec.path.read_text())
    data["padding"] = [[]] * 5000  # 10 000 values: ~30x their text in Python objects if parsed
    rec.path.write_text(json.dumps(data))
    monkeypatch.setenv("MNEME_LIMIT_JSON_NODES", "5000")
    with pytest.raises(LimitError, match="json_nodes=5000.*MNEME_LIMIT_JSON_NODES"):
        RecordedExecution.from_json(rec.path)
