"""Plugin-declared parameters (knobs) and the files written before they existed.

`tests/data/config-v1` holds a configuration, a best.json and a tuning results folder written
by the code before knobs (schema 1), with the hashes that code computed. They must load with
the same values and hashes, and the results folder must resume and report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mneme.core import params, plugins
from mneme.core.errors import FormatError
from mneme.core.hookspecs import hookimpl
from mneme.core.params import Knob
from mneme.core.types import ExperimentConfiguration as C
from paths import DATA, ROOT

V1 = DATA / "config-v1"
HASHES = json.loads((V1 / "hashes.json").read_text())


def test_a_schema1_configuration_loads_with_every_value_and_its_hash():
    data = json.loads((V1 / "config.json").read_text())
    config = C.from_dict(data, source="config.json")
    for name, value in data.items():
        got = getattr(config, name)
        assert (got.to_dict() if hasattr(got, "to_dict") else got) == value, name
    assert config.hash() == HASHES["config.json"]
    grounded = config.replace(specialize_dims=True, set_launch_bounds=False)
    assert grounded.hash() == HASHES["config.json with specialize_dims=true, set_launch_bounds=false"]
    again = C.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.to_dict()["schema"] == params.SCHEMA


def test_a_schema1_best_json_and_every_stored_trial_keep_their_hashes():
    from mneme.core.tuning.store import ResultStore

    best = C.from_dict(json.loads((V1 / "results" / "best.json").read_text()))
    assert best.hash() == HASHES["results/best.json"] == C(grid=64, block=256).hash()
    store = ResultStore.load(f"sqlite:///{V1 / 'results' / 'study.db'}")
    records = store.records()
    assert len(records) == 3 and all(r.config for r in records)
    knobs_seen = set()
    for record in records:
        config = C.from_dict(record.config)
        assert config.hash() == record.hash  # the key that answers a repeated configuration from the store
        knobs_seen |= set(config.knobs)
    assert knobs_seen  # the fixture's trials set knobs off their defaults
    assert C.from_dict(store.baseline["config"]).hash() == store.baseline["hash"]


@pytest.fixture(scope="module")
def saxpy_example(tmp_path_factory):
    """examples/saxpy captured on the host backend, as the fixture's results were."""
    from mneme import capture

    return capture.capture_spec(
        ROOT / "examples" / "saxpy" / "capture.yaml", tmp_path_factory.mktemp("saxpy"), backend="host"
    )


def _copy_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(V1 / "results", results)
    session = json.loads((results / "session.json").read_text())
    session["storage"] = f"sqlite:///{results / 'study.db'}"
    (results / "session.json").write_text(json.dumps(session))
    return results


def _mneme(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mneme", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kwargs,
    )


@pytest.mark.slow
def test_a_schema1_results_folder_resumes_and_reports(saxpy_example, tmp_path):
    from mneme.core.tuning.report import build_summary, open_results

    results = _copy_results(tmp_path)
    session = json.loads((V1 / "results" / "session.json").read_text())
    database = Path(saxpy_example)
    assert database.stem == session["static_hash"]  # the same kernel and launch as the stored study
    run = _mneme(
        "tune",
        "-rdb",
        database,
        "--backend",
        "host",
        "--space",
        results / "space.yaml",
        "--sampler",
        "random",
        "--seed",
        3,
        "--trials",
        5,
        "--iterations",
        1,
        "--retime-top",
        1,
        "--retime-repeats",
        1,
        "--results",
        results,
        "--resume",
        "--force",
        "--json",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    store, _ = open_results(results)
    records = {r.number: r for r in store.records()}
    old = {
        r.number: r
        for r in __import__("mneme.core.tuning.store", fromlist=["x"])
        .ResultStore.load(f"sqlite:///{V1 / 'results' / 'study.db'}")
        .records()
    }
    for number, record in old.items():  # nothing finished is lost or run again
        assert records[number].hash == record.hash and records[number].status == record.status
        assert records[number].result == record.result
    assert sum(r.status in ("ok", "cached", "failed", "unverified") for r in records.values()) == 5
    summary = build_summary(store)
    hashes = [c["hash"] for c in summary["ranking"]]
    assert len(hashes) == len(set(hashes))  # each configuration ranked once, old and new alike
    assert [c["baseline"] for c in summary["ranking"]].count(True) == 1
    report = _mneme("results", results, "--json")
    assert report.returncode == 0 and json.loads(report.stdout)["counts"]["trials"] == 5


def test_knobs_read_as_attributes_and_change_with_replace():
    config = C(grid=8, block=128)
    assert config.ptxas_opt == 3 and config.loop_unrolling is None and config.fast_math is False
    changed = config.replace(ptxas_opt=1, fast_math=True, block=64)
    assert (changed.ptxas_opt, changed.fast_math, changed.block.x) == (1, True, 64)
    assert dict(changed.knobs) == {"ptxas_opt": 1, "fast_math": True}
    assert changed.replace(ptxas_opt=3).knobs == {"fast_math": True}  # a default is not stored
    assert C(grid=8, block=128, ptxas_opt=3) == config and C(grid=8, block=128, ptxas_opt=3).hash() == config.hash()
    assert changed.hash() != config.hash()
    with pytest.raises(ValueError, match="max_registers"):
        config.replace(max_registers=300)
    with pytest.raises(TypeError, match="fast_math"):
        config.replace(fast_math="yes")
    with pytest.raises(ValueError, match="did you mean 'ptxas_opt'"):
        config.replace(ptxas_op=1)
    with pytest.raises(AttributeError):
        config.no_such_field  # noqa: B018


def test_a_newer_schema_and_unknown_fields_are_refused_by_name():
    with pytest.raises(FormatError, match="schema 3 is newer"):
        C.from_dict({"schema": 3, "grid": [1], "block": [1]}, source="cfg.json")
    with pytest.raises(FormatError, match="cfg.json.*'blok'"):
        C.from_dict({"grid": [1], "block": [1], "blok": 1}, source="cfg.json")


def test_ground_drops_a_knob_its_declaration_makes_moot():
    a = C(grid=4, block=32, specialize_dims=True, specialize_dims_assume=True)
    assert a.ground().knobs == {} and a.hash() == C(grid=4, block=32, specialize_dims=True).hash()
    assert C(grid=4, block=32, specialize_dims_assume=True).ground().specialize_dims_assume is True


def test_build_fields_are_the_core_codegen_fields_and_the_declared_optimize_and_codegen_knobs():
    fields = params.build_fields()
    assert fields[:3] == ("passes", "codegen_opt", "codegen_method")
    assert {"loop_unrolling", "inlining_threshold", "ptxas_opt", "max_registers", "cache_mode"} <= set(fields)
    assert not {"fast_math", "remove_auto_init", "specialize_dims_assume", "specialize"} & set(fields)


class UnrollPlugin:
    """A third-party transform's knob, registered in process."""

    @hookimpl
    def mneme_parameters(self):
        return [
            Knob(
                "unroll_factor",
                "int",
                1,
                "optimize",
                "Unroll factor of the hot loop.",
                low=1,
                high=16,
                search=(1, 2, 4, 8),
                feature="unroll",
            )
        ]


@pytest.fixture
def unroll_plugin():
    plugins.register(UnrollPlugin(), name="unroll")
    yield
    plugins.reset()


def test_a_declared_knob_reaches_the_configuration_the_flags_the_spaces_and_the_build_fields(unroll_plugin):
    from click.testing import CliRunner

    from mneme.core.cli import cli
    from mneme.plugins.spaces.builtin import FullSpace

    config = C(grid=2, block=64, unroll_factor=4)
    assert config.unroll_factor == 4 and config.to_dict()["unroll_factor"] == 4
    assert C(grid=2, block=64).to_dict()["unroll_factor"] == 1
    assert "unroll_factor" in params.build_fields()
    dims = FullSpace().dimensions()
    assert dims["unroll_factor"].values == (1, 2, 4, 8)
    for command in (["replay", "--help"], ["ir", "compile", "--help"]):
        out = CliRunner().invoke(cli, command, terminal_width=200).output
        assert "--unroll-factor" in out and "--ptxas-opt" in out and "--loop-unrolling" in out, command
    with pytest.raises(ValueError, match="unroll_factor must be in 1..16"):
        C(grid=2, block=64, unroll_factor=32)


def test_a_knob_may_not_shadow_a_field_of_the_original_api():
    class Shadow:
        @hookimpl
        def mneme_parameters(self):
            return [Knob("passes", "str", "", "optimize")]

    plugins.register(Shadow(), name="shadow")
    try:
        with pytest.raises(Exception, match="'passes', a field of ExperimentConfiguration"):
            params.knobs()
    finally:
        plugins.reset()


def test_ir_flags_of_todays_knobs_still_work(tmp_path):
    """--ptxas-opt, --max-registers, --cache-mode, --fast-math, --remove-auto-init: generated, same names."""
    from click.testing import CliRunner

    from mneme.core.cli import cli

    out = CliRunner().invoke(cli, ["ir", "show", "--help"], terminal_width=200).output
    for flag in (
        "--ptxas-opt",
        "--max-registers",
        "--cache-mode",
        "--fast-math",
        "--no-fast-math",
        "--remove-auto-init",
        "--specialize-dims-assume",
        "--inlining-threshold",
    ):
        assert flag in out, flag


def test_schema1_fields_are_declared_by_their_plugins_and_hashed_at_their_defaults(monkeypatch):
    """The core names none of schema 1's ten fields: each plugin marks its own (Knob.schema1)."""
    assert set(params.schema1_knobs()) == {
        "specialize_dims_assume",
        "remove_auto_init",
        "loop_unrolling",
        "loop_vectorization",
        "slp_vectorization",
        "inlining_threshold",
        "ptxas_opt",
        "max_registers",
        "cache_mode",
        "fast_math",
    }
    assert '"ptxas_opt":3' in C(grid=2, block=64).canonical_json()
    # Without the plugin that declares them, its fields are unknown: refused by name, not hashed.
    monkeypatch.setenv("MNEME_DISABLE_PLUGINS", "cuda")
    plugins.reset()
    try:
        assert "ptxas_opt" not in params.schema1_knobs()
        assert '"ptxas_opt"' not in C(grid=2, block=64).canonical_json()
        with pytest.raises(ValueError, match="unknown configuration field 'ptxas_opt'"):
            C(grid=2, block=64, ptxas_opt=1)
    finally:
        monkeypatch.delenv("MNEME_DISABLE_PLUGINS")
        plugins.reset()
