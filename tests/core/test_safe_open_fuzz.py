"""Property-based fuzzing (hypothesis) of everything Mneme reads from other people: snapshots (Python and
native readers), recording databases, capture descriptions, space files and the constraint language.

The property is the same everywhere: on any input, a reader returns a value or raises a `MnemeError`,
never another exception (docs/security.md). Examples are few so the normal test run stays fast; the
coverage-guided job (tests/fuzz/, run from .ci/run) goes deeper.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mneme.core.errors import MnemeError

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def snapshot_bytes(tmp_path_factory):
    from fuzz_targets import seed_snapshot

    return seed_snapshot(tmp_path_factory.mktemp("seed"))


@FAST
@given(data=st.data())
def test_a_mutated_snapshot_reads_or_fails_with_a_mneme_error_in_both_readers(snapshot_bytes, tmp_path_factory, data):
    from fuzz_targets import mutate, read_snapshot

    blob = mutate(
        snapshot_bytes,
        data.draw(st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 255)), max_size=6)),
        data.draw(st.integers(0, len(snapshot_bytes))),
    )
    path = tmp_path_factory.mktemp("m") / "DeviceState.prologue.s.d.mneme"
    path.write_bytes(blob)
    read_snapshot(path)  # raises AssertionError when the readers disagree, other exceptions when unsafe


@FAST
@given(
    doc=json_values,
    fields=st.dictionaries(
        st.sampled_from(
            [
                "SchemaVersion",
                "KernelName",
                "StaticHash",
                "Backend",
                "Arch",
                "Modules",
                "ArgNames",
                "ArgSizes",
                "ArgOffsets",
                "ArgKinds",
                "Specializations",
                "instances",
                "VAddr",
                "VASize",
                "Globals",
            ]
        ),
        json_values,
    ),
)
def test_a_mutated_recording_database_loads_or_fails_with_a_mneme_error(tmp_path_factory, doc, fields):
    from fuzz_targets import load_database

    base = {
        "SchemaVersion": 3,
        "KernelName": "k",
        "StaticHash": "s",
        "Backend": "host",
        "Arch": "x86_64",
        "Modules": ["k.ll"],
        "ArgNames": [],
        "ArgSizes": [],
        "ArgOffsets": [],
        "ArgKinds": [],
        "Specializations": [],
        "instances": {},
    }
    base.update(fields)
    folder = tmp_path_factory.mktemp("db")
    (folder / "k.ll").write_text("")
    for text in (json.dumps(base), json.dumps(doc)):
        load_database(folder, text.encode())


@FAST
@given(
    spec=st.dictionaries(st.sampled_from(["args", "ir", "kernel", "grid", "block", "shared_mem"]), json_values),
    args=st.lists(
        st.dictionaries(
            st.sampled_from(
                [
                    "scalar",
                    "dtype",
                    "zeros",
                    "ones",
                    "full",
                    "arange",
                    "random",
                    "file",
                    "name",
                    "tolerance",
                    "literal",
                    "ptr",
                    "offset",
                    "struct",
                    "padding",
                    "align",
                    "output",
                ]
            ),
            json_values
            | st.dictionaries(
                st.sampled_from(
                    [
                        "dtype",
                        "shape",
                        "start",
                        "stop",
                        "step",
                        "value",
                        "low",
                        "high",
                        "seed",
                        "path",
                        "values",
                        "before",
                        "after",
                    ]
                ),
                json_values,
            ),
        ),
        max_size=3,
    ),
    entries=st.dictionaries(
        st.sampled_from(["table", "bias", "pool"]),
        st.dictionaries(
            st.sampled_from(["scalar", "dtype", "literal", "random", "zeros", "file", "padding", "output"]),
            json_values
            | st.dictionaries(st.sampled_from(["dtype", "shape", "values", "seed", "before", "after"]), json_values),
        ),
    ),
)
def test_a_random_capture_description_builds_or_fails_with_a_mneme_error(tmp_path_factory, spec, args, entries):
    from fuzz_targets import build_capture_args

    spec = dict(spec, args=args, buffers=entries, globals=entries)
    build_capture_args(tmp_path_factory.mktemp("c"), json.dumps(spec).encode())


@FAST
@given(
    text=st.text(max_size=300)
    | st.builds(
        lambda params, constraints: json.dumps({"parameters": params, "constraints": constraints}),
        st.dictionaries(st.sampled_from(["block_x", "grid_x", "specialize", "codegen_opt"]), json_values),
        json_values,
    )
)
def test_a_random_space_file_loads_or_fails_with_a_mneme_error(tmp_path_factory, text):
    from fuzz_targets import load_space_text

    load_space_text(tmp_path_factory.mktemp("s"), text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="abx_019 +-*/%<>=!()andortif.,'\"[]{}:", max_size=60))
def test_any_text_is_a_constraint_or_a_constraint_error(text):
    from fuzz_targets import constraint_text

    constraint_text(text.encode())


arith = st.deferred(
    lambda: (
        st.integers(-50, 50).map(str)
        | st.sampled_from(["a", "b"])
        | st.builds(
            lambda x, op, y: f"({x} {op} {y})",
            arith,
            st.sampled_from(["+", "-", "*", "<", "<=", "==", "and", "or"]),
            arith,
        )
        | st.builds(lambda f, x, y: f"{f}({x}, {y})", st.sampled_from(["min", "max"]), arith, arith)
        | st.builds(lambda x: f"abs({x})", arith)
        | st.builds(lambda x: f"(not {x})", arith)
    )
)


@settings(max_examples=300, deadline=None)
@given(expression=arith, a=st.integers(-100, 100), b=st.integers(-100, 100))
def test_the_constraint_language_agrees_with_python_arithmetic(expression, a, b):
    from mneme.core.tuning.constraints import MAX_LENGTH, Constraint, ConstraintError

    if len(expression) > MAX_LENGTH:  # the generator nests deep enough now and then: refused by its length
        with pytest.raises(ConstraintError, match=f"longer than {MAX_LENGTH}"):
            Constraint(expression)
        return
    # Python itself is the oracle here (a test, on generated arithmetic); the product never evaluates code.
    expected = bool(eval(expression, {"__builtins__": {"min": min, "max": max, "abs": abs}}, {"a": a, "b": b}))  # noqa: S307
    assert Constraint(expression).holds({"a": a, "b": b}) is expected


def test_the_fuzz_targets_raise_only_mneme_errors_on_their_seed_corpus():
    from fuzz_targets import TARGETS, seeds

    for name, target in TARGETS.items():
        for blob in seeds(name):
            try:
                target(blob)
            except MnemeError:
                pass
