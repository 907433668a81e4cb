"""The original's current tuning API and `mneme tune` options: session, built-in spaces, result store, layouts."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import RecordedExecution
from mneme.tuning.builtin_spaces import (
    BuiltinTuneSearchSpace,
    iter_finite_params,
    parse_range,
    shape_to_dim3,
)
from mneme.tuning.launch_candidates import (
    launch_layout_key,
    normalize_launch_candidates,
)
from mneme.tuning.result_store import ResultStore
from mneme.tuning.session import (
    TuneOptions,
    TuningSession,
    classify_result,
    metric_value,
    stored_result_and_metric,
)

from .conftest import run_mneme

USER_SPACE = """
from mneme.mneme_types import ExperimentConfiguration
from mneme.tuning.search_space import CategoricalParam, SearchSpace


class Threads(SearchSpace):
    def __init__(self, kernel, widths=(64, 128)):
        self.kernel = kernel
        self.widths = list(widths)

    def dimensions(self):
        return {"block_x": CategoricalParam("block_x", self.widths)}

    def derived(self, params):
        total = self.kernel.grid_dim.x * self.kernel.block_dim.x
        return ExperimentConfiguration(grid={"x": total // params["block_x"]}, block={"x": params["block_x"]})

    def constraints(self, params):
        return True
"""


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_result_store_round_trips_the_original_files(tmp_path):
    store = ResultStore(str(tmp_path / "r"))
    assert (tmp_path / "r" / "logs" / "tune.log").exists()
    store.write_config({"metric": "min"})
    store.write_baseline({"config": ExperimentConfiguration(grid=dim3(2), block=dim3(4)).to_dict()})
    store.append_trial({"trial": 0, "config_hash": "abc", "result": ExperimentResult(verified=True).to_dict()})
    store.append_trial({"trial": 1, "config_hash": "def"})
    assert store.load_config() == {"metric": "min"}
    assert store.load_baseline()["config"]["grid"] == {"x": 2, "y": 1, "z": 1}
    assert [t["trial"] for t in store.load_trials()] == [0, 1]
    assert store.completed_hashes() == {"abc", "def"}
    # A trial written by the documented version (its digest counts codegen_method) resumes too.
    config = ExperimentConfiguration(grid=dim3(2), block=dim3(4))
    store.append_trial({"trial": 2, "config_hash": config.documented_hash(), "config": config.documented_dict()})
    assert config.hash() in store.completed_hashes() and config.documented_hash() in store.completed_hashes()
    assert ResultStore(str(tmp_path / "empty")).load_config() is None


def test_metric_takes_the_timed_runs_after_the_warmups():
    result = ExperimentResult(exec_time=[100, 90, 7, 5, 6], verified=True)
    assert metric_value(result, "min", 3) == 5 and metric_value(result, "mean", 3) == 6
    assert metric_value(result, "median", 3) == 6 and metric_value(ExperimentResult(), "mean", 3) is None
    assert classify_result(result) == "verified"
    assert classify_result(ExperimentResult(failed=True, error="LLVM refuses pipeline")) == "compile_error"
    assert classify_result(ExperimentResult(executed=True)) == "failed_verification"
    stored, metric = stored_result_and_metric(dict(result.to_dict(), metric=6.0))  # a trials.jsonl entry
    assert (stored, metric) == (result, 6.0)


def test_builtin_space_block_shapes_keep_the_recorded_work_covered(saxpy_db):
    kernel = next(iter(RecordedExecution.from_json(str(saxpy_db)).values()))
    space = BuiltinTuneSearchSpace(kernel, preset="standard", launch_dim="x", launch_safety="aggressive")
    shapes = space.dimensions()["block_shape"].choices
    assert "256x1x1" in shapes and "1024x1x1" in shapes
    work = kernel.grid_dim.x * kernel.block_dim.x
    configs = [space.derived(p) for p in iter_finite_params(space)]
    assert configs and all(c.grid.x * c.block.x >= work and c.grid.x * c.block.x - work < c.block.x for c in configs)
    assert {c.passes for c in configs} == {"default<O3>", "default<O2>", "default<O1>", "default<Os>", "default<Oz>"}
    assert space.baseline().block == kernel.block_dim and space.baseline().passes == "default<O3>"
    assert BuiltinTuneSearchSpace(kernel, preset="compiler").dimensions()["block_shape"].value == "256x1x1"
    with pytest.raises(ValueError, match="LOW:HIGH"):
        parse_range("3")
    with pytest.raises(ValueError, match="XxYxZ"):
        shape_to_dim3("64")


def test_tune_options_check_the_sampler_and_trials_as_the_original():
    with pytest.raises(ValueError, match="--trials is required"):
        TuneOptions(record_database="db.json", sampler="random")
    with pytest.raises(ValueError, match="cannot be used with grid"):
        TuneOptions(record_database="db.json", sampler="grid", trials=3)
    with pytest.raises(ValueError, match="--metric"):
        TuneOptions(record_database="db.json", trials=2, metric="p99")


def test_original_options_run_the_original_tuner_and_write_its_layout(saxpy_db, tmp_path):
    out = tmp_path / "run"
    done = run_mneme(
        "tune",
        "-rdb",
        str(saxpy_db),
        "--sampler",
        "random",
        "--trials",
        "3",
        "--seed",
        "4",
        "--launch-dim",
        "x",
        "--warmup",
        "1",
        "--iterations",
        "3",
        "--metric",
        "min",
        "--results-dir",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "search_space.json",
        "baseline.json",
        "trials.jsonl",
        "best.json",
        "summary.json",
        "proteus_tuned_kernels.json",
    } <= names and "session.json" not in names
    config = json.loads((out / "config.json").read_text())
    assert (config["launch_dim"], config["warmup"], config["metric"]) == ("x", 1, "min")
    trials = lines(out / "trials.jsonl")
    assert len(trials) == 3
    for trial in trials:
        runs = trial["result"]["exec_time"]
        assert len(runs) == 3 + 1  # the warm-up first, then the timed runs
        if trial["status"] == "verified":
            assert trial["result"]["metric"] == min(runs[1:])
        assert trial["config_hash"] == ExperimentConfiguration.from_dict(trial["config"]).hash()
    baseline = json.loads((out / "baseline.json").read_text())
    assert baseline["result"]["verified"] and baseline["config"]["block"]["x"] == 256
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_trials_completed"] == 3 and summary["status"] == "success"


def test_space_module_takes_a_users_original_search_space(saxpy_db, tmp_path):
    (tmp_path / "space.py").write_text(USER_SPACE)
    out = tmp_path / "run"
    done = run_mneme(
        "tune",
        "-rdb",
        str(saxpy_db),
        "--space-module",
        f"{tmp_path / 'space.py'}:Threads",
        "--space-arg",
        "widths=[32, 512]",
        "--sampler",
        "exhaustive",
        "--results-dir",
        str(out),
        "--no-proteus-output",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    trials = lines(out / "trials.jsonl")
    assert sorted(t["config"]["block"]["x"] for t in trials) == [32, 512]
    assert all(t["status"] == "verified" for t in trials)
    assert json.loads((out / "search_space.json").read_text())["type"] == "custom"
    assert not (out / "proteus_tuned_kernels.json").exists()


def test_layout_both_writes_the_original_files_beside_mnemes_own(saxpy_db, tmp_path):
    out = tmp_path / "run"
    done = run_mneme(
        "tune",
        "-rdb",
        str(saxpy_db),
        "--space",
        "launch",
        "--sampler",
        "random",
        "--trials",
        "3",
        "--seed",
        "1",
        "--results",
        str(out),
        "--layout",
        "both",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["best"]
    assert {
        "session.json",
        "summary.json",
        "best.json",
        "config.json",
        "baseline.json",
        "trials.jsonl",
        "search_space.json",
    } <= {p.name for p in out.iterdir()}
    trials = lines(out / "trials.jsonl")
    assert len(trials) == 3  # --trials counts distinct measured configurations; the baseline is apart
    baseline = json.loads((out / "baseline.json").read_text())
    timed = baseline["result"]["exec_time"][-3:]  # the original's metric: the last `iterations` runs
    assert baseline["result"]["verified"] and baseline["result"]["metric"] == statistics.mean(timed)
    for trial in trials:
        assert trial["config_hash"] == ExperimentConfiguration.from_dict(trial["config"]).hash()
        assert all(isinstance(t, int) for t in trial["result"]["exec_time"])  # the original's integer ns
    assert json.loads((out / "summary.json").read_text()).get("schema") is not None  # Mneme's summary kept


def test_an_original_option_with_mnemes_layout_is_refused_naming_the_way(saxpy_db, tmp_path):
    done = run_mneme("tune", "-rdb", str(saxpy_db), "--metric", "min", "--layout", "mneme")
    assert done.returncode == 2 and "--layout original" in done.stderr


def test_an_invalid_original_configuration_exits_3_as_the_original(saxpy_db, tmp_path):
    done = run_mneme(
        "tune",
        "-rdb",
        str(saxpy_db),
        "--layout",
        "original",
        "--sampler",
        "random",
        "--results-dir",
        str(tmp_path / "r"),
    )
    assert done.returncode == 3 and "--trials is required" in done.stdout


def test_session_api_runs_in_process_and_resumes_without_repeating(saxpy_db, tmp_path):
    options = TuneOptions(
        record_database=str(saxpy_db),
        sampler="exhaustive",
        space_preset="compiler",
        fixed_codegen_opt=3,
        passes=["default<O1>", "function(instcombine),gvn"],
        iterations=2,
        results_dir=str(tmp_path / "r"),
        quiet=True,
        proteus_enabled=False,
    )
    assert TuningSession(options).run() == 0
    first = lines(tmp_path / "r" / "trials.jsonl")
    assert sorted(t["config"]["passes"] for t in first) == ["default<O1>", "function(instcombine),gvn"]
    assert all(t["status"] == "verified" for t in first)
    again = TuneOptions(**{**options.__dict__, "resume": True})
    assert TuningSession(again).run() == 0
    assert len(lines(tmp_path / "r" / "trials.jsonl")) == 2  # nothing measured twice


def test_mnemes_space_option_points_an_original_space_to_its_tuner(saxpy_db, tmp_path):
    (tmp_path / "space.py").write_text(USER_SPACE)
    done = run_mneme("tune", "-rdb", str(saxpy_db), "--space", f"{tmp_path / 'space.py'}:Threads", "--trials", "1")
    assert done.returncode == 2 and "--space-module" in done.stderr and "original Mneme API" in done.stderr


def test_launch_candidates_follow_the_current_releases_rules(saxpy_db):
    kernel = next(iter(RecordedExecution.from_json(str(saxpy_db)).values()))
    work = kernel.grid_dim.x * kernel.block_dim.x
    given = [{"block": [128, 1, 1]}, {"block": [128, 1, 1]}, {"block": [64, 1, 1], "grid": [3, 1, 1]}]
    assert normalize_launch_candidates(given) == [{"block": [128, 1, 1]}, {"block": [64, 1, 1], "grid": [3, 1, 1]}]
    resolved = normalize_launch_candidates(given, recorded_kernel=kernel)
    assert resolved[0] == {"block": [128, 1, 1], "grid": [-(-work // 128), 1, 1]}
    assert launch_layout_key([64, 1, 1], [3, 1, 1]) == "64x1x1/3x1x1"
    for bad, message in (
        ([{"grid": [1, 1, 1]}], "requires a block"),
        ([{"block": [True, 1, 1]}], "three integers"),
        ([{"block": [64, 1]}], "three integers"),
        ([{"block": [2048, 1, 1]}], "limits"),
        ([{"block": [64, 32, 1]}], "threads-per-block"),
        ([{"block": [64, 1, 1], "x": 1}], "only"),
        ({"block": [64, 1, 1]}, "a list"),
    ):
        with pytest.raises(ValueError, match=message):
            normalize_launch_candidates(bad)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sampler": "exhaustive", "trials": None}, "random or tpe"),
        ({"space_module": "custom.py:Space"}, "custom search space"),
        ({"require_verified_baseline": False, "objective": "speedup"}, "objective='time'"),
    ],
)
def test_current_release_options_refuse_what_it_refuses(saxpy_db, overrides, message):
    values = {
        "record_database": str(saxpy_db),
        "sampler": "random",
        "trials": 2,
        "launch_candidates": [{"block": [64, 1, 1]}],
        **overrides,
    }
    with pytest.raises(ValueError, match=message):
        TuneOptions(**values)


def test_supplied_launch_layouts_run_first_then_the_sampler(saxpy_db, tmp_path):
    options = TuneOptions(
        record_database=str(saxpy_db),
        sampler="random",
        trials=1,
        seed=3,
        space_preset="launch",
        launch_candidates=[{"block": [128, 1, 1]}, {"block": [512, 1, 1]}],
        iterations=2,
        results_dir=str(tmp_path / "r"),
        quiet=True,
    )
    assert TuningSession(options).run() == 0
    trials = lines(tmp_path / "r" / "trials.jsonl")
    assert [t["trial"] for t in trials] == [0, 1, 2]
    assert [t["params"].get("launch_layout") for t in trials[:2]] == [
        launch_layout_key([128, 1, 1], [t["config"]["grid"]["x"], 1, 1]) for t in trials[:1]
    ] + [launch_layout_key([512, 1, 1], [trials[1]["config"]["grid"]["x"], 1, 1])]
    assert [t["config"]["block"]["x"] for t in trials[:2]] == [128, 512]
    assert all(t["status"] == "verified" for t in trials)
    assert "launch_layout" not in trials[2]["params"] or trials[2]["params"]["launch_layout"] != ""
    usage = (tmp_path / "r" / "proteus_usage.txt").read_text()  # the current release's usage file
    assert "PROTEUS_TUNED_KERNELS=" in usage and "annotate" in usage


def test_an_unverified_baseline_goes_on_searching_when_not_required(saxpy_db, tmp_path):
    # A block of no threads: the baseline is a failed experiment, never verified.
    space = tmp_path / "space.py"
    space.write_text(
        USER_SPACE
        + """

    def baseline(self):
        return ExperimentConfiguration(grid={"x": 1}, block={"x": 0})
"""
    )
    base = {
        "record_database": str(saxpy_db),
        "sampler": "grid",
        "space_module": f"{space}:Threads",
        "iterations": 2,
        "quiet": True,
        "proteus_enabled": False,
    }
    assert TuningSession(TuneOptions(**base, results_dir=str(tmp_path / "a"))).run() == 1
    assert not (tmp_path / "a" / "trials.jsonl").exists()
    relaxed = TuneOptions(**base, results_dir=str(tmp_path / "b"), require_verified_baseline=False)
    assert TuningSession(relaxed).run() == 0
    trials = lines(tmp_path / "b" / "trials.jsonl")
    assert len(trials) == 2 and all(t["status"] == "verified" and t["speedup"] is None for t in trials)
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["best_speedup"] is None


def test_a_configuration_the_space_cannot_derive_is_an_invalid_trial_and_the_search_goes_on(saxpy_db, tmp_path):
    space = tmp_path / "space.py"
    space.write_text(
        USER_SPACE.replace(
            """    def derived(self, params):
""",
            """    def derived(self, params):
        if params["block_x"] == 64:
            raise ValueError("no 64-thread blocks here")
""",
        ).replace("widths=(64, 128)", "widths=(64, 128, 256)")
    )
    options = TuneOptions(
        record_database=str(saxpy_db),
        sampler="grid",
        space_module=f"{space}:Threads",
        iterations=2,
        results_dir=str(tmp_path / "r"),
        quiet=True,
        proteus_enabled=False,
    )
    assert TuningSession(options).run() == 0
    trials = lines(tmp_path / "r" / "trials.jsonl")
    by_status = sorted((t["status"], t["params"]["block_x"]) for t in trials)
    assert by_status == [("invalid_config", 64), ("verified", 128), ("verified", 256)]
    (invalid,) = [t for t in trials if t["status"] == "invalid_config"]
    assert "no 64-thread blocks here" in invalid["result"]["error"] and invalid["result"]["executed"] is False
