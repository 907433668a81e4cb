"""Sampler plugins behind one ask/tell interface: exhaustive, random, optuna:*, nevergrad:*."""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from mneme.core import plugins
from mneme.core.errors import UsageError
from mneme.core.records import RecordedExecution
from mneme.core.tuning.samplers import create_sampler
from mneme.core.tuning.store import ResultStore
from mneme.core.tuning.space import load_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def space_of(tmp_path, name="launch", **options):
    rec = RecordedExecution.create(tmp_path, kernel_name="k", static_hash="s", backend="host", arch="x86_64")
    inst = rec.add_instance(
        grid=(64, 1, 1), block=(64, 1, 1), shared_mem=0, args=b"", prologue=tmp_path / "p", epilogue=tmp_path / "e"
    )
    return load_space(name, rec, inst, options)


def cost(config) -> float:
    """A deterministic objective with its optimum at block 128 and launch bounds at the block size."""
    bound = config.max_threads if config.set_launch_bounds else 2048
    return abs(config.block.x - 128) / 128 + 1.0 + (0.5 if bound != config.block.x else 0.0)


def drive(sampler, space, trials):
    """Ask/tell as a session does: infeasible points are named to the sampler and told a penalty without running."""
    sampler.bind(space, parallel=1, budget=trials)
    seen = []
    for _ in range(trials):
        ask = sampler.ask()
        if ask is None:
            break
        config = space.feasible(space.decode(ask.encoded))
        value = 100.0 if config is None else cost(config)
        if config is None:
            sampler.infeasible(ask.encoded)
        sampler.tell(ask, value)
        if config is not None:
            seen.append((value, config))
    return seen


def test_every_builtin_sampler_family_is_a_plugin():
    assert {"guided", "exhaustive", "random", "optuna", "nevergrad"} <= set(plugins.names("sampler"))


def test_exhaustive_visits_every_feasible_configuration_once_then_stops(tmp_path):
    space = space_of(tmp_path, axes="x")
    total = sum(1 for _ in space.sample_exhaustive())
    seen = drive(create_sampler("exhaustive"), space, trials=10_000)
    assert len(seen) == total
    assert len({c.hash() for _, c in seen}) == total
    assert min(v for v, _ in seen) == 1.0  # the optimum is in the space


def test_exhaustive_skips_points_observed_from_earlier_runs_or_other_processes(tmp_path):
    space = space_of(tmp_path, "quick")
    sampler = create_sampler("exhaustive")
    sampler.bind(space)
    first = sampler.ask().encoded
    other = create_sampler("exhaustive")
    other.bind(space)
    other.observe(first, 1.0)
    assert other.ask().encoded != first


def test_random_sampler_is_reproducible_with_a_seed(tmp_path):
    space = space_of(tmp_path)
    a = [c.hash() for _, c in drive(create_sampler("random", seed=7), space, 15)]
    b = [c.hash() for _, c in drive(create_sampler("random", seed=7), space, 15)]
    assert a == b


@pytest.mark.parametrize(
    "spec",
    [
        "optuna:tpe",
        "optuna:nsga2",
        "optuna:qmc",
        "optuna:random",
        "optuna:cmaes",
        "optuna:TPESampler",
        "optuna:grid",
        "optuna:bruteforce",
    ],
)
def test_optuna_samplers_propose_through_their_ask_tell_adapter(tmp_path, spec):
    space = space_of(tmp_path)
    sampler = create_sampler(spec, seed=1)
    seen = drive(sampler, space, 25)
    assert seen and all(c.is_valid() for _, c in seen)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_optuna_gp_without_torch_says_what_to_install():
    with pytest.raises(UsageError, match="pip install torch"):
        create_sampler("optuna:gp")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch: optuna:gp's model")
def test_optuna_gp_proposes_through_its_adapter(tmp_path):
    assert drive(create_sampler("optuna:gp", seed=1), space_of(tmp_path), 12)


@pytest.mark.parametrize(
    "spec", ["nevergrad:NGOpt", "nevergrad:OnePlusOne", "nevergrad:TwoPointsDE", "nevergrad:RandomSearch"]
)
def test_nevergrad_optimizers_ask_points_inside_the_space(tmp_path, spec):
    space = space_of(tmp_path)
    seen = drive(create_sampler(spec, seed=2), space, 30)
    dists = space.distributions()
    assert seen
    for _, config in seen:
        assert config.block.x in space.dims()["block_x"].values
    assert all(
        name in dists
        for name in space.encode({"block_x": 64, "set_launch_bounds": False, "max_threads": 64, "min_blocks_per_sm": 1})
    )


def test_nevergrad_learns_from_points_it_did_not_ask(tmp_path):
    space = space_of(tmp_path)
    sampler = create_sampler("nevergrad:NGOpt", seed=0)
    sampler.bind(space, budget=10)
    point = space.sample_exhaustive().__next__()
    sampler.observe(point, 1.0)
    assert sampler._optimizer.num_tell == 1


def test_unknown_samplers_are_usage_errors_with_suggestions():
    with pytest.raises(UsageError, match="known families"):
        create_sampler("simulated-annealing")
    with pytest.raises(UsageError, match="did you mean NGOpt"):
        create_sampler("nevergrad:ngopt")
    with pytest.raises(UsageError, match="unknown Optuna sampler"):
        create_sampler("optuna:nosuch")
    with pytest.raises(UsageError, match="no variants"):
        create_sampler("exhaustive:fast")


def test_the_store_records_the_point_a_sampler_chose_after_the_points_queued_again(tmp_path):
    space = space_of(tmp_path)
    store, _ = ResultStore.create_or_load(f"sqlite:///{tmp_path / 'study.db'}", "s")
    first, second = list(space.sample_exhaustive())[:2]
    assert store.ask(space.distributions(), first).params == first
    store.enqueue(second)  # a dead process's point: whoever asks next runs it
    assert store.ask(space.distributions(), first).params == second
    assert store.ask(space.distributions(), first).params == first


def test_an_optuna_sampler_learns_from_results_it_did_not_ask_and_from_infeasible_points(tmp_path):
    space = space_of(tmp_path)
    sampler = create_sampler("optuna:tpe", seed=0)
    sampler.bind(space, budget=10)
    points = list(space.sample_exhaustive())[:3]
    sampler.observe(points[0], 1.0)
    sampler.observe(points[1], None)  # still running elsewhere: nothing to learn yet
    sampler.infeasible(points[2])
    sampler.observe(points[2], 100.0)
    ask = sampler.ask()
    sampler.infeasible(ask.encoded)
    sampler.tell(ask, 100.0)
    trials = sampler._study.trials
    assert [t.params for t in trials] == [points[0], points[2], ask.encoded]
    assert [t.user_attrs["status"] for t in trials] == ["ok", "infeasible", "infeasible"]
    if hasattr(optuna.trial.Trial, "set_constraint"):
        assert [t.system_attrs.get("constraints:mneme_infeasible") for t in trials] == [-1.0, 1.0, 1.0]


def test_an_optuna_sampler_proposes_the_same_points_with_the_same_seed(tmp_path):
    space = space_of(tmp_path)
    a = [c.hash() for _, c in drive(create_sampler("optuna:tpe", seed=4), space, 15)]
    b = [c.hash() for _, c in drive(create_sampler("optuna:tpe", seed=4), space, 15)]
    assert a == b and len(set(a)) > 1
