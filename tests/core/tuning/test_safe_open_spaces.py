"""A search space from someone else is data: its constraints never run code, its sizes are bounded,
and every mistake in it is an error naming the file and field (issue 24)."""

from __future__ import annotations

import pytest
from test_tune_cli import invoke

from mneme.core.errors import FormatError, MnemeError
from mneme.core.tuning.space import load_space

PAYLOADS = [
    "min.__self__.__import__('os').system('touch {marker}')",
    "(f := min.__self__.__import__('os').system('touch {marker}')) or True",
    "(lambda: min.__self__.__import__('os').system('touch {marker}'))()",
    "f\"{{min.__self__.__import__('os').system('touch {marker}')}}\" != ''",
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]('touch {marker}'.split())",
]


def _space(tmp_path, text: str, name="space.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("payload", PAYLOADS, ids=["import", "walrus", "lambda", "fstring", "subclasses"])
def test_print_space_with_a_code_payload_in_a_constraint_runs_nothing_and_exits_2(saxpy_db, tmp_path, payload):
    marker = tmp_path / "pwned"
    expression = payload.format(marker=marker).replace('"', '\\"')
    space = _space(tmp_path, f'parameters:\n  block_x: {{choices: [64, 128]}}\nconstraints:\n  - "{expression}"\n')
    code, out = invoke("tune", "-rdb", saxpy_db, "--space", space, "--print-space", "--results", tmp_path / "r")
    assert not marker.exists(), "a constraint ran code"
    assert code == 2, out
    assert "constraint" in out and "Traceback" not in out


@pytest.mark.parametrize(
    "text, value",
    [
        ("block_x % 32 == 0 and block_x <= 512", True),
        ("min(block_x, 256) * 2 >= 512 or not specialize", True),
        ("abs(-block_x) // 64 == 4 if specialize else False", True),
        ("128 < block_x < 256", False),
        ("block_x ** 2 - 1 == 65535", True),
        ("codegen_method == 'ptxas'", False),
    ],
)
def test_the_constraint_language_computes_arithmetic_comparisons_and_logic(text, value):
    from mneme.core.tuning.constraints import Constraint

    assert Constraint(text).holds({"block_x": 256, "specialize": True, "codegen_method": "nvjitlink"}) is value


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "x.y",
        "[1, 2]",
        "{1: 2}",
        "len(x)",
        "min(*x)",
        "lambda: 1",
        "x[0]",
        "min(x, key=abs)",
        "(y := 1)",
        "b'bytes' == x",
        "...",
    ],
)
def test_anything_outside_the_constraint_language_is_refused_when_the_space_is_read(text):
    from mneme.core.tuning.constraints import Constraint, ConstraintError

    with pytest.raises(ConstraintError, match="constraint"):
        Constraint(text)


def test_a_constraint_computing_a_huge_integer_is_an_error_not_a_hang():
    from mneme.core.tuning.constraints import Constraint, ConstraintError

    with pytest.raises(ConstraintError, match="too large"):
        Constraint("9 ** 9 ** 9 > x").holds({"x": 1})


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n",
    ],
)
def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path, text):
    with pytest.raises(FormatError, match="aliases"):
        load_space(str(_space(tmp_path, text)), None, None)


@pytest.mark.parametrize(
    "spec, error",
    [
        ("{choices: &c [1, 2]}\n  y: {choices: *c}", FormatError),  # aliases are refused outright
        ("{pipeline: 100000000}", MnemeError),
        ("{low: 0, high: 100000000000000}", MnemeError),
        ("{low: 0, high: .inf}", FormatError),
        ("{low: .nan, high: 1.0}", FormatError),
        ("{low: 0, high: 1e400}", FormatError),
        ("{powers_of_two: [1, .inf]}", FormatError),
        ("{low: 0, high: lots}", FormatError),
    ],
)
def test_space_sizes_and_bounds_are_checked_before_anything_is_allocated(tmp_path, spec, error):
    with pytest.raises(error, match="block_x|alias|limit"):
        load_space(str(_space(tmp_path, f"parameters:\n  block_x: {spec}\n")), None, None)


def test_deeply_nested_json_space_is_a_format_error(tmp_path):
    path = _space(tmp_path, '{"parameters": ' + "[" * 100000 + "]" * 100000 + "}", name="space.json")
    with pytest.raises(FormatError, match="nested"):
        load_space(str(path), None, None)


def test_a_fifo_named_like_a_space_file_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    with pytest.raises(Exception, match="does not exist|regular file"):
        load_space(str(fifo), None, None)
