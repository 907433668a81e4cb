"""Data never names code (issue 36): a space file, a sweep file or a stored study may name a built-in
space or a YAML/JSON space file, never Python; Python is imported only from ``--space file.py:Class``."""

from __future__ import annotations

import json

import pytest
from test_tune_cli import invoke

from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.tuning.space import load_space
from mneme.core.tuning.sweep import Sweep

HELPER = "from mneme.core.tuning.space import ConfigSpace\nopen({marker!r}, 'w').write('ran')\nclass X(ConfigSpace):\n    pass\n"


def _helper(tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "helper.py").write_text(HELPER.format(marker=str(marker)))
    return marker


@pytest.mark.parametrize("base", ["helper.py:X", "helper.py", "./helper.py:X", "{abs}:X", "helper.pyc"])
def test_a_space_file_whose_base_names_python_imports_nothing_and_exits_2(saxpy_db, tmp_path, base):
    marker = _helper(tmp_path)
    base = base.format(abs=tmp_path / "helper.py")
    space = tmp_path / "s.yaml"
    space.write_text(f"base: '{base}'\nparameters:\n  block_x: {{choices: [64, 128]}}\n")
    code, out = invoke("tune", "-rdb", saxpy_db, "--space", space, "--print-space", "--results", tmp_path / "r")
    assert not marker.exists(), "a space file's base imported Python code"
    assert code == 2, out
    assert "base" in out and "never names code" in out and "Traceback" not in out


def test_a_base_naming_a_space_file_beside_it_or_a_built_in_space_still_works(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.yaml").write_text(
        "base: launch\nparameters:\n  loop_unrolling: {choices: [true, false]}\n"
    )
    outer = tmp_path / "sub" / "outer.yaml"
    outer.write_text("base: inner.yaml\nparameters:\n  codegen_opt: {choices: [2, 3]}\n")
    from test_tuning_space import recording

    rec, inst = recording(tmp_path)
    dims = load_space(str(outer), rec, inst).dims()
    assert {"codegen_opt", "loop_unrolling", "block_x"} <= set(dims)


def test_a_chain_of_bases_that_comes_back_to_itself_is_a_format_error(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(FormatError, match="chain of bases"):
        load_space(str(tmp_path / "a.yaml"), None, None)


def test_a_sweep_file_naming_python_imports_nothing(saxpy_db, tmp_path):
    marker = _helper(tmp_path)
    sweep = tmp_path / "sweep.json"
    sweep.write_text(
        json.dumps(
            {
                "schema": 1,
                "space": f"{tmp_path / 'helper.py'}:X",
                "space_options": {},
                "record_db": str(saxpy_db),
                "baseline": {"times": [1.0], "value": 1.0},
                "points": {},
            }
        )
    )
    with pytest.raises(MnemeError, match="names Python code"):
        Sweep.load(sweep).load_space()
    assert not marker.exists()


def test_python_spaces_load_only_when_the_caller_says_so(tmp_path):
    marker = _helper(tmp_path)
    with pytest.raises(UsageError, match="names Python code"):
        load_space(f"{tmp_path / 'helper.py'}:X", None, None)
    assert not marker.exists()
