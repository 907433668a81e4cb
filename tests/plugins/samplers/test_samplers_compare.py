"""Search strategies tried offline on the committed sweeps: `mneme samplers compare` (as CI runs it) and
`mneme tune --simulate`; the oracle answers from real measurements, no device."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mneme.core.cli import cli
from mneme.core.tuning.simulate import simulate
from mneme.core.tuning.sweep import Sweep
from paths import DATA

SWEEPS = sorted((DATA / "sweeps").glob("*.json"))
HOST = DATA / "sweeps" / "host-saxpy-quick.json"


def invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def invoke_json(*args):
    """Exit code, the JSON document on stdout, and everything printed (stderr's log lines too)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else None, result.output


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_samplers_compare_runs_on_every_committed_sweep(sweep):
    code, data, out = invoke_json(
        "samplers",
        "compare",
        "--study",
        sweep,
        "--samplers",
        "optuna:tpe,random,exhaustive",
        "--budget",
        "20%,100%",
        "--repeats",
        3,
        "--no-noise",
        "--json",
    )
    assert code == 0, out
    rows = {(r["sampler"], r["budget"]): r for r in data}
    assert len(rows) == 6
    for row in rows.values():
        assert 0.0 < row["fraction_ci"][0] <= row["fraction"] <= row["fraction_ci"][1] <= 1.0
        assert 0.0 <= row["reached_ci"][0] <= row["reached"] <= row["reached_ci"][1] <= 1.0
    # A budget of every point finds the optimum when each answer is the point's median.
    full = rows[("exhaustive", "100%")]
    assert full["fraction"] == 1.0 and full["reached"] == 1.0 and full["duplicates"] == 0


def test_the_table_names_samplers_that_are_not_installed_instead_of_failing():
    code, out = invoke(
        "samplers", "compare", "--study", HOST, "--samplers", "random,nosuchfamily:x", "--budget", "5", "--repeats", 2
    )
    assert code == 0, out
    assert "| random | 5 |" in out and "unavailable" in out


def test_a_simulated_budget_counts_distinct_configurations_and_duplicates_are_free():
    sweep = Sweep.load(HOST)
    run = simulate(sweep, "random", len(sweep.points), seed=1, noise=False)
    # Random draws repeat points long before all 44 are seen; every repeat is answered, none is counted.
    assert run.duplicates > 0
    assert run.trials == len(sweep.points) or run.stop == "exhausted"
    assert run.missing == 0  # the space rebuilt from the recording is the sweep's space
    assert run.fraction == 1.0 if run.trials == len(sweep.points) else 0.0 < run.fraction <= 1.0


def test_noise_makes_a_sampler_pick_by_what_it_observed_not_by_the_truth():
    sweep = Sweep.load(HOST)
    quiet = {simulate(sweep, "exhaustive", len(sweep.points), seed=s, noise=False).pick for s in range(3)}
    noisy = [simulate(sweep, "exhaustive", len(sweep.points), seed=s, noise=True) for s in range(8)]
    assert len(quiet) == 1  # without noise, the optimum every time
    assert all(0.0 < r.fraction <= 1.0 for r in noisy)


def test_tune_simulate_replays_a_sweep_without_a_device():
    code, out = invoke("tune", "--simulate", HOST, "--sampler", "exhaustive", "--trials", 44, "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["trials"] == 44 and data["optimum"] > 0 and 0.0 < data["fraction"] <= 1.0


def test_a_sampler_that_cannot_load_is_a_row_with_the_reason_and_the_others_still_run():
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here, so optuna:gp loads")
    code, data, out = invoke_json(
        "samplers",
        "compare",
        "--study",
        HOST,
        "--samplers",
        "optuna:gp,random,exhaustive",
        "--budget",
        "20%",
        "--repeats",
        2,
        "--no-noise",
        "--json",
    )
    assert code == 0, out
    rows = {r["sampler"]: r for r in data}
    assert "torch" in rows["optuna:gp"]["error"]
    assert rows["random"]["fraction"] > 0 and rows["exhaustive"]["fraction"] > 0


def test_third_party_warnings_are_counted_once_per_distinct_message_not_streamed():
    pytest.importorskip("cmaes")
    code, data, out = invoke_json(
        "samplers",
        "compare",
        "--study",
        HOST,
        "--samplers",
        "optuna:cmaes",
        "--budget",
        "50%",
        "--repeats",
        3,
        "--no-noise",
        "--json",
    )
    assert code == 0, out
    (row,) = data
    # CMA-ES cannot sample the categorical specialize flags: Optuna warns at every trial of every seed,
    # about each flag; that is one distinct message, counted.
    ((message, count),) = row["warnings"].items()
    assert count >= 20 and message.startswith("optuna: The parameter `*` in Trial#N is sampled independently")
    assert "Trial#1 " not in out and out.count("sampled independently") <= 2  # the log line and the row
    assert row["fraction"] > 0


def test_a_finalizers_resource_warning_is_not_counted_as_the_samplers():
    # A connection some earlier code leaked can be collected during a comparison: its ResourceWarning
    # goes on to Python's handling, the samplers' row does not count it, and --json stays one document.
    import warnings

    from mneme.plugins.sampler_commands import collected_warnings

    with pytest.warns(ResourceWarning, match="left open"):
        with collected_warnings() as counts:
            warnings.warn("a connection was left open", ResourceWarning)
            warnings.warn("independent sampling", UserWarning)
    assert dict(counts) == {("UserWarning", "independent sampling"): 1}
