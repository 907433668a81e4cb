"""`mneme replay`, `mneme capture` and `mneme annotate`: option parsing, configuration resolution,
report formatting (CPU only), and the commands end to end on the host backend with the saxpy example."""

from __future__ import annotations

import json
import shutil

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from mneme.core.cli import cli
from mneme.core.errors import FormatError, UsageError
from mneme.core.types import ExperimentConfiguration, ExperimentResult
from mneme.core.configfile import read_config_file, resolve_config
from mneme.plugins.replay_commands import result_json, result_rows
from paths import ROOT

EXAMPLE = ROOT / "examples" / "saxpy"
RECORDED = ExperimentConfiguration(grid=(64, 2, 1), block=(256, 1, 1), shared_mem=0)


# -- configuration resolution -------------------------------------------------------------------------


def test_no_options_give_the_recorded_launch():
    assert resolve_config(RECORDED, None, {"grid_dim_x": None, "passes": None, "specialize": None}) == RECORDED


def test_one_dimension_option_changes_only_that_component():
    config = resolve_config(RECORDED, None, {"block_dim_x": 128, "grid_dim_y": 4})
    assert config.block.as_tuple() == (128, 1, 1)
    assert config.grid.as_tuple() == (64, 4, 1)


def test_options_override_the_config_file_which_overrides_the_recording(tmp_path):
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"config": {"block": {"x": 512, "y": 1, "z": 1}, "passes": "Oz", "specialize": True}}))
    fields = read_config_file(path)
    config = resolve_config(RECORDED, fields, {"passes": "default<O2>", "codegen_opt": 1})
    assert config.block.x == 512 and config.specialize
    assert config.passes == "default<O2>" and config.codegen_opt == 1
    assert config.grid == RECORDED.grid


def test_a_config_file_exported_as_a_plain_configuration_is_read(tmp_path):
    exported = RECORDED.replace(block=(32, 1, 1), set_launch_bounds=True, max_threads=32)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(exported.to_dict()))
    assert resolve_config(RECORDED, read_config_file(path), {}) == exported


def test_an_unknown_field_in_a_config_file_is_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("blockk: 3\n")
    with pytest.raises(FormatError, match="blockk"):
        resolve_config(RECORDED, read_config_file(path), {}, source=str(path))


def test_an_impossible_value_is_a_usage_error_naming_the_field():
    with pytest.raises(UsageError, match="codegen_opt"):
        resolve_config(RECORDED, {"codegen_opt": 7}, {})


# -- report formatting ---------------------------------------------------------------------------------


def test_report_rows_give_median_min_max_and_resources():
    result = ExperimentResult(
        exec_time=[3e-3, 1e-3, 2e-3],
        warmup_time=[5e-3],
        verified=True,
        executed=True,
        reg_usage=32,
        opt_time=0.25,
        obj_size=4096,
    )
    rows = dict(result_rows(result, RECORDED))
    assert rows["verified"] == "yes"
    assert rows["median time"] == "2.000 ms"
    assert rows["min / max time"] == "1.000 ms / 3.000 ms"
    assert rows["runs"] == "3 timed + 1 warm-up"
    assert rows["registers / local / const / shared"] == "32 / - / - / -"
    assert "250.000 ms" in rows["compile (preprocess / opt / codegen)"]


def test_report_of_a_failed_experiment_names_the_kind_and_the_mismatches():
    result = ExperimentResult(
        executed=True,
        failed=True,
        error_kind="verify",
        error="kernel 'k' did not reproduce",
        mismatches=["region 0x10 [arg 3 (y)] (16 B): 4 bytes differ"],
    )
    rows = result_rows(result, RECORDED)
    assert ("verified", "NO") in rows
    assert ("failed", "verify: kernel 'k' did not reproduce") in rows
    assert any(label == "mismatch" and "arg 3 (y)" in value for label, value in rows)


def test_json_report_carries_the_speedup_over_the_recorded_binary():
    result = ExperimentResult(exec_time=[1.0, 1.0, 1.0], verified=True, executed=True)
    binary = ExperimentResult(exec_time=[2.0, 2.0, 2.0], verified=True, executed=True)
    data = json.loads(result_json(result, RECORDED, database="db.json", record_id="abc", kernel="k", baseline=binary))
    assert data["speedup_vs_recorded_binary"] == 2.0
    assert data["config_hash"] == RECORDED.hash()
    assert ExperimentResult.from_dict(data["result"]) == result


def test_the_report_puts_the_in_application_time_of_the_repeats_beside_the_replay_time():
    result = ExperimentResult(exec_time=[2.1e-5, 2.0e-5, 2.2e-5], verified=True, executed=True, timer="events")
    # the first launch (timed right after the prologue capture) is left out where repeats exist
    rows = dict(result_rows(result, RECORDED, app_times=[9.0e-5, 1.8e-5, 2.2e-5, 2.0e-5]))
    assert rows["in the application"] == (
        "20.0 us median of 3 repeated launches (the first left out), timed by events; replay / application 1.050"
    )
    assert rows["runs"] == "3 timed + 0 warm-up, timed by events"
    assert dict(result_rows(result, RECORDED, app_times=[2.5e-5]))["in the application"] == (
        "25.0 us median of 1 launches, timed by events; replay / application 0.840"
    )
    assert "in the application" not in dict(result_rows(result, RECORDED))  # unknown: no row
    data = json.loads(
        result_json(
            result, RECORDED, database="db.json", record_id="abc", kernel="k", app_times=[4.0e-5, 1.8e-5, 2.2e-5]
        )
    )
    assert abs(data["app_median_time"] - 2.0e-5) < 1e-18 and abs(data["replay_vs_app"] - 1.05) < 1e-9
    assert data["app_timer"] == "events" and data["result"]["timer"] == "events"


def test_the_report_says_when_the_application_and_the_replay_were_timed_by_different_timers():
    result = ExperimentResult(exec_time=[3.5e-6], verified=True, executed=True, timer="events")
    row = dict(result_rows(result, RECORDED, app_times=[1.1e-6, 1.2e-6], app_timer="cupti"))["in the application"]
    assert "timed by cupti (this replay by events: not like for like; --timer cupti is)" in row
    same = dict(
        result_rows(attrs.evolve(result, timer="cupti"), RECORDED, app_times=[1.1e-6, 1.2e-6], app_timer="cupti")
    )["in the application"]
    assert "not like for like" not in same and same.startswith("1.2 us median of 1 repeated launches")


def test_replay_needs_a_record_db():
    outcome = CliRunner().invoke(cli, ["replay"])
    assert outcome.exit_code == 2
    assert "--record-db" in outcome.output


def test_annotate_needs_exactly_one_region_selector(tmp_path):
    outcome = CliRunner().invoke(cli, ["annotate", str(tmp_path)])
    assert outcome.exit_code == 2
    assert "--region ADDR or --arg INDEX" in outcome.output


# -- end to end on the host backend ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    """The saxpy example captured on the host backend by `mneme capture` (a smaller n, same kernel)."""
    folder = tmp_path_factory.mktemp("saxpy")
    spec = folder / "capture.yaml"
    shutil.copyfile(EXAMPLE / "saxpy.ll", folder / "saxpy.ll")  # a description's IR lies in its folder
    spec.write_text(
        "ir: saxpy.ll\nkernel: saxpy\ngrid: [8]\nblock: [64]\n"
        "args:\n  - 10000\n  - 2.0\n  - {name: x, random: {dtype: float32, shape: [10000], seed: 1}}\n"
        "  - {name: y, random: {dtype: float32, shape: [10000], seed: 2}}\n"
    )
    outcome = CliRunner().invoke(cli, ["capture", str(spec), "-o", str(folder / "rec"), "--backend", "host"])
    assert outcome.exit_code == 0, outcome.output
    return folder / "rec"


def test_capture_then_replay_verifies_and_prints_a_table(saxpy_db):
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--iterations", "2"])
    assert outcome.exit_code == 0, outcome.output
    assert "verified" in outcome.output and "yes" in outcome.output
    assert "median time" in outcome.output


def test_replay_at_another_block_size_verifies_a_grid_stride_kernel(saxpy_db):
    outcome = CliRunner().invoke(
        cli, ["replay", "-rdb", str(saxpy_db), "--block-dim-x", "128", "--grid-dim-x", "3", "--json", "default<O2>"]
    )
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.output)
    assert data["config"]["block"]["x"] == 128 and data["config"]["passes"] == "default<O2>"
    assert data["result"]["verified"] and len(data["result"]["exec_time"]) == 3


def test_replay_times_from_a_primed_cache_and_refuses_an_unknown_state(saxpy_db):
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--cache", "primed", "--json"])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output)["result"]["verified"]
    bad = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--cache", "hot"])
    assert bad.exit_code == 2 and "'hot' is not one of 'flushed', 'warm', 'primed'" in bad.output


def test_replay_names_its_timer_and_refuses_one_the_backend_does_not_have(saxpy_db):
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--json"])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output)["result"]["timer"] == "host-clock"  # the host backend's only timer
    bad = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--timer", "cupti"])
    assert bad.exit_code == 2 and not bad.output.count("Traceback")
    assert "the host backend has no timer 'cupti'; use one of auto, host-clock" in bad.output


@pytest.fixture(scope="module")
def stencil_db(tmp_path_factory):
    """The corpus's 2D stencil (no grid-stride loop: the grid must cover the domain) captured on host."""
    from irbuild import build_cuda_ir

    from mneme import capture

    folder = tmp_path_factory.mktemp("stencil")
    grid_in = np.random.default_rng(3).uniform(0, 1, (32, 32)).astype(np.float32)
    return capture.capture(
        build_cuda_ir("stencil2d"),
        "stencil2d",
        (4, 4),
        (8, 8),
        [grid_in, np.zeros_like(grid_in), 32, 32],
        folder,
        backend="host",
        names=["in", "out", "nx", "ny"],
    )


def test_replay_exits_non_zero_when_verification_fails_and_names_the_region(stencil_db):
    ok = CliRunner().invoke(cli, ["replay", "-rdb", str(stencil_db), "--iterations", "1"])
    assert ok.exit_code == 0, ok.output
    half = CliRunner().invoke(cli, ["replay", "-rdb", str(stencil_db), "--grid-dim-x", "2", "--json"])
    assert half.exit_code == 3  # not verified: distinct from a crash (1) and bad input (2), issue 27
    result = json.loads(half.output)["result"]
    assert not result["verified"] and result["error_kind"] == "verify"
    assert len(result["mismatches"]) == 1 and "arg 1 (out)" in result["mismatches"][0]


def test_an_invalid_configuration_is_reported_and_exits_non_zero(saxpy_db):
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--set-launch-bounds", "--max-threads", "32"])
    assert outcome.exit_code == 2  # invalid input (issue 27)
    assert "invalid" in outcome.output


def test_replay_writes_the_variant_ir(saxpy_db, tmp_path):
    out = tmp_path / "variant.ll"
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--specialize", "--output-ll", str(out)])
    assert outcome.exit_code == 0, outcome.output
    text = out.read_text()
    assert "define" in text and "saxpy" in text


def test_replay_of_a_binary_mode_on_host_says_what_to_do(saxpy_db):
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(saxpy_db), "--mode", "cubin"])
    assert outcome.exit_code == 2
    assert "--mode ir" in outcome.output


def test_annotate_by_argument_changes_only_that_regions_policy(saxpy_db, tmp_path):
    import shutil

    from mneme.core.recording import load_recording
    from mneme.core.snapshot import Snapshot

    copy = tmp_path / "rec"
    shutil.copytree(saxpy_db, copy)
    outcome = CliRunner().invoke(
        cli,
        ["annotate", str(copy), "--arg", "3", "--dtype", "f32", "--threshold", "1e-5", "--relative", "--norm", "Linf"],
    )
    assert outcome.exit_code == 0, outcome.output
    rec = load_recording(copy)
    inst = rec.select()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    policies = {r.addr: r.policy for r in epilogue.regions}
    y_addr = int.from_bytes(inst.args[rec.args[3].offset : rec.args[3].offset + 8], "little")
    x_addr = int.from_bytes(inst.args[rec.args[2].offset : rec.args[2].offset + 8], "little")
    assert policies[y_addr].dtype == "f32" and policies[y_addr].relative and policies[y_addr].norm == "Linf"
    assert policies[x_addr].exact
    # The contents survive the rewrite: the replay still verifies.
    outcome = CliRunner().invoke(cli, ["replay", "-rdb", str(copy), "--iterations", "1"])
    assert outcome.exit_code == 0, outcome.output
    expected = np.frombuffer(epilogue.read_region(y_addr), dtype=np.float32)
    assert expected.shape == (10000,)
