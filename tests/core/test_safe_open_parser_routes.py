"""Parser routes an attacker tries next (issue 36, tried on main): an alias bomb and a merge key in YAML, Python
tags, JSON nested far past Python's recursion, and a space file's base: naming a module. Each is an input error
naming the file (and the field or the limit), and nothing is imported or run."""

from __future__ import annotations

import pytest

from mneme.core import limits
from mneme.core.errors import FormatError, MnemeError
from mneme.core.tuning.space import load_space

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9)
)


@pytest.mark.parametrize(
    "text, says",
    [
        (LAUGHS, r"aliases \(\*name\) are not allowed"),
        ("base: &b {choices: [1, 2]}\nparameters:\n  x: {<<: *b}\n", r"aliases \(\*name\) are not allowed"),
        ("parameters: !!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
        ("parameters:\n  x: !!python/name:os.system\n", "could not determine a constructor"),
    ],
    ids=["alias bomb", "merge key", "python object", "python name"],
)
def test_yaml_that_would_expand_or_name_python_is_a_format_error(tmp_path, text, says):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(FormatError, match=says) as caught:
        load_space(str(path), None, None)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("loader", [limits.load_json, limits.load_yaml])
def test_a_document_nested_past_pythons_recursion_names_the_depth_limit(loader):
    text = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(MnemeError, match=r"doc\.json: .*json_depth=64.*MNEME_LIMIT_JSON_DEPTH"):
        loader(text, "doc.json")


@pytest.mark.parametrize("base", ["os:system", "/etc/passwd", "helper.py:X", "pkg.module"])
def test_a_space_files_base_naming_anything_but_a_space_is_a_format_error_naming_the_field(tmp_path, base):
    (tmp_path / "helper.py").write_text("open('pwned', 'w')\nclass X: pass\n")
    path = tmp_path / "space.yaml"
    path.write_text(f"base: '{base}'\nparameters: {{}}\n")
    with pytest.raises(FormatError, match=r"field 'base'") as caught:
        load_space(str(path), None, None)
    assert str(path) in str(caught.value)
    assert not (tmp_path / "pwned").exists()
