"""A constraint computes only small values (issue 36): every intermediate string is bounded by the
value_chars limit before it is made, and string formatting with % is refused, so no constraint can
allocate gigabytes; each refusal is a ConstraintError naming the constraint and the limit."""

from __future__ import annotations

import pytest

from mneme.core.tuning.constraints import Constraint, ConstraintError

LONG = "a" * 60_000


@pytest.mark.parametrize(
    "text",
    [
        "s + s + s + s + s + s + s + s == ''",
        "(s + s) + (s + s) != t",
        "max(s, t) + s + s + s < 'b'",
        "(s if x else t) + s + s + s + s == s",
    ],
)
def test_a_constraint_joining_strings_past_the_limit_is_refused_before_the_string_is_made(text):
    with pytest.raises(ConstraintError, match="value_chars.*MNEME_LIMIT_VALUE_CHARS"):
        Constraint(text).holds({"s": LONG, "t": "b", "x": True})


@pytest.mark.parametrize("text", ["'%0999999999d' % x == ''", "'%s' % s == s", "s % x != s"])
def test_string_formatting_with_percent_is_refused(text):
    with pytest.raises(ConstraintError, match="formats strings"):
        Constraint(text).holds({"s": "ab", "x": 3})


def test_a_parameter_value_longer_than_the_limit_is_refused_where_it_is_read(monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_VALUE_CHARS", "100")
    with pytest.raises(ConstraintError, match="value_chars=100"):
        Constraint("s == 'x'").holds({"s": "y" * 101})


def test_small_strings_and_numbers_still_compute():
    assert Constraint("s + '-' + t == 'ptxas-O3' and x % 4 == 1").holds({"s": "ptxas", "t": "O3", "x": 9})
    assert Constraint("s + s == t").holds({"s": LONG[:30_000], "t": LONG}) is True
